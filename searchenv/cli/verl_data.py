"""``searchenv verl-data``: write Search-R1 / veRL (or SkyRL) training parquet files from searchenv datasets.

Also ``python -m searchenv.cli.verl_data`` (and the old ``python -m searchenv.adapters.rows``)::

    searchenv verl-data --dataset world --output data/searchenv
    searchenv verl-data --dataset nq --dataset hotpotqa --split train --output data/nq_hotpotqa
    searchenv verl-data --dataset ../shared/data/qa/nq_test_1000.jsonl --split test --output d
    searchenv verl-data --paper --output data/paper   # NQ+HotpotQA train, seven-set test mix

The rows themselves are :mod:`searchenv.adapters.rows`'s (the layout both trainer adapters read back).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from searchenv.adapters.rows import build_rows, write_paper_datasets, write_rows
from searchenv.cli.options import add_dataset_arguments
from searchenv.cli.parsers import CommandParser
from searchenv.env.defaults import env_default

__all__ = ["add_parser", "main", "write_datasets"]

_DESCRIPTION = "Write Search-R1 / veRL (or SkyRL) training parquet files from searchenv datasets."


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_dataset_arguments(
        parser,
        several_datasets=True,
        several_splits=True,
        split_help="split to write, one <split>.parquet each (default: train and test for 'world', else test)",
        limit_help="keep the first N questions of each dataset",
    )
    parser.add_argument(
        "--paper",
        action="store_true",
        help="Search-R1's data instead of --dataset: train = NQ + HotpotQA train, test = the seven sets mixed",
    )
    parser.add_argument("--output", required=True, help="output folder")
    parser.add_argument(
        "--protocol", default=env_default("protocol"), help="prompt/tag protocol (search-r1, r1-searcher, r-search)"
    )
    parser.add_argument("--trainer", choices=["verl", "skyrl"], default="verl", help="adds agent_name or env_class")


def write_datasets(args: argparse.Namespace) -> list[Path]:
    """Write one parquet file per split from parsed command-line arguments; returns the paths."""
    if args.paper == bool(args.dataset):
        raise ValueError("give either --dataset (repeatable) or --paper")
    if args.paper:
        return write_paper_datasets(
            args.output, args.protocol, args.trainer, args.limit, args.data_dir, args.split or ("train", "test")
        )
    splits = args.split or (["train", "test"] if args.dataset == ["world"] else ["test"])
    written = []
    rows_per_split = build_rows(args.dataset, splits, args.protocol, args.trainer, args.limit, args.data_dir)
    for split, rows in rows_per_split.items():
        path = write_rows(rows, Path(args.output) / f"{split}.parquet")
        print(f"wrote {len(rows)} rows to {path}")
        written.append(path)
    return written


def _run(args: argparse.Namespace) -> int:
    write_datasets(args)
    return 0


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv verl-data`` on the CLI's subparsers."""
    parser = subparsers.add_parser(
        "verl-data", help="write Search-R1 / veRL (or SkyRL) training parquet files", description=_DESCRIPTION
    )
    _add_arguments(parser)
    parser.set_defaults(handler=_run)
    return parser


def main(argv: Sequence[str] | None = None) -> list[Path]:
    parser = CommandParser(prog="searchenv verl-data", description=_DESCRIPTION)
    _add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return write_datasets(args)
    except (ValueError, FileNotFoundError, RuntimeError, ImportError) as exc:
        parser.error(str(exc))


if __name__ == "__main__":
    main()
