"""searchenv's ``search`` and ``open`` as a verifiers ``Toolset``: one live episode per rollout, in its own process.

verifiers launches a task's toolsets per rollout as MCP servers (``python -m`` this module, its config in
``VF_CONFIG``) and hands each the rollout's task (``setup_task``). The toolset starts the task's episode on the
configured engine and steps every call through it, so the model reads exactly what the environment would show for
the same call under the same protocol — the information block's body, an error naming a bad call, or why no search
ran once the action budget is spent. The tools' names, descriptions and argument descriptions are the one tool
vocabulary's (:mod:`searchenv.protocol.tools`); ``open`` is offered only when the protocol has it
(``tool-call-open``).
"""

# No ``from __future__ import annotations``: the MCP server reads the tools' ``Annotated`` argument descriptions at
# run time, which string annotations would hide.
from typing import TYPE_CHECKING, Annotated, Any

import verifiers.v1 as vf
from pydantic import Field

from searchenv.adapters.verifiers.episodes import base_env, start_episode, step_tool_call
from searchenv.adapters.verifiers.options import SearchQAOptions
from searchenv.protocol.tools import OPEN, SEARCH

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from searchenv.env.search_qa import SearchQAEnv

__all__ = ["SearchQAToolset", "SearchQAToolsetConfig"]


class SearchQAToolsetConfig(vf.ToolsetConfig):
    """Where the toolset runs (verifiers' fields) and the environment it searches with (searchenv's options)."""

    options: SearchQAOptions = SearchQAOptions()


class SearchQAToolset(vf.Toolset[SearchQAToolsetConfig]):
    """``search(query)`` and, under ``tool-call-open``, ``open(ref)``, stepped through the rollout's episode."""

    TOOL_PREFIX = None  # the tools keep the vocabulary's bare names: search, open

    def __init__(self, config: SearchQAToolsetConfig) -> None:
        super().__init__(config)
        self.env: "SearchQAEnv | None" = None

    async def setup_task(self, task: Any) -> None:
        """Start the rollout's episode on the task's question. verifiers calls this once per rollout with the task's
        data (a :class:`~searchenv.adapters.verifiers.taskset.SearchQAData`, fetched over its state channel)."""
        self.env = start_episode(self.config.options.env_kwargs(), task.row())

    def register(self, mcp: "MCPServer") -> None:
        """Register the protocol's tools only: ``open`` exists where the protocol declares it."""
        declared = {tool["function"]["name"] for tool in self._declared_tools()}
        for fn in self._tools():
            if (getattr(fn, "tool_name", None) or fn.__name__) in declared:
                mcp.add_tool(self._with_state(fn), name=fn.__name__, description=(fn.__doc__ or "").strip())

    def _declared_tools(self) -> list[dict[str, Any]]:
        from searchenv.protocol.tool_calls import tools_of

        return tools_of(base_env(self.config.options.env_kwargs()).protocol)

    def _tools(self) -> list[Any]:
        from verifiers.v1.utils.decorators import discover_decorated

        return list(discover_decorated(self, "tool"))

    def _step(self, name: str, arguments: dict[str, Any]) -> str:
        if self.env is None:
            raise RuntimeError("no episode: verifiers calls setup_task(task) before the first tool call")
        return step_tool_call(self.env, name, arguments)

    @vf.tool
    async def search(self, query: Annotated[str, Field(description=SEARCH.argument("query").description)]) -> str:
        return self._step(SEARCH.name, {"query": query})

    search.__doc__ = SEARCH.description

    @vf.tool
    async def open(self, ref: Annotated[str, Field(description=OPEN.argument("ref").description)]) -> str:
        return self._step(OPEN.name, {"ref": ref})

    open.__doc__ = OPEN.description


if __name__ == "__main__":
    SearchQAToolset.run()
