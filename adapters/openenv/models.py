"""The OpenEnv wire types of SearchQA: one action, one observation, one state (pydantic, as OpenEnv requires).

OpenEnv serialises these across HTTP and WebSocket and publishes their JSON schemas at ``/schema``, so a client in
any language can play. The action is the model's turn as text — exactly what :meth:`SearchQAEnv.step` reads, so
every protocol works unchanged (tag protocols and ``<tool_call>`` text alike) — or, for the tool-call protocols,
a structured call (``tool`` and ``arguments``, named in the one tool vocabulary of
:mod:`searchenv.protocol.tools`), which the environment steps as the canonical ``<tool_call>`` text.
"""

from __future__ import annotations

from typing import Any, Literal

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field, model_validator

from searchenv.protocol.tools import TOOLS, tool_named

__all__ = ["SearchAction", "SearchObservation", "SearchState"]


class SearchAction(Action):
    """One turn of the policy — its generated ``text``, or one structured tool call (``tool`` and ``arguments``) —
    or ``end``: the trainer's own limit stopped the episode, which is then truncated and scored
    (:meth:`SearchQAEnv.truncate`), so every rollout a trainer stops carries the environment's reward."""

    text: str | None = Field(
        default=None,
        description="the model's turn as generated (e.g. '<search> q </search>', '<answer> a </answer>', a "
        "'<tool_call>' block, or a tool-call-message protocol's final message)",
    )
    tool: str | None = Field(
        default=None,
        description=f"a tool-call protocol's tool, by name: one of {sorted(TOOLS)} (the protocol decides which exist)",
    )
    arguments: dict[str, Any] = Field(default_factory=dict, description="the tool's arguments, e.g. {'query': ...}")
    end: Literal["trainer_cut", "context_limit"] | None = Field(
        default=None,
        description="end the running episode as truncated: the trainer's turn limit ('trainer_cut') or a full "
        "context ('context_limit')",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> SearchAction:
        if sum(value is not None for value in (self.text, self.tool, self.end)) != 1:
            raise ValueError(
                "a SearchAction holds exactly one of 'text' (the model's turn), 'tool' with 'arguments' (one tool "
                "call) or 'end' (truncate the episode), not both and not neither"
            )
        if self.tool is not None and tool_named(self.tool) is None:
            raise ValueError(f"unknown tool {self.tool!r}; the tools are {sorted(TOOLS)}")
        return self


class SearchObservation(Observation):
    """What the environment says back. ``metadata`` holds the step's ``info`` (JSON-safe): on the terminal step
    ``reward_parts``, ``prediction``, ``num_searches``, ``end_reason`` and ``episode_metrics``; on a search step
    ``passage_ids`` or ``retrieval_error``; on an invalid action ``invalid_reason``."""

    text: str = Field(
        default="",
        description="after reset: the prompt (instructions and question); after a step: the text appended to the "
        "transcript (an information block, a corrective hint, or '' once the episode has ended)",
    )
    tool_output: str | None = Field(
        default=None,
        description="tool-call protocols: what the tool returned (the information block's body, or an error), "
        "as a tool message would hold it",
    )
    question: str = Field(default="", description="the episode's question")
    split: str = Field(default="", description="the dataset split the question comes from")
    index: int | None = Field(default=None, description="the question's index within its split")
    stop_strings: list[str] = Field(
        default_factory=list, description="where a generation should stop (the protocol's closing tags)"
    )
    tools: list[dict[str, Any]] = Field(
        default_factory=list, description="tool-call protocols: the OpenAI function schemas the model is offered"
    )
    truncated: bool = Field(default=False, description="the episode ended without an answer (the budget ran out)")


class SearchState(State):
    """The session's episode: its id, the actions taken, the question's split and index, and whether it ended."""

    split: str = Field(default="", description="the dataset split of the current question")
    index: int | None = Field(default=None, description="the current question's index within its split")
    question: str = Field(default="", description="the current question")
    done: bool = Field(default=False, description="whether the episode has ended")
    num_searches: int = Field(default=0, description="searches run so far")
