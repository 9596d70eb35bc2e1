"""Is a response well-formed under its protocol? One state machine, configured by the protocol's tags.

The grammar (the study's appendix C, generalised):

* with a think tag (Search-R1, R1-Searcher, ASearcher): ``think ((search|open) information think)* [evidence]
  answer``, where ``open`` (ASearcher's ``<access>``) exists only in protocols that have open tags;
  only whitespace may stand between tags, because all reasoning belongs inside ``think``;
* without one (R-Search): ``((search|open) information)* [evidence] answer``, free text allowed between blocks
  (that is where such a model reasons);
* with evidence tags (R-Search): exactly one evidence block before the answer when a search happened,
  at most one when none did;
* always: tags balanced and not nested, information blocks only right after a search, the answer last
  (trailing whitespace and end-of-turn markers such as ``<|im_end|>`` aside).

Information blocks are opaque: whatever the retrieved passages contain is never parsed as tags.

*Garbled text* (R1-Searcher's rule, on by default for ``r1-searcher``) is defined concretely as any of:
the Unicode replacement character U+FFFD (a byte sequence that failed to decode, typically a multi-byte
character split across tokens), a C0/C1 control character other than tab, newline and carriage return,
a lone surrogate, or a private-use character. Retrieved text is not checked, only what the model wrote.
Empty tag contents are not a format error here (Search-R1 does not treat them as one); :func:`single_block`,
used by R-Search's block rewards, does require content.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from searchenv.episode.turns import Turn
from searchenv.protocol import Protocol, get_protocol
from searchenv.reward_specs.blocks import strip_end_markers

__all__ = ["FormatCheck", "check_format", "check_turns", "find_garbled", "single_block"]

_GARBLED_BY_DEFAULT = frozenset({"r1-searcher"})
_GARBLED = re.compile("[\ufffd\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ue000-\uf8ff\U000f0000-\U0010ffff]")


@dataclass(frozen=True, slots=True)
class FormatCheck:
    """The verdict: ``ok``, and when not ok a ``reason`` naming the first problem found."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


_OK = FormatCheck(True)


def find_garbled(text: str, start: int = 0, end: int | None = None) -> str | None:
    """Describe the first garbled character in ``text[start:end]`` (see the module docstring), or ``None``."""
    match = _GARBLED.search(text, start, len(text) if end is None else end)
    if match is None:
        return None
    char = match.group(0)
    what = "replacement character" if char == "\ufffd" else "non-printable character"
    return f"garbled text: {what} U+{ord(char):04X} at offset {match.start()}"


@dataclass(frozen=True)
class _Grammar:
    """The protocol's tags by role and which block may open after which."""

    roles: dict[str, tuple[str, str]]  # role -> (open, close)
    by_tag: dict[str, tuple[str, bool]]  # tag -> (role, is_open)
    follows: dict[str, tuple[str, ...]]  # state (role last closed, or "start") -> roles that may open next
    pattern: re.Pattern[str]
    strict_text: bool  # only whitespace between tags

    def describe(self, state: str) -> str:
        return "the start" if state == "start" else self.roles[state][1]


@lru_cache(maxsize=32)
def _grammar(protocol: Protocol) -> _Grammar:
    roles = {"search": protocol.search_tags, "information": protocol.information_tags, "answer": protocol.answer_tags}
    if protocol.think_tags:
        roles["think"] = protocol.think_tags
    if protocol.evidence_tags:
        roles["evidence"] = protocol.evidence_tags
    if protocol.open_tags:
        roles["open"] = protocol.open_tags
    final = ("evidence", "answer") if protocol.evidence_tags else ("answer",)
    calls = ("search", "open") if protocol.open_tags else ("search",)
    if protocol.think_tags:
        follows = {"start": ("think",), "think": (*calls, *final), "information": ("think",)}
    else:
        follows = {"start": (*calls, *final), "information": (*calls, *final)}
    follows.update({"search": ("information",), "open": ("information",), "evidence": ("answer",), "answer": ()})
    by_tag: dict[str, tuple[str, bool]] = {}
    for role, (open_tag, close_tag) in roles.items():
        by_tag[open_tag] = (role, True)
        by_tag[close_tag] = (role, False)
    pattern = re.compile("|".join(re.escape(t) for t in sorted(by_tag, key=len, reverse=True)))
    return _Grammar(roles, by_tag, follows, pattern, strict_text=protocol.think_tags is not None)


def check_format(
    response: str, protocol: Protocol | str = "search-r1", *, reject_garbled: bool | None = None
) -> FormatCheck:
    """Check ``response`` (everything after the prompt: model turns and inserted blocks) against the grammar.

    ``reject_garbled`` defaults to the protocol's own rule (on for ``r1-searcher`` only, so that Search-R1's
    published format reward is reproduced exactly). Never raises on any string.
    """
    proto = get_protocol(protocol)
    grammar = _grammar(proto)
    text = strip_end_markers(response)
    if not text.strip():
        return FormatCheck(False, "empty response")
    model_spans: list[tuple[int, int]] = []
    state, inside, pos, searches, evidence_seen = "start", None, 0, 0, False
    while True:
        match = grammar.pattern.search(text, pos)
        end = match.start() if match else len(text)
        between = text[pos:end]
        model_spans.append((pos, end))
        if inside is None and between.strip() and (grammar.strict_text or state == "answer"):
            if state == "answer":
                return FormatCheck(False, f"text after the final {grammar.roles['answer'][1]}")
            if match is None:
                break  # reported below as a missing answer
            where = "before" if state == "start" else f"between {grammar.describe(state)} and"
            return FormatCheck(False, f"text {where} {match.group(0)}")
        if match is None:
            break
        tag = match.group(0)
        role, is_open = grammar.by_tag[tag]
        pos = match.end()
        if inside is not None:
            if role == inside and not is_open:
                inside, state = None, role
                searches += role == "search"
                evidence_seen |= role == "evidence"
                continue
            if is_open:
                return FormatCheck(False, f"nested {tag} inside {grammar.roles[inside][0]}")
            return FormatCheck(False, f"unbalanced {tag} inside {grammar.roles[inside][0]}")
        if not is_open:
            return FormatCheck(False, f"unbalanced {tag}: no open {grammar.roles[role][0]}")
        problem = _opening_problem(grammar, state, role, tag, searches, evidence_seen)
        if problem:
            return FormatCheck(False, problem)
        if role == "information":  # opaque: skip to its closing tag without reading tags inside
            close = text.find(grammar.roles[role][1], pos)
            if close < 0:
                return FormatCheck(False, f"unbalanced {tag}: never closed")
            pos, state = close + len(grammar.roles[role][1]), role
            continue
        inside = role
    if inside is not None:
        return FormatCheck(False, f"unbalanced {grammar.roles[inside][0]}: never closed")
    if state != "answer":
        last = "no protocol tags" if state == "start" else f"the response ends after {grammar.describe(state)}"
        return FormatCheck(False, f"missing answer: {last}")
    if reject_garbled if reject_garbled is not None else proto.name in _GARBLED_BY_DEFAULT:
        for start, end in model_spans:
            found = find_garbled(text, start, end)
            if found:
                return FormatCheck(False, found)
    return _OK


def check_turns(turns: Sequence[Turn]) -> FormatCheck:
    """Well-formedness of a tool-call episode whose answer is a message or a tool call (no answer tag to parse).

    The turn-level reading of the study's rule: every action was accepted (no invalid action) and the final one
    is the answer. Text around the calls is free, as in R-Search's grammar.
    """
    if not turns:
        return FormatCheck(False, "empty response")
    for number, turn in enumerate(turns, 1):
        if turn.action.kind == "invalid":
            return FormatCheck(
                False, f"action {number} is invalid" + (f": {turn.action.reason}" if turn.action.reason else "")
            )
    if turns[-1].action.kind != "answer":
        return FormatCheck(False, "missing answer: the final action is not an answer")
    return _OK


def _opening_problem(
    grammar: _Grammar, state: str, role: str, tag: str, searches: int, evidence_seen: bool
) -> str | None:
    """Why ``tag`` may not open here, or ``None`` if it may."""
    allowed = grammar.follows[state]
    if role in allowed:
        if role == "answer" and "evidence" in grammar.roles and searches and not evidence_seen:
            return f"missing {grammar.roles['evidence'][0]} block before {tag} after a search"
        return None
    if role == "information":
        return f"{tag} block without a search (after {grammar.describe(state)}): the model wrote it itself"
    if state == "answer":
        return f"{tag} after the final {grammar.roles['answer'][1]}: the answer must be the last block"
    if role == "evidence" and evidence_seen:
        return f"more than one {tag} block"
    expected = " or ".join(grammar.roles[r][0] for r in allowed)
    return f"unexpected {tag} after {grammar.describe(state)}; expected {expected}"


def single_block(text: str, tags: tuple[str, str], protocol: Protocol | str = "search-r1") -> FormatCheck:
    """Exactly one well-formed ``open … close`` block in ``text``: balanced, non-empty, no protocol tag inside.

    R-Search's format reward pays for this separately for the evidence and the answer block.
    """
    open_tag, close_tag = tags
    opens, closes = text.count(open_tag), text.count(close_tag)
    if opens == 0 and closes == 0:
        return FormatCheck(False, f"no {open_tag} block")
    if opens != 1 or closes != 1:
        if opens == closes:
            return FormatCheck(False, f"{opens} {open_tag} blocks, expected exactly one")
        return FormatCheck(False, f"unbalanced {open_tag}: {opens} opening and {closes} closing tags")
    start, end = text.find(open_tag), text.find(close_tag)
    if end < start:
        return FormatCheck(False, f"unbalanced {open_tag}: {close_tag} comes first")
    content = text[start + len(open_tag) : end]
    if not content.strip():
        return FormatCheck(False, f"empty {open_tag} block")
    inner = _grammar(get_protocol(protocol)).pattern.search(content)
    if inner:
        return FormatCheck(False, f"nested {inner.group(0)} inside {open_tag}")
    return _OK
