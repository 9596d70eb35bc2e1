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
from searchenv.protocol.scan import ENV_TEXT

__all__ = ["turns_from_segments", "turns_from_text"]


def _status(action: ParsedAction, observation: str, protocol: Protocol) -> SearchStatus | None:
    """How a search or an open ended, read from what the environment inserted after it."""
    if action.kind not in ("search", "open"):
        return None
    if not observation:
        return "skipped"
    failed = (protocol.format_error(),) if action.kind == "search" else protocol.open_error_blocks
    if observation in failed:
        return "failed"
    return "executed" if protocol.information_body(observation) is not None else "failed"


def _turn(action: ParsedAction, observation: str, protocol: Protocol) -> Turn:
    """One turn read back: the action, its observation, and how its search or open ended."""
    status = _status(action, observation, protocol)
    if action.kind == "open":
        return Turn(action, observation, opened=status)
    return Turn(action, observation, status)


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
                turns.append(_turn(action, observation, protocol))
            action, observation = parse_action(text, protocol), ""
        elif author == "env":
            if action is None:
                raise ValueError("a transcript starts with the model's text; environment text came first")
            observation += text
        else:
            raise ValueError(f"segment author must be 'model' or 'env', got {author!r}")
    if action is not None:
        turns.append(_turn(action, observation, protocol))
    return turns


def turns_from_text(response: str, protocol: Protocol) -> list[Turn]:
    """Rebuild the turns from a response string alone, without knowing who wrote what.

    Action boundaries are recovered from what the environment inserts, read with the action parser's scanner
    (:attr:`Protocol.scanner`): an information block (or the failed-search or failed-open block) right after an
    action whose first block is a search or an open, and a corrective hint the protocol knows
    (:attr:`Protocol.env_hints`: its own, and Search-R1's) after an action without one — a hint is never read as the
    model's tags. That gives the prediction by the environment's own rule. Whether a block was really inserted
    cannot be known from text — a model can write ``<search>q</search><information>…`` itself — so callers credit
    searches from these turns only when they trust the transcript (see
    :meth:`searchenv.reward_specs.Rollout.from_text`). Linear in ``len(response)``: one
    :class:`~searchenv.protocol.scan.TextScan` reads the whole response.
    """
    scan = protocol.scanner.read(response)
    info_head = protocol.information_prefix + protocol.information_tags[0]
    info_close, info_suffix = protocol.information_tags[1], protocol.information_suffix
    turns: list[Turn] = []
    start = 0
    while start < len(response) or not turns:
        found = scan.first(start)
        if found is not None:
            if found.kind == ENV_TEXT:  # a hint before any complete block: the action before it was invalid
                hint_start, hint_end = found.start, found.end
            else:  # a block the environment answered with a hint (an empty query, a bad tool call)
                hint_start, hint_end = found.end, scan.env_text_at(found.end)
            if hint_end >= 0:
                turns.append(Turn(parse_action(response[start:hint_start], protocol), response[hint_start:hint_end]))
                start = hint_end
                continue
            if found.kind in ("search", "open") and response.startswith(info_head, found.end):
                closed = response.find(info_close, found.end + len(info_head))
                end = len(response) if closed < 0 else closed + len(info_close)
                if info_suffix and response.startswith(info_suffix, end):
                    end += len(info_suffix)
                action, observation = parse_action(response[start : found.end], protocol), response[found.end : end]
                turns.append(_turn(action, observation, protocol))
                start = end
                continue
        # An answer, or a search or open nothing was inserted after: the final action; the rest is dropped.
        turns.append(_turn(parse_action(response[start:], protocol), "", protocol))
        break
    return turns
