"""The MCP server (the official ``mcp`` SDK's ``MCPServer``) holding :class:`~searchenv.mcp.tools.SearchTools`.

Served over stdio (an MCP client starts ``searchenv mcp`` as a subprocess) or streamable HTTP (``/mcp`` on
127.0.0.1 by default: the tools reach whatever the retriever reaches, so exposing them beyond the machine is a
choice the operator makes with ``--host``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from searchenv.mcp.tools import SearchTools
from searchenv.protocol.tools import OPEN, SEARCH, ToolArgument

__all__ = ["TRANSPORTS", "build_server", "run_server"]

Transport = Literal["stdio", "streamable-http"]
TRANSPORTS: tuple[Transport, ...] = ("stdio", "streamable-http")


def _sdk() -> tuple[Any, type[Exception]]:
    """The SDK's server class and the error a tool raises on purpose (its text reaches the client)."""
    try:
        from mcp.server import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError as exc:
        raise ImportError("searchenv mcp needs the official MCP SDK (mcp >= 2): pip install 'searchenv[mcp]'") from exc
    return MCPServer, ToolError


def _annotation(argument: ToolArgument, bounds: tuple[int, int] | None = None) -> Any:
    """An argument of the vocabulary as the SDK reads a parameter: its type, description and bounds, strict (a
    JSON ``true`` is no integer, a number no string)."""
    from pydantic import Field

    kind = {"string": str, "integer": int}[argument.type]
    low, high = bounds or (None, None)
    return Annotated[kind, Field(description=argument.description, strict=True, ge=low, le=high)]


def build_server(tools: SearchTools, name: str = "searchenv") -> Any:
    """An ``MCPServer`` whose tools are ``search(query, k)`` and ``open(ref)``, named, described and bounded by the
    one tool vocabulary (:mod:`searchenv.protocol.tools`); it reports searchenv's version.

    A failed call (a bad argument, an engine or page that fails) is the SDK's ``ToolError``: the client gets an
    ``isError`` result that says what went wrong, instead of the SDK's generic "Error executing tool".
    """
    from searchenv import __version__

    server_class, tool_error = _sdk()
    server = server_class(
        name,
        version=__version__,
        instructions=(
            "search finds passages or pages for a query (results carry an id or URL); open returns the whole "
            "document of one result, given that id or URL."
        ),
    )

    async def search(query: str, k: int = tools.topk) -> dict[str, Any]:
        try:
            return await tools.search(query, k)
        except Exception as exc:
            raise tool_error(f"{type(exc).__name__}: {exc}") from exc

    async def open(ref: str) -> dict[str, Any]:  # noqa: A001 - the tool's name, as clients call it
        try:
            return await tools.open(ref)
        except Exception as exc:
            raise tool_error(f"{type(exc).__name__}: {exc}") from exc

    search.__annotations__ = {
        "query": _annotation(SEARCH.argument("query")),
        "k": _annotation(SEARCH.argument("k"), (1, tools.max_k)),
        "return": dict[str, Any],
    }
    open.__annotations__ = {"ref": _annotation(OPEN.argument("ref")), "return": dict[str, Any]}
    server.add_tool(search, name=SEARCH.name, description=SEARCH.description)
    server.add_tool(open, name=OPEN.name, description=OPEN.description)
    return server


def run_server(
    tools: SearchTools, transport: Transport = "stdio", host: str = "127.0.0.1", port: int = 8765, path: str = "/mcp"
) -> None:
    """Serve until interrupted: over stdin/stdout, or streamable HTTP at ``http://host:port{path}``."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
    server = build_server(tools)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port, streamable_http_path=path)
