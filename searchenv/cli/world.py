"""``searchenv world``: generate the embedded knowledge world and save it as jsonl files."""

from __future__ import annotations

import argparse
from typing import Any

from searchenv.cli.arguments import positive_int

__all__ = ["add_parser", "run_world"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv world``."""
    world = subparsers.add_parser(
        "world",
        description="Generate the embedded knowledge world (passages and questions) and save it as jsonl files.",
    )
    world.add_argument("--passages", type=positive_int, default=2_000, help="passages to generate")
    world.add_argument("--seed", type=int, default=0, help="generation seed")
    world.add_argument("--output", required=True, help="directory for corpus.jsonl, train.jsonl, test.jsonl")
    world.set_defaults(handler=run_world)
    return world


def run_world(args: argparse.Namespace) -> int:
    """Write the world (streamed, so memory stays bounded at 21M passages too) and say what was written."""
    from searchenv.data.world.generator import SPLITS, write_world

    directory = write_world(args.output, args.passages, seed=args.seed)
    questions = sum(len((directory / f"{split}.jsonl").read_text().splitlines()) for split in SPLITS)
    print(f"wrote {args.passages} passages and {questions} questions to {args.output}")
    return 0
