"""The MCP server (the official ``mcp`` SDK's ``MCPServer``) holding :class:`~searchenv.mcp.tools.SearchTools`.

Served over stdio (an MCP client starts ``searchenv mcp`` as a subprocess) or streamable HTTP (``/mcp`` on
127.0.0.1 by default: the tools reach whatever the retriever reaches, so exposing them beyond the machine is a
choice the operator makes with ``--host``).
"""

from __future__ import annotations

from typing import Any, Literal

from searchenv.mcp.tools import SearchTools

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


def build_server(tools: SearchTools, name: str = "searchenv") -> Any:
    """An ``MCPServer`` whose tools are ``search(query, k)`` and ``open(ref)``.

    A failed call (a bad argument, an engine or page that fails) is the SDK's ``ToolError``: the client gets an
    ``isError`` result that says what went wrong, instead of the SDK's generic "Error executing tool".
    """
    server_class, tool_error = _sdk()
    server = server_class(
        name,
        instructions=(
            "search finds passages or pages for a query (results carry an id or URL); open returns the whole "
            "document of one result, given that id or URL."
        ),
    )

    async def search(query: str, k: int = tools.topk) -> dict[str, Any]:
        """Search the engine: the top k results for the query, best first (rank, id, title, text, score)."""
        try:
            return await tools.search(query, k)
        except Exception as exc:
            raise tool_error(f"{type(exc).__name__}: {exc}") from exc

    async def open(ref: str) -> dict[str, Any]:  # noqa: A001 - the tool's name, as clients call it
        """Open one search result whole: give the id or URL a search returned; returns its title and text."""
        try:
            return await tools.open(ref)
        except Exception as exc:
            raise tool_error(f"{type(exc).__name__}: {exc}") from exc

    server.add_tool(search, name="search")
    server.add_tool(open, name="open")
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
