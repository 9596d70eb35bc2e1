"""``searchenv learn``: the whole learning run from one seed — warm start, reinforcement learning and its
random-retriever control, held-out evaluation of four policies as agent and RAG, the evidence table and its plots
(:mod:`searchenv.adapters.learn.pipeline`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from searchenv.cli.values import non_negative_int, positive_int

__all__ = ["add_parser"]

_DESCRIPTION = (
    "The whole learning run from one seed: warm start, reinforcement learning and its random-retriever control, "
    "held-out evaluation of four policies as agent and RAG, the evidence table and its plots."
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv learn``."""
    parser = subparsers.add_parser("learn", description=_DESCRIPTION)
    parser.add_argument("--output", default="runs/learns", help="folder of the run (resumed when it exists)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of every stage")
    parser.add_argument(
        "--threads", type=positive_int, default=1, help="torch threads of each process (two run at once)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the stages' commands; run nothing")
    parser.add_argument("--tiny", action="store_true", help="every stage in seconds (a smoke test, not a result)")
    parser.set_defaults(handler=_learn)
    return parser


def _learn(args: argparse.Namespace) -> int:
    from searchenv.adapters.learn.pipeline import run

    output = Path(args.output)
    if output.exists() and not output.is_dir():
        raise SystemExit(f"--output {output} is a file; name a folder (a new one, or an earlier run's to resume it)")
    return run(output, args.seed, threads=args.threads, tiny=args.tiny, dry_run=args.dry_run)
