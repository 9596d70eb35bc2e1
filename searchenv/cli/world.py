"""``searchenv world``: generate a knowledge world (the embedded one by default) and save it as jsonl files."""

from __future__ import annotations

import argparse
from typing import Any

from searchenv.cli.arguments import positive_int

__all__ = ["add_parser", "how_it_differs", "run_world"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv world``."""
    world = subparsers.add_parser(
        "world",
        description="Generate a knowledge world (passages and questions) and save it as jsonl files. With the "
        "defaults it is the embedded world (dataset 'world'); the command says how any other differs from it.",
    )
    world.add_argument("--passages", type=positive_int, default=2_000, help="passages to generate")
    world.add_argument("--seed", type=int, default=0, help="generation seed")
    world.add_argument(
        "--questions",
        type=positive_int,
        default=None,
        help="questions in all, both splits (default: half the passages, at most 50,000: 1,000 for 2,000)",
    )
    world.add_argument(
        "--test-questions",
        type=positive_int,
        default=None,
        help="questions of the test split, drawn first and fact-disjoint from train (default: a tenth of --questions)",
    )
    world.add_argument("--output", required=True, help="directory for corpus.jsonl, train.jsonl, test.jsonl")
    world.set_defaults(handler=run_world)
    return world


def how_it_differs(num_passages: int, seed: int, num_questions: int, test_questions: int) -> str:
    """One sentence: that these sizes give the embedded world, or what differs from it and what that changes."""
    from searchenv.data.world.generator import DEFAULT_WORLD, default_test_questions

    embedded = (*DEFAULT_WORLD.values(), default_test_questions(DEFAULT_WORLD["num_questions"]))
    if (num_passages, seed, num_questions, test_questions) == embedded:
        return "this is the embedded world (dataset 'world'): the same passages and questions"
    asked = (num_passages, seed, num_questions, test_questions)
    names = ("passages", "seed", "questions", "test questions")
    changed = [f"{n} {mine} (not {theirs})" for n, mine, theirs in zip(names, asked, embedded) if mine != theirs]
    same_passages = (num_passages, seed) == embedded[:2]
    effect = "the same passages, other questions" if same_passages else "other passages and questions"
    return f"this differs from the embedded world (dataset 'world') in {', '.join(changed)}: {effect}"


def run_world(args: argparse.Namespace) -> int:
    """Write the world (streamed, so memory stays bounded at 21M passages too) and say what was written and how it
    relates to the embedded world."""
    from searchenv.data.world.generator import default_questions, default_test_questions, write_world

    questions = default_questions(args.passages) if args.questions is None else args.questions
    test = default_test_questions(questions) if args.test_questions is None else args.test_questions
    write_world(args.output, args.passages, seed=args.seed, num_questions=questions, test_questions=test)
    print(
        f"wrote {args.passages} passages and {questions} questions ({questions - test} train, {test} test) to "
        f"{args.output}; {how_it_differs(args.passages, args.seed, questions, test)}"
    )
    return 0
