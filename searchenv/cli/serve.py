"""``searchenv serve``: the retrieval service's own parser, with the engine checked before the server starts."""

from __future__ import annotations

import argparse
from typing import Any

from searchenv.components import check_retriever
from searchenv.retrievers.server.command import add_serve_parser, run_serve

__all__ = ["add_parser", "run_checked"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv serve`` (options: :func:`searchenv.retrievers.server.command.add_serve_parser`)."""
    parser = add_serve_parser(subparsers)
    parser.set_defaults(handler=run_checked)
    return parser


def run_checked(args: argparse.Namespace) -> int:
    """Refuse an unknown engine or option in one line before any index loads, then serve."""
    options = dict(args.options)
    if args.index_dir is not None:
        options["index_dir"] = args.index_dir
    check_retriever(args.retriever, args.corpus, options)
    return run_serve(args)
