"""``searchenv serve``: any searchenv retriever behind Search-R1's ``POST /retrieve`` HTTP API.

Trainers (verl, SkyRL, Search-R1's own loop) expect retrieval on a URL, so one warm index serves many rollout
workers instead of each loading its own copy. This module is the command line (``searchenv serve`` or
``python -m searchenv.retrievers.server``); the service is :mod:`searchenv.retrievers.server` — the HTTP app
(:mod:`~searchenv.retrievers.server.app`), the answer cache, one process or several workers
(:mod:`~searchenv.retrievers.server.run`) and Ray Serve (:mod:`~searchenv.retrievers.server.ray_serve`). The
engine and its options are checked before the server starts, so a typo fails in one line before any index loads.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from searchenv.cli.arguments import run_handler
from searchenv.cli.options import add_retriever_arguments, retriever_options
from searchenv.retrievers.catalogue import ENGINES
from searchenv.retrievers.remote.retriever import TOKEN_ENV
from searchenv.retrievers.server.app import ServerConfig
from searchenv.retrievers.server.run import RetrieverBuildError, serve

__all__ = ["add_parser", "add_serve_parser", "config_from_args", "main", "run_serve"]

log = logging.getLogger("searchenv.server")


def add_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``serve`` subcommand to a ``parser.add_subparsers()`` object; :func:`run_serve` runs it."""
    defaults = ServerConfig()
    p = subparsers.add_parser(
        "serve",
        help="serve a retriever over HTTP (Search-R1's POST /retrieve API)",
        description="Serve a retriever over HTTP with Search-R1's POST /retrieve API, plus GET /health.",
    )
    # The retriever group of every command (--index and --option are serve's older names, still accepted).
    add_retriever_arguments(
        p,
        default="random",
        corpus_help="jsonl corpus of {'id', 'contents'} rows (not needed for the web engines)",
        flag_names={"index_dir": ["--index"]},
        option_names=["--option"],
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; use 0.0.0.0 to expose it)")
    p.add_argument("--port", type=int, default=8000, help="TCP port to listen on")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes sharing the port")
    p.add_argument("--topk", type=int, default=defaults.topk, help="k when a request gives none")
    p.add_argument("--max-topk", type=int, default=defaults.max_topk, help="largest k a request may ask (else 422)")
    p.add_argument("--max-queries", type=int, default=defaults.max_queries, help="most queries per request")
    p.add_argument(
        "--max-query-chars", type=int, default=defaults.max_query_chars, help="longest query accepted (else 422)"
    )
    p.add_argument(
        "--max-body-bytes", type=int, default=defaults.max_body_bytes, help="largest request body accepted (else 413)"
    )
    p.add_argument("--cache-size", type=int, default=defaults.cache_size, help="LRU (query, k) entries; 0 disables")
    p.add_argument(
        "--batch-wait-ms",
        type=float,
        default=defaults.batch_wait_ms,
        help="how long to gather concurrent requests into one engine call",
    )
    p.add_argument(
        "--max-batch-queries",
        type=int,
        default=defaults.max_batch_queries,
        help="most queries the batcher merges into one engine call",
    )
    p.add_argument(
        "--inline-budget-ms",
        type=float,
        default=defaults.inline_budget_ms,
        help="search a lone request on the event loop when the in-process engine took at most this last time (0: off)",
    )
    p.add_argument("--token", default=None, help=f"require 'Authorization: Bearer TOKEN' (or set ${TOKEN_ENV})")
    p.add_argument("--log-level", default="info", help="logging level of the server (debug, info, warning, error)")
    p.add_argument("--ray", action="store_true", help="serve through Ray Serve (pip install 'searchenv[ray]')")
    p.add_argument("--replicas", type=int, default=1, help="Ray Serve replicas (with --ray)")
    p.add_argument("--ray-address", default=None, help="existing Ray cluster to join (with --ray; default: start one)")
    p.add_argument("--replica-cpus", type=float, default=1.0, help="CPUs reserved per Ray replica")
    p.add_argument("--replica-gpus", type=float, default=0.0, help="GPUs reserved per Ray replica (dense retrieval)")
    p.set_defaults(handler=run_serve)
    return p


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv serve`` (the command table's entry)."""
    return add_serve_parser(subparsers)


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """Turn parsed ``serve`` arguments into a :class:`ServerConfig`, failing fast on a missing corpus, an unknown
    engine or option (checked before any index loads)."""
    from searchenv.components import check_retriever

    options = retriever_options(args)
    record = ENGINES.get(args.retriever)
    if args.corpus is None:
        if record is None or record.needs_corpus or record.wraps:
            raise SystemExit(f"searchenv serve: --retriever {args.retriever} needs --corpus (a jsonl of passages)")
    elif not Path(args.corpus).is_file():
        raise SystemExit(f"searchenv serve: corpus file not found: {args.corpus}")
    for name in ("port", "workers", "topk", "max_topk", "max_queries", "max_query_chars", "max_body_bytes"):
        if getattr(args, name) < (0 if name == "port" else 1):
            raise SystemExit(f"searchenv serve: --{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    for name in ("batch_wait_ms", "inline_budget_ms"):
        value = getattr(args, name)
        if not value >= 0:  # also refuses nan
            raise SystemExit(f"searchenv serve: --{name.replace('_', '-')} must be 0 or more, got {value}")
    check_retriever(args.retriever, args.corpus, options)
    index_dir = options.pop("index_dir", None)
    return ServerConfig(
        retriever=args.retriever,
        corpus=str(Path(args.corpus).resolve()) if args.corpus else "",
        index_dir=index_dir,
        options=options,
        topk=args.topk,
        max_topk=args.max_topk,
        max_queries=args.max_queries,
        max_query_chars=args.max_query_chars,
        max_body_bytes=args.max_body_bytes,
        cache_size=args.cache_size,
        batch_wait_ms=args.batch_wait_ms,
        max_batch_queries=args.max_batch_queries,
        inline_budget_ms=args.inline_budget_ms,
        token=args.token or os.environ.get(TOKEN_ENV) or None,
    )


def run_serve(args: argparse.Namespace) -> int:
    """Run ``searchenv serve`` with parsed arguments (blocking); returns the exit status (1: the retriever failed)."""
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    config = config_from_args(args)
    try:
        if args.ray:
            from searchenv.retrievers.server.ray_serve import serve_with_ray

            serve_with_ray(
                config,
                host=args.host,
                port=args.port,
                replicas=args.replicas,
                address=args.ray_address,
                num_cpus=args.replica_cpus,
                num_gpus=args.replica_gpus,
            )
        else:
            serve(config, host=args.host, port=args.port, workers=args.workers, log_level=args.log_level)
    except RetrieverBuildError as exc:
        print(f"searchenv serve: could not build retriever {config.retriever!r}: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m searchenv.retrievers.server ARGV``: the same as ``searchenv serve ARGV``."""
    from searchenv.cli.parsers import CommandParser, TopParser

    parser = TopParser(prog="python -m searchenv.retrievers.server")
    sub = parser.add_subparsers(dest="command", parser_class=CommandParser)
    add_serve_parser(sub)
    args = parser.parse_args(["serve", *(sys.argv[1:] if argv is None else argv)])
    return run_handler(run_serve, args, parser.prog)
