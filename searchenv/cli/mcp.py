"""``searchenv mcp``: serve ``search`` and ``open`` over any configured retriever as an MCP server."""

from __future__ import annotations

import argparse
from typing import Any

from searchenv.cli.arguments import add_env_arguments, env_kwargs, positive_int

__all__ = ["add_parser", "run_mcp"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv mcp``."""
    parser = subparsers.add_parser(
        "mcp",
        description="Serve the configured retriever as MCP tools: search(query, k) and open(ref). Over stdio "
        "(for a client that starts this command) or streamable HTTP (http://HOST:PORT/mcp, 127.0.0.1 by default).",
    )
    add_env_arguments(parser)
    serve = parser.add_argument_group("mcp")
    serve.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio", help="how clients talk")
    serve.add_argument("--host", default="127.0.0.1", help="streamable HTTP: address to bind (loopback by default)")
    serve.add_argument("--port", type=positive_int, default=8765, help="streamable HTTP: port")
    serve.add_argument("--path", default="/mcp", help="streamable HTTP: endpoint path")
    serve.add_argument("--max-k", type=positive_int, default=50, help="the most results one search may ask for")
    parser.set_defaults(handler=run_mcp)
    return parser


def run_mcp(args: argparse.Namespace) -> int:
    """Build the retriever and its opener from the environment options, then serve until interrupted."""
    from searchenv.components import build_opener, build_retriever
    from searchenv.mcp.server import run_server
    from searchenv.mcp.tools import SearchTools

    kwargs = env_kwargs(args)  # checked before anything loads
    retriever = build_retriever(kwargs["retriever"], kwargs["corpus"], kwargs["retriever_options"])
    tools = SearchTools(
        retriever,
        build_opener(kwargs["retriever"], retriever, kwargs["corpus"]),
        topk=kwargs["topk"],
        max_k=max(args.max_k, kwargs["topk"]),
        max_page_words=kwargs["max_page_words"],
    )
    run_server(tools, args.transport, args.host, args.port, args.path)
    return 0
