"""The text protocol: which tags mean *search* and *answer*, how results are shown, and how an action is read.

* :mod:`~searchenv.protocol.base` — the :class:`Protocol` value and :class:`ParsedAction`;
* :mod:`~searchenv.protocol.tags` — the papers' tag protocols;
* :mod:`~searchenv.protocol.tool_calls` — native tool calls (Qwen/Hermes ``<tool_call>``);
* :mod:`~searchenv.protocol.scan` — :class:`~searchenv.protocol.scan.TagScanner`, the one rule for where a block
  of model text opens and closes (every reader of model text uses it);
* :mod:`~searchenv.protocol.parsing` — :func:`parse_action`, the one reader of actions.

:data:`PROTOCOLS` names every built-in protocol; :func:`get_protocol` resolves a name.
"""

from __future__ import annotations

from searchenv.protocol.base import AnswerMode, ParsedAction, Protocol
from searchenv.protocol.parsing import parse_action
from searchenv.protocol.tags import TAG_PROTOCOLS
from searchenv.protocol.tool_calls import tool_call_protocol

__all__ = ["PROTOCOLS", "AnswerMode", "ParsedAction", "Protocol", "get_protocol", "parse_action"]

#: Every built-in protocol by name: the papers' tags, then native tool calls with ChatML/Hermes framing (build
#: others with ``tool_call_protocol(tokenizer)``).
PROTOCOLS: dict[str, Protocol] = {
    **TAG_PROTOCOLS,
    "tool-call": tool_call_protocol(answer="tag", name="tool-call"),
    "tool-call-message": tool_call_protocol(answer="message", name="tool-call-message"),
    "tool-call-answer-tool": tool_call_protocol(answer="tool", name="tool-call-answer-tool"),
    "tool-call-open": tool_call_protocol(answer="tag", name="tool-call-open", open_page=True),
}


def get_protocol(protocol: str | Protocol) -> Protocol:
    """Resolve a protocol name (or pass a :class:`Protocol` through)."""
    if isinstance(protocol, Protocol):
        return protocol
    try:
        return PROTOCOLS[protocol]
    except KeyError:
        raise ValueError(
            f"unknown protocol {protocol!r}; choose one of {sorted(PROTOCOLS)} or pass a searchenv.Protocol"
        ) from None
