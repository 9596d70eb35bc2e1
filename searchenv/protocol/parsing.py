"""Reading one model action: the first complete search or answer of the text, and what was dropped after it."""

from __future__ import annotations

from searchenv.protocol.base import ParsedAction, Protocol
from searchenv.protocol.tool_calls import parse_tool_action

__all__ = ["parse_action"]


def parse_action(text: str, protocol: Protocol) -> ParsedAction:
    """Read the first complete ``search`` or ``answer`` tag pair of an action.

    Scanning is linear: for each kind the first opening tag is found, then the first closing tag after
    it; the pair that closes first wins. Text after it is dropped. A lone or unclosed tag makes the
    action invalid, and so does an empty query (``<search></search>`` asks nothing). This is the only
    reader of actions: the environment, the text path and the token builder all call it. Tool-call protocols
    read the JSON call with the same first-complete-pair rule (:func:`searchenv.protocol.tool_calls.parse_tool_action`).
    """
    if protocol.action_format == "tool-call":
        return parse_tool_action(text, protocol)
    search_open, search_close = protocol.search_tags
    answer_open, answer_close = protocol.answer_tags
    # The first opening tag of each kind, then the first closing tag after it; the pair that closes first wins.
    # Written out for the two kinds: this runs at every step, and a loop over built tuples costs twice as much.
    search_end = answer_end = len(text) + 1
    start = text.find(search_open)
    if start >= 0:
        close = text.find(search_close, start + len(search_open))
        if close >= 0:
            search_start, search_end = start + len(search_open), close + len(search_close)
    start = text.find(answer_open)
    if start >= 0:
        close = text.find(answer_close, start + len(answer_open))
        if close >= 0:
            answer_start, answer_end = start + len(answer_open), close + len(answer_close)
    if answer_end < search_end:
        content = text[answer_start : answer_end - len(answer_close)].strip()
        return ParsedAction("answer", content, text[:answer_end], text[answer_end:])
    if search_end > len(text):
        return ParsedAction("invalid", None, text, "")
    content = text[search_start : search_end - len(search_close)].strip()
    if not content:  # <search></search> asks nothing
        return ParsedAction("invalid", None, text[:search_end], text[search_end:])
    return ParsedAction("search", content, text[:search_end], text[search_end:])
