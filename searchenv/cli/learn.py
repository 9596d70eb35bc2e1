"""``searchenv learn``: the whole learning run from one seed — warm start, reinforcement learning with its placebo
and a second seed, held-out evaluation as agent and two RAG baselines, the evidence table and its plots
(:mod:`searchenv.adapters.learn.pipeline`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from searchenv.cli.values import non_negative_float, non_negative_int, positive_int

__all__ = ["add_parser"]

_DESCRIPTION = (
    "The whole learning run from one seed: warm start, reinforcement learning (expert iteration) with its placebo "
    "and a second seed, held-out evaluation of five policies as agent and two RAG baselines, the evidence table "
    "and its plots."
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv learn``."""
    parser = subparsers.add_parser("learn", description=_DESCRIPTION)
    parser.add_argument("--output", default="runs/learns", help="folder of the run (resumed when it exists)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of every stage")
    parser.add_argument(
        "--threads", type=positive_int, default=1, help="torch threads of each process (up to three run at once)"
    )
    parser.add_argument(
        "--device", default="cpu", help="'cpu' (the recipe), or 'cuda' (every stage on the GPU, larger batches)"
    )
    parser.add_argument("--model", default="smollm2-135m", help="the base model: the packaged alias or a folder")
    parser.add_argument(
        "--rl-minutes",
        type=non_negative_float,
        default=0.0,
        help="stop each RL run after the first step past this many minutes (0: the recipe's steps)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the stages' commands; run nothing")
    parser.add_argument(
        "--tiny", action="store_true", help="every stage at its smallest (3-7 minutes; a smoke test, not a result)"
    )
    parser.set_defaults(handler=_learn)
    return parser


def _learn(args: argparse.Namespace) -> int:
    from searchenv.adapters.learn.pipeline import run

    output = Path(args.output)
    if output.exists() and not output.is_dir():
        raise SystemExit(f"--output {output} is a file; name a folder (a new one, or an earlier run's to resume it)")
    if args.device != "cpu" and not args.device.startswith("cuda"):
        raise SystemExit(f"--device {args.device!r}: choose 'cpu' or 'cuda' (or 'cuda:N')")
    if args.model not in ("smollm2-135m",) and not Path(args.model).is_dir():
        raise SystemExit(f"--model {args.model}: no such folder; pass a checkpoint folder or 'smollm2-135m'")
    return run(
        output,
        args.seed,
        threads=args.threads,
        tiny=args.tiny,
        dry_run=args.dry_run,
        device=args.device,
        model=args.model,
        rl_minutes=args.rl_minutes,
    )
