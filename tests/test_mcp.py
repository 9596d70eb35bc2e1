"""``searchenv mcp``: the official MCP SDK's own client lists the tools, searches and opens a result.

Over stdio, the client starts the real command (``python -m searchenv.cli mcp``) as a subprocess; over streamable
HTTP, the server's app runs under uvicorn on 127.0.0.1. Both serve the embedded world with its native BM25 index.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest
from servers import serve_in_thread

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from searchenv.components import build_opener, build_retriever  # noqa: E402
from searchenv.mcp.server import build_server  # noqa: E402
from searchenv.mcp.tools import SearchTools  # noqa: E402

QUERY = "In what year was Brosara founded?"


def _payload(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


async def _session(client: Client) -> tuple[list[str], dict[str, Any], dict[str, Any], Any, Any]:
    tools = await client.list_tools()
    found = _payload(await client.call_tool("search", {"query": QUERY, "k": 2}))
    opened = _payload(await client.call_tool("open", {"ref": found["results"][0]["id"]}))
    missing = await client.call_tool("open", {"ref": "no-such-id"})
    too_many = await client.call_tool("search", {"query": QUERY, "k": 1000})
    return sorted(t.name for t in tools.tools), found, opened, missing, too_many


def _check(session: tuple[list[str], dict[str, Any], dict[str, Any], Any, Any]) -> None:
    names, found, opened, missing, too_many = session
    assert names == ["open", "search"]
    assert [r["rank"] for r in found["results"]] == [1, 2] and found["results"][0]["title"] == "Brosara"
    assert opened["title"] == "Brosara" and "founded in 999" in opened["text"] and opened["clipped"] is False
    assert missing.is_error and "no passage with id 'no-such-id'" in missing.content[0].text
    assert too_many.is_error and "less than or equal to 50" in too_many.content[0].text  # the schema's bound


@pytest.mark.timeout(300)
def test_stdio_server_started_by_the_sdk_client_searches_and_opens() -> None:
    """The client is given the stdio transport itself: mcp 2.0.0 (verifiers 0.4's pin) takes a transport but not
    bare ``StdioServerParameters``, which later 2.x releases also accept; both ends of ``mcp>=2.0,<3`` run this."""
    command = StdioServerParameters(command=sys.executable, args=["-m", "searchenv.cli", "mcp", "--retriever", "bm25"])

    async def run() -> tuple[list[str], dict[str, Any], dict[str, Any], Any, Any]:
        async with Client(stdio_client(command), read_timeout_seconds=240) as client:
            return await _session(client)

    _check(asyncio.run(run()))


def test_streamable_http_server_on_loopback_searches_and_opens() -> None:
    retriever = build_retriever("bm25")
    tools = SearchTools(retriever, build_opener("bm25", retriever), max_page_words=5)
    app = build_server(tools).streamable_http_app(streamable_http_path="/mcp")

    async def run(url: str) -> tuple[list[str], dict[str, Any], dict[str, Any], Any, Any]:
        async with Client(f"{url}/mcp") as client:
            return await _session(client)

    with serve_in_thread(app) as url:
        names, found, opened, missing, too_many = asyncio.run(run(url))
    assert opened["clipped"] is True and opened["text"].endswith(" …") and len(opened["text"].split()) == 6
    _check((names, found, {**opened, "text": "founded in 999", "clipped": False}, missing, too_many))


def test_open_without_an_opener_says_the_engine_cannot_open_documents() -> None:
    tools = SearchTools(build_retriever("bm25"), opener=None)
    with pytest.raises(LookupError, match="cannot open documents"):
        asyncio.run(tools.open("718"))
    with pytest.raises(ValueError, match="non-empty"):
        asyncio.run(tools.search("  "))


def test_tools_are_named_described_and_bounded_by_the_one_vocabulary() -> None:
    """Before: no bounds or argument descriptions, k=true taken as 1, open echoing the article's title for the id
    asked, and an empty server version."""
    import searchenv
    from searchenv.protocol.tool_calls import SEARCH_TOOL
    from searchenv.protocol.tools import OPEN, SEARCH

    retriever = build_retriever("bm25")
    server = build_server(SearchTools(retriever, build_opener("bm25", retriever), max_k=7))

    async def run() -> tuple[Any, ...]:
        async with Client(server) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            as_bool = await client.call_tool("search", {"query": QUERY, "k": True})
            found = _payload(await client.call_tool("search", {"query": QUERY, "k": 1}))
            opened = _payload(await client.call_tool("open", {"ref": found["results"][0]["id"]}))
            return client.server_info, listed, as_bool, found, opened

    info, listed, as_bool, found, opened = asyncio.run(run())
    assert info.version == searchenv.__version__ != ""
    for tool in (SEARCH, OPEN):
        declared = listed[tool.name]
        assert declared.description == tool.description
        for argument in tool.arguments:
            assert declared.input_schema["properties"][argument.name]["description"] == argument.description
    k = listed["search"].input_schema["properties"]["k"]
    assert (k["type"], k["minimum"], k["maximum"]) == ("integer", 1, 7)
    assert SEARCH_TOOL["function"]["description"] == listed["search"].description  # the protocols' words too
    assert as_bool.is_error and "valid integer" in as_bool.content[0].text
    assert opened["ref"] == found["results"][0]["id"] != opened["title"]
    with pytest.raises(ValueError, match="k must be an integer, got True"):  # the tools themselves refuse it too
        asyncio.run(SearchTools(retriever).search(QUERY, True))  # type: ignore[arg-type]
