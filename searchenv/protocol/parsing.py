"""Reading one model action: its first block by the scanner's rule, and what was dropped after it."""

from __future__ import annotations

from searchenv.protocol.base import ParsedAction, Protocol
from searchenv.protocol.tool_calls import message_answer, read_call

__all__ = ["parse_action"]


def parse_action(text: str, protocol: Protocol) -> ParsedAction:
    """Read an action: its first complete ``search``, ``open`` or ``answer`` block, by :attr:`Protocol.scanner`'s rule.

    The block is the first closing tag together with the nearest opening tag of its kind before it
    (:mod:`searchenv.protocol.scan`); text after it is dropped, and the hints an environment appends are never
    read as tags. No complete block makes the action invalid, and so does an empty query (``<search></search>``
    asks nothing). For tool-call protocols the search block is a tool call, whose JSON is then validated
    (:func:`~searchenv.protocol.tool_calls.read_call`); with ``answer_mode="message"`` an action without a tool
    call is the answer. This is the only reader of actions: the environment, the text path and the token builder
    all call it. Linear in ``len(text)``; never raises.
    """
    block = protocol.scanner.read(text).first_block()
    if block is None:
        if protocol.answer_mode == "message":
            answer = message_answer(text)
            if answer:
                return ParsedAction("answer", answer, text, "")
        return ParsedAction("invalid", None, text, "")
    kept, dropped = text[: block.end], text[block.end :]
    body = text[block.body_start : block.body_end]
    if block.kind == "answer":
        return ParsedAction("answer", body.strip(), kept, dropped)
    if protocol.action_format == "tool-call":
        kind, content, reason = read_call(body, protocol.answer_mode, protocol.opens)
        return ParsedAction(kind, content, kept, dropped, reason)
    content = body.strip()
    if not content:  # <search></search> asks nothing, <access></access> names nothing
        return ParsedAction("invalid", None, kept, dropped)
    return ParsedAction("open" if block.kind == "open" else "search", content, kept, dropped)
