"""The searchenv side of the verifiers taskset: the options, the shared environments, and stepping tool calls.

Both halves of a verifiers rollout use these: the toolset (in its own process) steps each tool call through a live
episode, and the task's reward (in the evaluation's process) replays the trace's calls and final message through a
fresh episode of the same environment. Every rule — the action budget, query clipping, failed searches,
neutralisation, the information cap, parsing of the final answer — is :class:`~searchenv.env.SearchQAEnv`'s, so a
verifiers rollout is scored exactly as ``searchenv eval --protocol tool-call`` scores the same turns. Nothing here
imports verifiers.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from searchenv.adapters.tool_steps import EPISODE_OVER, call_action, check_tool_protocol, finish_episode, tool_result

if TYPE_CHECKING:
    from searchenv.env.search_qa import SearchQAEnv
    from searchenv.episode.episode import Episode

__all__ = ["ReplayedEpisode", "ToolCallStep", "base_env", "replay", "start_episode", "step_tool_call"]

_ENVS: dict[str, SearchQAEnv] = {}
_LOCK = threading.Lock()


def base_env(options: Mapping[str, Any]) -> SearchQAEnv:
    """The process's environment for ``options`` (``SearchQAEnv`` arguments), built once and shared: episodes are
    played on its siblings, so the dataset, engine and reward spec load once per process."""
    key = json.dumps(dict(options), sort_keys=True, default=str)
    with _LOCK:
        if key not in _ENVS:
            import gymnasium as gym

            from searchenv.registration import ENV_ID

            env = gym.make(ENV_ID, **options).unwrapped
            check_tool_protocol(env, answer_tool=False)
            _ENVS[key] = env
        return _ENVS[key]


def start_episode(options: Mapping[str, Any], row: Mapping[str, Any]) -> SearchQAEnv:
    """A fresh episode of the row's question (``question``, ``golden_answers``, ``id``) on ``options``' engine."""
    env = base_env(options).sibling()
    env.reset(options={"example": dict(row)})
    return env


def step_tool_call(env: SearchQAEnv, name: str, arguments: Any) -> str:
    """Step one tool call as the canonical ``<tool_call>`` action; returns what the tool message holds."""
    if env.episode.done:
        return EPISODE_OVER
    observation, _, _, _, info = env.step(call_action(name, arguments))
    return tool_result(env, observation, info)


@dataclass(frozen=True)
class ToolCallStep:
    """One tool call as a trace records it: the tool's name and its raw JSON arguments."""

    name: str
    arguments: str


@dataclass(frozen=True)
class ReplayedEpisode:
    """An episode replayed from a trace, and what each of its tool calls returned (``None``: a call the tool
    server refused before it reached a tool, which the episode never saw)."""

    episode: Episode
    tool_outputs: tuple[str | None, ...]


def _reaches_tool(env: SearchQAEnv, name: str, raw: str) -> dict[str, Any] | None:
    """The call's arguments when the MCP server would hand the call to the tool: a declared tool, JSON arguments
    naming exactly its declared string arguments. ``None`` for a call the server refuses with a schema error (an
    unknown tool, a misspelt or missing argument), which never reaches the episode."""
    from searchenv.protocol.tool_calls import tools_of

    declared = {tool["function"]["name"]: tool["function"]["parameters"] for tool in tools_of(env.protocol)}
    try:
        arguments = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        return None
    schema = declared.get(name)
    if schema is None or not isinstance(arguments, dict) or set(arguments) != set(schema["properties"]):
        return None
    return arguments if all(isinstance(value, str) for value in arguments.values()) else None


def replay(
    options: Mapping[str, Any], row: Mapping[str, Any], turns: Iterable[tuple[Sequence[ToolCallStep], str | None]]
) -> ReplayedEpisode:
    """Play a rollout's turns through a fresh episode: each turn is (its tool calls, its text).

    A turn with tool calls steps each call the tool server would have accepted (:func:`_reaches_tool`); a turn
    without calls is the final message and is stepped as the last
    action (its ``<answer>`` under ``tool-call``, the whole message under ``tool-call-message``). An episode the
    turns leave running is truncated and scored like any truncated episode
    (:func:`~searchenv.adapters.tool_steps.finish_episode`).
    """
    env = start_episode(options, row)
    outputs: list[str | None] = []
    final: str | None = None
    for calls, text in turns:
        if env.episode.done:
            break
        if calls:
            for call in calls:
                arguments = _reaches_tool(env, call.name, call.arguments)
                outputs.append(None if arguments is None else step_tool_call(env, call.name, arguments))
        else:
            final = text or ""
            break
    episode = finish_episode(env, final if not env.episode.done else None)
    return ReplayedEpisode(episode, tuple(outputs))
