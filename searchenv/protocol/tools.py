"""The tool vocabulary: the names, arguments and descriptions of ``search``, ``open`` and ``answer``, once.

Every surface that offers searchenv's actions as tools reads them here — the tool-call protocols
(:mod:`searchenv.protocol.tool_calls`: the schemas a chat template declares and the calls it reads), the MCP server
(:mod:`searchenv.mcp.server`), TRL (the docstrings of :mod:`searchenv.adapters.trl.tools`' methods, from which TRL
derives its schemas) and veRL (:mod:`searchenv.adapters.verl.tool`) — so a model, an MCP client and a trainer see
the same tool described the same way.

Opening a result is called ``open`` everywhere; ``open_page``, its name in the tool-call protocols before, is an
alias the readers still accept (:func:`tool_named`). ``search`` takes ``k`` only where the caller chooses how many
results come back (MCP); in an episode the environment's ``topk`` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ANSWER", "OPEN", "SEARCH", "TOOLS", "Tool", "ToolArgument", "tool_named"]


@dataclass(frozen=True)
class ToolArgument:
    """One argument of a tool: its name, JSON type (``"string"`` or ``"integer"``) and what it means."""

    name: str
    type: str
    description: str
    required: bool = True


@dataclass(frozen=True)
class Tool:
    """One tool: its name, what it does, its arguments, and the older names its readers still accept."""

    name: str
    description: str
    arguments: tuple[ToolArgument, ...]
    aliases: tuple[str, ...] = ()

    def argument(self, name: str) -> ToolArgument:
        """The argument called ``name``."""
        return next(argument for argument in self.arguments if argument.name == name)

    def declared(self, without: Sequence[str] = ()) -> tuple[ToolArgument, ...]:
        """The arguments a surface declares: all of them but ``without``."""
        return tuple(argument for argument in self.arguments if argument.name not in without)

    def schema(
        self, *, without: Sequence[str] = (), bounds: Mapping[str, tuple[int, int]] | None = None
    ) -> dict[str, Any]:
        """The OpenAI function schema (``{"type": "function", "function": {...}}``, what chat templates and veRL
        take); ``bounds`` gives an integer argument its ``minimum`` and ``maximum``."""
        properties: dict[str, Any] = {}
        for argument in self.declared(without):
            prop: dict[str, Any] = {"type": argument.type, "description": argument.description}
            if bounds and argument.name in bounds:
                prop["minimum"], prop["maximum"] = bounds[argument.name]
            properties[argument.name] = prop
        required = [argument.name for argument in self.declared(without) if argument.required]
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {"type": "object", "properties": properties, "required": required},
            },
        }

    def docstring(self, without: Sequence[str] = ()) -> str:
        """A Google-style docstring of the tool (TRL and transformers read a method's schema from it)."""
        lines = [self.description, "", "Args:"]
        lines += [f"    {argument.name}: {argument.description}" for argument in self.declared(without)]
        return "\n".join(lines) + "\n"


SEARCH = Tool(
    "search",
    "Search for passages about a query; the results come back best first.",
    (
        ToolArgument("query", "string", "what to look up"),
        ToolArgument("k", "integer", "how many results to return, best first", required=False),
    ),
)
OPEN = Tool(
    "open",
    "Open one search result whole and read its document.",
    (
        ToolArgument(
            "ref",
            "string",
            "the id or URL a search returned (in an episode, also the result's number in the latest search: 1 is "
            "the first)",
        ),
    ),
    aliases=("open_page",),
)
ANSWER = Tool(
    "answer",
    "Give the final answer to the question. Ends the episode.",
    (ToolArgument("answer", "string", "the final answer, as short as possible"),),
)

#: Every tool by its name.
TOOLS: Mapping[str, Tool] = {tool.name: tool for tool in (SEARCH, OPEN, ANSWER)}


def tool_named(name: str) -> Tool | None:
    """The tool called ``name`` or one of its aliases (``open_page`` is ``open``); ``None`` for no tool."""
    return next((tool for tool in TOOLS.values() if name == tool.name or name in tool.aliases), None)
