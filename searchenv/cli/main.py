"""The ``searchenv`` command: play or watch episodes, generate the world, serve a retriever, run the study, train.

:data:`COMMANDS` is the table of subcommands: a name, the ``"module:function"`` that registers its parser (the
parser lives next to the code it runs) and the one-line summary ``searchenv --help`` lists. Only the command
being run is imported, so ``searchenv --help`` is instant and a command's heavy libraries load only for it.
Every subcommand's ``--help`` shows its defaults (:class:`~searchenv.cli.parsers.CommandParser`), every
subcommand that builds an environment takes the same environment options
(:func:`~searchenv.cli.arguments.add_env_arguments`), and every error reads ``searchenv <command>: error: ...``
with exit status 2 (Ctrl-C: 130).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from searchenv.imports import load_attr

__all__ = ["COMMANDS", "Command", "build_parser", "main", "reference_markdown"]


class Command(NamedTuple):
    """One row of the command table."""

    #: ``"module:function"``; ``function(subparsers)`` registers the command (it may register its siblings too).
    register: str
    #: What ``searchenv --help`` says about the command.
    summary: str


COMMANDS: dict[str, Command] = {
    "demo": Command("searchenv.cli.demo:add_parser", "watch a small LM play episodes (SmolLM2-135M on CPU by default)"),
    "play": Command("searchenv.cli.play:add_parser", "type the model's actions yourself"),
    "world": Command("searchenv.cli.world:add_parser", "generate the embedded knowledge world and save it as jsonl"),
    "serve": Command("searchenv.cli.serve:add_parser", "serve a retriever over HTTP (Search-R1's POST /retrieve API)"),
    "mcp": Command("searchenv.cli.mcp:add_parser", "serve a retriever's search and open as MCP tools (stdio or HTTP)"),
    "openenv-serve": Command(
        "searchenv.adapters.openenv.serve:add_parser", "serve SearchQA as an OpenEnv environment (sessions, Task API)"
    ),
    "study": Command(
        "searchenv.cli.study:add_study_parser",
        "compare search engines (random, bm25, e5-hnsw, e5-exact) by answer recall@k, QPS and latency",
    ),
    "verl-data": Command(
        "searchenv.cli.verl_data:add_parser", "write Search-R1 / veRL (or SkyRL) training parquet files"
    ),
    "train-ppo": Command(
        "searchenv.adapters.ppo.train:add_parser", "train with the built-in PPO/GRPO/REINFORCE++ loop"
    ),
    "train-trl": Command("searchenv.adapters.trl.train:add_parser", "train with TRL's GRPOTrainer"),
    "learn": Command(
        "searchenv.cli.learn:add_parser",
        "the whole learning run from a seed: warm start, RL and its random-retriever control, held-out evaluation",
    ),
    "train-sft": Command(
        "searchenv.adapters.sft.train:add_parser",
        "a supervised warm start from demonstrations the environment plays itself, or from eval transcripts",
    ),
    "prepare": Command(
        "searchenv.cli.prepare:add_prepare_parser",
        "download wiki-18 and the prebuilt E5 indexes the papers search (resumable, checksummed)",
    ),
    "eval": Command(
        "searchenv.cli.evaluation:add_evaluation_parsers",
        "evaluate policies, baselines and retrievers on QA sets (EM, F1, recall, ...; resumable)",
    ),
    "eval-data": Command(
        "searchenv.cli.evaluation:add_evaluation_parsers",
        "write the papers' mixed evaluation set (7 sets, test or dev) as jsonl and veRL parquet",
    ),
    "view": Command(
        "searchenv.cli.evaluation:add_evaluation_parsers",
        "write one static HTML page to read evaluation transcripts",
    ),
    "verl": Command("searchenv.adapters.verl.launch:add_parser", "write or run the veRL launch files"),
    "audit-reward": Command(
        "searchenv.cli.audit:add_parser",
        "play scripted reward hacks (answer stuffing, empty answers, …) against a reward spec",
    ),
}


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def build_parser(load: Iterable[str] = ()) -> argparse.ArgumentParser:
    """The ``searchenv`` parser with the commands named in ``load`` fully built; the others are only listed.

    ``build_parser(COMMANDS)`` builds every command (for the reference docs); :func:`main` builds the one it runs.
    """
    from searchenv.cli.parsers import CommandParser, HelpFormatter, TopParser

    parser = TopParser(
        prog="searchenv",
        description="Reasoning-and-search environments for RL on LLMs (SearchQA-v0). "
        "Run `searchenv COMMAND --help` for a command's options and defaults.",
        formatter_class=HelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=CommandParser)
    wanted = set(load)
    unknown = wanted - set(COMMANDS)
    if unknown:
        raise ValueError(f"no searchenv command {sorted(unknown)}; the commands are {list(COMMANDS)}")
    # The wanted commands first: a register function may add its siblings too (eval, eval-data and view share one),
    # so a sibling must not be listed as a stub before it.
    for name in (n for n in COMMANDS if n in wanted):
        if name not in commands.choices:
            load_attr(COMMANDS[name].register, f"searchenv command {name!r}")(commands)
    for name, command in COMMANDS.items():
        if name not in commands.choices:
            commands.add_parser(name, help=command.summary, add_help=False)
    return parser


def _command_word(argv: Sequence[str]) -> list[str]:
    """The command named on the command line (``[]`` for none or an unknown one: argparse reports it)."""
    first = next((word for word in argv if not word.startswith("-")), None)
    return [first] if first in COMMANDS else []


def _options_table(actions: Sequence[argparse.Action]) -> list[str]:
    lines = ["| option | default | meaning |", "|---|---|---|"]
    for action in actions:
        flag = ", ".join(action.option_strings) or action.dest
        if action.required:
            default = "required"
        elif action.default is None or action.default is False or action.default == []:
            default = ""
        else:
            default = f"`{action.default}`"
        meaning = " ".join((action.help or "").split()).replace("|", "\\|")
        if action.choices:
            meaning += f" (one of {', '.join(map(str, action.choices))})"
        lines.append(f"| `{flag}` | {default} | {meaning} |")
    return lines


def reference_markdown() -> str:
    """Every subcommand's options and defaults as markdown, straight from the parsers (the body of docs/cli.md)."""
    from searchenv.cli.arguments import add_env_arguments

    shared = argparse.ArgumentParser(add_help=False)
    add_env_arguments(shared)
    shared_defaults = {a.dest: a.default for a in shared._actions}
    lines = ["### Environment options (every command that builds an environment)", ""]
    lines += [*_options_table(shared._actions), ""]
    commands = _subparsers(build_parser(COMMANDS))
    for name in COMMANDS:
        sub = commands.choices[name]
        actions = [a for a in sub._actions if not isinstance(a, argparse._HelpAction)]
        takes_env = set(shared_defaults) <= {a.dest for a in actions}
        own = [a for a in actions if not takes_env or shared_defaults.get(a.dest, a) != a.default]
        lines += [f"### `searchenv {name}`", "", " ".join((sub.description or COMMANDS[name].summary).split())]
        if takes_env:
            lines.append("\nTakes the environment options above; its own options and changed defaults:")
        lines += ["", *_options_table(own), ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``searchenv ARGV``: build the named command's parser, parse, and run its handler."""
    from searchenv.cli.arguments import run_handler

    argv = sys.argv[1:] if argv is None else list(argv)
    command = _command_word(argv)
    try:
        parser = build_parser(command)
    except ModuleNotFoundError as exc:  # a command whose parser needs an optional dependency (train-ppo: torch)
        from searchenv.extras import missing_module_message

        name = command[0] if command else ""
        print(f"searchenv {name}: error: {missing_module_message(exc, name)}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    return run_handler(args.handler, args, f"searchenv {args.command}")


if __name__ == "__main__":
    sys.exit(main())
