"""The evaluation subcommands: ``searchenv eval``, ``searchenv eval-data`` and ``searchenv view``.

Parsers only; the handlers import the heavy parts when they run.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_evaluation_parsers"]


def _run_eval(args: argparse.Namespace) -> int:
    from searchenv.evaluation.suite import run_eval

    return run_eval(args)


def _run_eval_data(args: argparse.Namespace) -> int:
    from searchenv.evaluation.evalset import build_eval_set, write_eval_set

    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    examples = build_eval_set(datasets, limit=args.limit, seed=args.seed, data_dir=args.data_dir)
    jsonl, parquet = write_eval_set(examples, args.output, protocol=args.protocol)
    counts: dict[str, int] = {}
    for e in examples:
        counts[e.data_source] = counts.get(e.data_source, 0) + 1
    per_set = ", ".join(f"{k} {v}" for k, v in counts.items())
    print(f"wrote {len(examples)} questions ({per_set}) to {jsonl} and {parquet}")
    return 0


def _run_view(args: argparse.Namespace) -> int:
    from searchenv.evaluation.viewer import write_viewer

    path = write_viewer(args.transcripts, args.output)
    print(f"wrote {path}")
    return 0


def add_evaluation_parsers(commands: Any) -> None:
    """Register ``eval``, ``eval-data`` and ``view`` on the CLI's subparsers."""
    from searchenv.evaluation.evalset import EVAL_DATASETS
    from searchenv.evaluation.suite import add_eval_arguments

    formatter = argparse.ArgumentDefaultsHelpFormatter
    evaluate = commands.add_parser(
        "eval",
        help="evaluate policies, baselines and retrievers on QA sets (EM, F1, recall, ...; resumable)",
        description="Evaluate search agents and the Direct / RAG baselines; writes transcripts.jsonl, report.md, "
        "metrics.csv and metrics.png into --output. Rerun the same command to resume an interrupted run.",
    )
    add_eval_arguments(evaluate)
    evaluate.set_defaults(handler=_run_eval)

    data = commands.add_parser(
        "eval-data",
        help="write the papers' mixed evaluation set (7 sets, test or dev) as jsonl and veRL parquet",
        formatter_class=formatter,
    )
    data.add_argument("--datasets", default=",".join(EVAL_DATASETS), help="comma list of names or files")
    data.add_argument("--data-dir", default=None, help="local folder with <name>/<split>.jsonl (else the hub)")
    data.add_argument("--limit", type=int, default=None, help="questions per dataset (seeded subsample)")
    data.add_argument("--seed", type=int, default=0, help="seed of the per-dataset subsample")
    data.add_argument("--protocol", default="search-r1", help="prompt written into the parquet rows")
    data.add_argument("--output", required=True, help="folder for test.jsonl and test.parquet")
    data.set_defaults(handler=_run_eval_data)

    view = commands.add_parser("view", help="write one static HTML page to read evaluation transcripts")
    view.add_argument("transcripts", help="transcripts.jsonl written by searchenv eval")
    view.add_argument("-o", "--output", default="transcripts.html", help="HTML file to write")
    view.set_defaults(handler=_run_view)
