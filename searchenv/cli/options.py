"""The option groups every ``searchenv`` command shares: environment, dataset, retriever and sampling.

Each group is declared by one function here, so an option is spelt, defaulted and explained the same way in every
command that has it. The retriever group is generated from the engine catalogue
(:mod:`searchenv.retrievers.catalogue`): ``--retriever`` lists every engine with its one-line help, the flags
(``--engine``, ``--encoder``, ``--index-dir``, ``--index-path``, and any other engine option a command promotes)
carry the catalogue's help for that option, and ``--retriever-option KEY=VALUE`` takes the rest.
:func:`retriever_options` reads them back for one engine, :func:`retriever_options_by_engine` routes them to
several (``encoder`` reaches only the dense engines, ``k1`` only BM25). Nothing here imports a heavy library.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from searchenv.checks import did_you_mean
from searchenv.cli.values import comma_list, key_value, merge_options, positive_int, word_cap
from searchenv.env.defaults import env_defaults
from searchenv.sampling import SamplingConfig

__all__ = [
    "RETRIEVER_FLAGS",
    "SAMPLING_FLAGS",
    "add_dataset_arguments",
    "add_environment_arguments",
    "add_retriever_arguments",
    "add_sampling_arguments",
    "retriever_help",
    "chat_template",
    "retriever_options",
    "retriever_options_by_engine",
]

Parser = argparse.ArgumentParser | argparse._ArgumentGroup

#: The engine options every retriever group has as flags of their own; the others go through --retriever-option.
RETRIEVER_FLAGS: tuple[str, ...] = ("engine", "encoder", "index_dir", "index_path")
_CHAT_TEMPLATE = {"auto": None, "on": True, "off": False}


def add_dataset_arguments(
    parser: Parser,
    *,
    several_datasets: bool = False,
    several_splits: bool = False,
    required: bool = False,
    split_help: str = "split of a named dataset (files have none)",
    limit_help: str | None = None,
) -> None:
    """``--dataset``, ``--split``, ``--data-dir`` and (with ``limit_help``) ``--limit``.

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


def add_environment_arguments(parser: Parser, defaults: Mapping[str, Any] | None = None) -> None:
    """The episode's options of ``SearchQAEnv``: protocol, reward and its keys, budget, limits, error policy."""
    from searchenv.protocol import PROTOCOLS

    default = {**env_defaults(), **(defaults or {})}
    parser.add_argument("--protocol", default=default["protocol"], choices=list(PROTOCOLS), help="prompt and tags")
    parser.add_argument(
        "--reward", default=default["reward"], help="reward spec: a built-in name (em, f1, format, ...) or a file"
    )
    parser.add_argument(
        "--reward-option",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the reward spec, repeatable (e.g. lambda_f=0.4)",
    )
    parser.add_argument("--topk", type=positive_int, default=default["topk"], help="passages per search")
    parser.add_argument("--max-turns", type=positive_int, default=default["max_turns"], help="action budget B")
    parser.add_argument(
        "--budget",
        choices=["actions", "extra-answer-turn"],
        default=default["budget"],
        help="'actions': B actions in all; 'extra-answer-turn': one more action in which a search is not run",
    )
    parser.add_argument(
        "--invalid-hint",
        default=default["invalid_hint"],
        help="corrective text after an invalid action (protocol's own)",
    )
    parser.add_argument(
        "--max-information-words",
        type=word_cap,
        default=default["max_information_words"],
        help="passage words per information block ('none': no cap)",
    )
    parser.add_argument(
        "--max-page-words",
        type=word_cap,
        default=default["max_page_words"],
        help="words of an opened document (<access>, the open tool) shown ('none': no cap)",
    )
    parser.add_argument(
        "--max-query-chars", type=positive_int, default=default["max_query_chars"], help="longer queries are cut"
    )
    parser.add_argument(
        "--on-retrieval-error",
        choices=["observe", "raise"],
        default=default["on_retrieval_error"],
        help="a failed search becomes an observation, or stops the run",
    )


def retriever_help(several: bool = False) -> str:
    """The ``--retriever`` help: every engine of the catalogue with its line, then the other forms a name takes."""
    from searchenv.retrievers.catalogue import ENGINES

    engines = "; ".join(f"{name}: {record.help}" for name, record in ENGINES.items() if record.alias_of is None)
    what = "comma-separated search engines, run in this order" if several else "the search engine"
    return (
        f"{what}: {engines}; or http(s)://HOST:PORT of `searchenv serve`, or package.module:factory "
        "(each engine's options: docs/retrievers.md)"
    )


def _option_help(name: str) -> tuple[type, str]:
    """The type and help of an engine option as the catalogue records it, with the engines that take it."""
    from searchenv.retrievers.catalogue import ENGINES

    takers = [record for record in ENGINES.values() if name in record.options and record.alias_of is None]
    if not takers:
        raise ValueError(f"no engine of the catalogue has an option {name!r}{did_you_mean(name, _all_options())}")
    helps = {record.options[name].help for record in takers}
    who = ", ".join(record.name for record in takers[:3]) + ("…" if len(takers) > 3 else "")
    text = helps.pop() if len(helps) == 1 else f"the {name!r} option of each listed engine that takes one"
    return takers[0].options[name].kind, f"{text} [{who}]"


def _all_options() -> list[str]:
    from searchenv.retrievers.catalogue import ENGINES

    return sorted({name for record in ENGINES.values() for name in record.options})


def add_retriever_arguments(
    parser: argparse.ArgumentParser,
    *,
    several: bool = False,
    default: str | Sequence[str] | None = None,
    corpus_help: str = "passage jsonl of {'id','contents'} rows (default: the world's own corpus)",
    flags: Sequence[str] = RETRIEVER_FLAGS,
    names: Sequence[str] = (),
    flag_names: Mapping[str, Sequence[str]] | None = None,
    option_names: Sequence[str] = (),
    title: str = "retriever (the engine and its options; docs/retrievers.md)",
) -> argparse._ArgumentGroup:
    """The retriever group: ``--retriever`` (or ``--retrievers`` with ``several``), ``--corpus``, a flag per engine
    option in ``flags`` and ``--retriever-option KEY=VALUE``; read back with :func:`retriever_options` or
    :func:`retriever_options_by_engine`.

    Args:
        several: the command runs several engines (a comma list, routed option by option).
        default: the engine(s) when none is given (default: ``SearchQAEnv``'s).
        flags: engine options with a flag of their own (``"ef_search"`` gives ``--ef-search``).
        names, flag_names, option_names: older spellings a command keeps accepting (``--engines``, ``--index``,
            ``--option``).
    """
    group = parser.add_argument_group(title)
    engine_default = env_defaults()["retriever"] if default is None else default
    if several:
        listed = list(engine_default) if not isinstance(engine_default, str) else [engine_default]
        group.add_argument(
            "--retrievers",
            "--retriever",
            *names,
            dest="retrievers",
            type=comma_list(what="an engine name, URL or module:factory"),
            default=listed,
            help=retriever_help(several=True),
        )
    else:
        group.add_argument("--retriever", *names, default=engine_default, help=retriever_help())
    group.add_argument("--corpus", default=None, help=corpus_help)
    for name in flags:
        kind, text = _option_help(name)
        spelling = [f"--{name.replace('_', '-')}", *(flag_names or {}).get(name, ())]
        group.add_argument(*spelling, dest=name, type=kind if kind in (int, float) else str, default=None, help=text)
    group.add_argument(
        "--retriever-option",
        *option_names,
        dest="retriever_option",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="any other engine option, repeatable; VALUE is read as JSON when it can be (seed=1, ef_search=64, "
        "k1=0.9, use_gpu=false, base=bm25 and p=0.5 for the degraded engines)"
        + ("; each goes to every listed engine that takes it" if several else ""),
    )
    parser.set_defaults(retriever_flags=tuple(flags))
    return group


def _flag_pairs(args: argparse.Namespace) -> list[tuple[str, Any]]:
    return [(name, value) for name in args.retriever_flags if (value := getattr(args, name)) is not None]


def retriever_options(args: argparse.Namespace) -> dict[str, Any]:
    """The one engine's options from its flags and ``--retriever-option`` pairs; a flag and a pair that disagree, or
    one key given twice with different values, are refused."""
    options = merge_options(args.retriever_option, "--retriever-option")
    for key, value in _flag_pairs(args):
        if key in options and options[key] != value:
            raise ValueError(f"--{key.replace('_', '-')} and --retriever-option {key}=... disagree; give one")
        options[key] = value
    return options


def retriever_options_by_engine(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Each listed engine's options: every flag and ``--retriever-option`` goes to the engines that take it
    (:func:`searchenv.retrievers.route_options`); one that no listed engine takes is refused, naming the flag."""
    from searchenv.retrievers import route_options

    flags = dict(_flag_pairs(args))
    given = merge_options(args.retriever_option, "--retriever-option")

    def label(key: str) -> str:
        return f"--{key.replace('_', '-')}" if key in flags and key not in given else f"--retriever-option {key}"

    return route_options(args.retrievers, [*flags.items(), *given.items()], label)


#: The sampling flags, one per setting of :class:`searchenv.sampling.SamplingConfig` a command may take.
SAMPLING_FLAGS: tuple[str, ...] = ("temperature", "top_p", "max_new_tokens", "max_total_tokens", "chat_template")
_SAMPLING_HELP = {
    "temperature": (float, "a number", "sampling temperature (0 = greedy)"),
    "top_p": (float, "a number", "nucleus sampling mass (1 = off)"),
    "max_new_tokens": (int, "an integer", "tokens per turn"),
    "max_total_tokens": (int, "an integer", "prompt + response, in tokens"),
}


def _sampling_value(name: str) -> Callable[[str], Any]:
    """The argparse type of a sampling flag: the value is checked by :class:`SamplingConfig` itself (the one
    validation), so ``--max-new-tokens 0`` is refused by argparse as the type refuses ``max_new_tokens=0``."""
    cast, what, _ = _SAMPLING_HELP[name]

    def parse(text: str) -> Any:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        try:
            SamplingConfig(**{name: value})
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    return parse


def add_sampling_arguments(
    parser: Parser,
    *,
    flags: Sequence[str] = SAMPLING_FLAGS,
    temperature: float = 0.0,
    top_p: float = 1.0,
    max_new_tokens: int | None = 128,
    max_total_tokens: int | None = 2048,
    chat_template: str | None = "auto",
    notes: Mapping[str, str] | None = None,
) -> None:
    """How a model samples its turns, the one declaration of these flags: ``--temperature``, ``--top-p``,
    ``--max-new-tokens``, ``--max-total-tokens`` and ``--chat-template``, or the ``flags`` a command takes (a
    trainer that does not sample declares only the caps it records). Each value is checked by
    :class:`~searchenv.sampling.SamplingConfig` as argparse reads it, so every command refuses the same values with
    one error line. ``notes`` adds a command's word to an option's help (what its default depends on). Read
    ``--chat-template`` back with :func:`chat_template`."""
    unknown = sorted(set(flags) - set(SAMPLING_FLAGS))
    if unknown:
        raise ValueError(f"no sampling flag {unknown[0]!r}{did_you_mean(unknown[0], SAMPLING_FLAGS)}")
    note = dict(notes or {})
    defaults = {
        "temperature": temperature,
        "top_p": top_p,
        "max_new_tokens": max_new_tokens,
        "max_total_tokens": max_total_tokens,
    }

    def helped(name: str, text: str) -> str:
        return f"{text} ({note[name]})" if name in note else text

    for name in flags:
        flag = "--" + name.replace("_", "-")
        if name == "chat_template":
            text = "wrap the prompt in the tokenizer's chat template (auto: when it has one)"
            parser.add_argument(flag, choices=list(_CHAT_TEMPLATE), default=chat_template, help=helped(name, text))
        else:
            kind = _sampling_value(name)
            parser.add_argument(flag, type=kind, default=defaults[name], help=helped(name, _SAMPLING_HELP[name][2]))


def chat_template(choice: str | None) -> bool | None:
    """``--chat-template`` as the rollout code takes it: ``None`` (auto), ``True`` (on) or ``False`` (off)."""
    return _CHAT_TEMPLATE.get(choice) if choice is not None else None
