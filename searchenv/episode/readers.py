"""The text path: rebuild an episode's turns from a transcript, with the environment's parser and rules.

Trainers that only hold text use these readers:

* :func:`turns_from_segments` takes ``(author, text)`` pieces (the environment's spans, or a token loss mask
  decoded run by run) and reproduces the environment's turns exactly — the differential test in
  ``tests/test_transcript_differential.py`` checks this on generated episodes;
* :func:`turns_from_text` takes a response string alone. It cannot know who wrote an ``<information>`` block,
  so it recovers the action boundaries (for the prediction) but credits no search and no retrieved text unless
  the caller says it trusts the transcript.

Every reader here is linear in the length of the text (adversarial responses of megabytes included).
"""

from __future__ import annotations

from collections.abc import Iterable

from searchenv.episode.turns import SearchStatus, Turn
from searchenv.protocol import ParsedAction, Protocol, parse_action

__all__ = ["turns_from_segments", "turns_from_text"]


def _search_status(action: ParsedAction, observation: str, protocol: Protocol) -> SearchStatus | None:
    """How a search ended, read from what the environment inserted after it."""
    if action.kind != "search":
        return None
    if not observation:
        return "skipped"
    if observation == protocol.format_error():
        return "failed"
    return "executed" if protocol.information_body(observation) is not None else "failed"


def turns_from_segments(segments: Iterable[tuple[str, str]], protocol: Protocol) -> list[Turn]:
    """Rebuild the turns from ``(author, text)`` pieces whose authorship the caller knows.

    Each model piece is one action, read with the environment's parser; the environment text after it is its
    observation. This is the text path to use whenever the environment's spans (or a token loss mask, decoded
    run by run) are at hand: it agrees with the environment by construction.
    """
    turns: list[Turn] = []
    action: ParsedAction | None = None
    observation = ""
    for author, text in segments:
        if author == "model":
            if action is not None:
                turns.append(Turn(action, observation, _search_status(action, observation, protocol)))
            action, observation = parse_action(text, protocol), ""
        elif author == "env":
            if action is None:
                raise ValueError("a transcript starts with the model's text; environment text came first")
            observation += text
        else:
            raise ValueError(f"segment author must be 'model' or 'env', got {author!r}")
    if action is not None:
        turns.append(Turn(action, observation, _search_status(action, observation, protocol)))
    return turns


class _TagFinder:
    """``str.find`` with memory: each tag's next occurrence is remembered, so a left-to-right reader whose
    start positions only move forward scans the text once per tag instead of once per question."""

    __slots__ = ("_cache", "_text", "end")

    def __init__(self, text: str):
        self._text = text
        self.end = len(text)
        self._cache: dict[str, tuple[int, int]] = {}  # tag -> (asked from, found at)

    def find(self, tag: str, start: int) -> int:
        """First occurrence of ``tag`` at or after ``start``; :attr:`end` when there is none."""
        asked, found = self._cache.get(tag, (-1, -1))
        if not asked <= start <= found:
            found = self._text.find(tag, start)
            found = self.end if found < 0 else found
            self._cache[tag] = (start, found)
        return found

    def first_pair(self, start: int, protocol: Protocol) -> tuple[int, str]:
        """End and kind of the first complete search/answer pair at or after ``start``, by parse_action's rule;
        ``(end, "invalid")`` when there is none."""
        best, kind = self.end + 1, "invalid"
        pairs = [("search", protocol.search_tags)]
        if protocol.answer_mode == "tag":  # other tool-call answer modes have no answer tag pair
            pairs.append(("answer", protocol.answer_tags))
        for name, (open_tag, close_tag) in pairs:
            opened = self.find(open_tag, start)
            if opened >= self.end:
                continue
            closed = self.find(close_tag, opened + len(open_tag))
            if closed < self.end and closed + len(close_tag) < best:
                best, kind = closed + len(close_tag), name
        return best, kind


def turns_from_text(response: str, protocol: Protocol) -> list[Turn]:
    """Rebuild the turns from a response string alone, without knowing who wrote what.

    Action boundaries are recovered from what the environment inserts: an information block (or the
    failed-search block) right after an action whose first complete tag is a search, and the corrective hint
    after an action without one. That gives the prediction by the environment's own rule. Whether a block was
    really inserted cannot be known from text — a model can write ``<search>q</search><information>…``
    itself — so callers credit searches from these turns only when they trust the transcript (see
    :meth:`searchenv.reward_specs.Rollout.from_text`). Linear in ``len(response)``.
    """
    finder = _TagFinder(response)
    info_head = protocol.information_prefix + protocol.information_tags[0]
    info_close = protocol.information_tags[1]
    error_block = protocol.format_error()
    hint = protocol.invalid_hint
    turns: list[Turn] = []
    start = 0
    while start < finder.end or not turns:
        pair_end, kind = finder.first_pair(start, protocol)
        hint_at = finder.find(hint, start)
        if hint_at < finder.end and hint_at <= pair_end:  # no accepted tag before the hint: an invalid action
            turns.append(Turn(parse_action(response[start:hint_at], protocol), hint))
            start = hint_at + len(hint)
            continue
        if kind == "search":
            if response.startswith(error_block, pair_end):
                end = pair_end + len(error_block)
            elif response.startswith(info_head, pair_end):
                closed = finder.find(info_close, pair_end + len(info_head))
                end = min(finder.end, closed + len(info_close))
                suffix = protocol.information_suffix
                if suffix and response.startswith(suffix, end):
                    end += len(suffix)
            else:
                end = pair_end
            if end > pair_end:
                action, observation = parse_action(response[start:pair_end], protocol), response[pair_end:end]
                turns.append(Turn(action, observation, _search_status(action, observation, protocol)))
                start = end
                continue
        # An answer, or a search nothing was inserted after: the final action; the rest of the text is dropped.
        action = parse_action(response[start:], protocol)
        turns.append(Turn(action, "", "skipped" if action.kind == "search" else None))
        break
    return turns
