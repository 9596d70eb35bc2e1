"""Stepping a framework's parsed tool calls through a :class:`~searchenv.env.SearchQAEnv` episode.

Trainers with their own tool loop (TRL's ``environment_factory``, veRL's ``ToolAgentLoop``) parse the model's
``<tool_call>`` themselves and hand a tool its name and arguments. Stepping each call through the episode as the
canonical tool-call action keeps every rule of the environment — the action budget, query clipping, failed
searches, neutralisation, the information cap — and keeps the episode the one record the reward reads. These
helpers are the shared part of :mod:`searchenv.adapters.trl.tools` and :mod:`searchenv.adapters.verl.tool`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from searchenv.protocol import parse_action

if TYPE_CHECKING:
    from searchenv.env.search_qa import SearchQAEnv
    from searchenv.episode.episode import Episode

__all__ = ["BUDGET_OVER", "EPISODE_OVER", "call_action", "check_tool_protocol", "finish_episode", "tool_result"]

EPISODE_OVER = "The episode has ended: no more tool calls are executed."
BUDGET_OVER = "No search was run: the action budget has ended."


def check_tool_protocol(env: SearchQAEnv, answer_tool: bool = True) -> None:
    """Refuse a tag protocol (and, unless ``answer_tool``, the answer-tool protocol) with the fix in the message."""
    protocol = env.unwrapped.protocol
    if protocol.action_format != "tool-call":
        raise ValueError(
            f"protocol {protocol.name!r} is a tag protocol; a trainer's tool loop needs a tool-call protocol "
            "(protocol='tool-call', 'tool-call-message' or 'tool-call-answer-tool')"
        )
    if not answer_tool and protocol.answer_mode == "tool":
        raise ValueError(
            f"protocol {protocol.name!r} answers through an 'answer' tool, which this adapter does not provide; "
            "use protocol='tool-call-message' (the final message is the answer) or 'tool-call' (an <answer> block)"
        )


def call_action(name: str, arguments: Any) -> str:
    """The canonical text of one tool call, as the environment's parser reads (and validates) it."""
    call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{call}\n</tool_call>"


def tool_result(env: SearchQAEnv, observation: str, info: dict[str, Any]) -> str:
    """The text a tool message holds after a step: the information block's body (neutralised, capped), an error
    naming what was wrong with the call, or why no search ran."""
    if "invalid_reason" in info:
        return f"Error: {info['invalid_reason']}."
    if info.get("search_skipped"):
        return BUDGET_OVER
    body = env.unwrapped.protocol.information_body(observation)
    return observation if body is None else body


def finish_episode(env: SearchQAEnv, final_text: str | None) -> Episode:
    """End the episode after the trainer's loop stopped: the final message is the last action, else truncate.

    A final message that still holds a search call (one the trainer could not parse) never ran as a search, so
    it is not stepped (stepping it would search now and credit text the model never saw).
    """
    base = env.unwrapped
    episode = base.episode
    if not episode.done and final_text is not None and parse_action(final_text, base.protocol).kind != "search":
        base.step(final_text)
    if not episode.done:
        base.truncate()
    return episode
