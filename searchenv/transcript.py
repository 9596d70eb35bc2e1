"""What happened in an episode, turn by turn, and the one reading of it that every reward, metric and log uses.

An episode is a list of :class:`Turn` values: the action the parser accepted (first complete search or answer
tag; text after it dropped), then what the environment inserted after it and whether a search really ran.
Everything downstream derives from that list through :class:`Facts` — the prediction (the accepted answer of
the final action, nothing else), the number of searches that returned results, the text the model was
actually shown (after clipping), the invalid actions. There is no second extractor.

Two ways in, one way out:

* the **environment** appends a :class:`Turn` per step (it knows who wrote what and which searches ran);
* the **text path** (:func:`turns_from_segments`, :func:`turns_from_text`) rebuilds the same turns from a
  transcript, with the same parser and the same rules, for trainers that only hold text. Given the
  environment's spans (who wrote each piece), it reproduces the environment's turns exactly — the
  differential test in ``tests/test_transcript_differential.py`` checks this on 100,000+ generated episodes.
  Without spans it cannot know who wrote an ``<information>`` block, so :func:`turns_from_text` recovers the
  action boundaries (for the prediction) but credits no search and no retrieved text unless the caller says
  it trusts the transcript.

Every reader here is linear in the length of the text (adversarial responses of megabytes included).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from searchenv.lazy import computed_once
from searchenv.protocol import ParsedAction, Protocol, parse_action
from searchenv.types import Passage

__all__ = [
    "Facts",
    "SearchStatus",
    "Turn",
    "facts",
    "segments_of",
    "turns_from_segments",
    "turns_from_text",
]

Author = Literal["model", "env"]
SearchStatus = Literal["executed", "failed", "skipped"]


@dataclass(slots=True)
class Turn:
    """One action and the environment's answer to it: a record, one per action, never changed once appended.

    Read-only by convention rather than ``frozen``: a frozen dataclass pays an ``object.__setattr__`` call per
    field (three times the cost to build), and a ``NamedTuple``'s fields are read through a descriptor that
    Python 3.11 does not specialise; a slotted dataclass is the cheapest record to build and to read, and the
    environment builds one (with its :class:`~searchenv.protocol.ParsedAction`) at every step.

    Attributes:
        action: what the parser accepted (``kind``, ``content``, the ``kept`` text, the ``dropped`` rest).
        observation: the text the environment inserted after it (``""`` when it inserted nothing).
        search: for search actions, whether the search ran and returned (``"executed"``), could not be served
            (``"failed"``), or was not run because the action budget had ended (``"skipped"``); else ``None``.
        passages: what the engine returned (environment path only; the text path cannot know).
        shown_ids: ids of the passages shown after clipping (environment path only).
        error: why a search failed (environment path only; never shown to the model).
    """

    action: ParsedAction
    observation: str = ""
    search: SearchStatus | None = None
    passages: tuple[Passage, ...] = ()
    shown_ids: tuple[str, ...] = ()
    error: str | None = None

    @property
    def searched(self) -> bool:
        """A search ran and its results were shown."""
        return self.search == "executed"


class Facts:
    """The facts every reward, metric and ``info`` field reads, derived from the turns and nothing else.

    The prediction and the action and search counts, which every terminal step reports, are read when the facts
    are made; the rest is computed the first time it is read (a terminal step that only needs the prediction
    does not join the transcript or scan the information blocks) and then kept. The turns are copied, so an
    episode that goes on does not change facts taken earlier.

    Attributes:
        prediction: the content of the accepted answer, when the final action was one; ``None`` otherwise.
        num_actions / num_searches / num_failed_searches / num_invalid: counts over the turns; a search that
            failed or was skipped is not a search.
        shown_texts: the body of every information block shown after an executed search, exactly as the model
            saw it (clipped, neutralised): what a retrieval hit is judged on.
        model_text: the model's accepted actions, concatenated (dropped text excluded).
        response: the whole transcript after the prompt: accepted actions and inserted text, in order.
    """

    FIELDS: ClassVar[tuple[str, ...]] = (
        "prediction",
        "num_actions",
        "num_searches",
        "num_failed_searches",
        "num_invalid",
        "shown_texts",
        "model_text",
        "response",
    )

    def __init__(self, turns: Sequence[Turn], protocol: Protocol, *, credit_searches: bool = True):
        self._turns = turns = tuple(turns)
        self._protocol = protocol
        self._credit = credit_searches
        # The facts every terminal step reads (the reward, info, the metrics): cheaper set once than looked up.
        final = turns[-1].action if turns else None
        self.prediction: str | None = final.content if final is not None and final.kind == "answer" else None
        self.num_actions = len(turns)
        self._executed = [t for t in turns if t.searched] if credit_searches else []
        self.num_searches = len(self._executed)

    @property
    def turns(self) -> tuple[Turn, ...]:
        """The turns these facts were read from."""
        return self._turns

    @computed_once
    def num_failed_searches(self) -> int:
        return sum(t.search == "failed" for t in self._turns) if self._credit else 0

    @computed_once
    def num_invalid(self) -> int:
        return sum(t.action.kind == "invalid" for t in self._turns)

    @computed_once
    def shown_texts(self) -> tuple[str, ...]:
        bodies = (self._protocol.information_body(t.observation) for t in self._executed)
        return tuple(body for body in bodies if body is not None)

    @computed_once
    def model_text(self) -> str:
        return "".join(t.action.kept for t in self._turns)

    @computed_once
    def response(self) -> str:
        return "".join(t.action.kept + t.observation for t in self._turns)

    def as_tuple(self) -> tuple[Any, ...]:
        """Every fact, in :attr:`FIELDS` order (computes them all)."""
        return tuple(getattr(self, name) for name in self.FIELDS)

    def __eq__(self, other: object) -> bool:
        return self.as_tuple() == other.as_tuple() if isinstance(other, Facts) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "Facts(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in self.FIELDS) + ")"


def facts(turns: Sequence[Turn], protocol: Protocol, *, credit_searches: bool = True) -> Facts:
    """Derive :class:`Facts` from turns. ``credit_searches=False`` counts no search and no shown text."""
    return Facts(turns, protocol, credit_searches=credit_searches)


def segments_of(turns: Iterable[Turn]) -> list[tuple[Author, str]]:
    """The transcript as ``(author, text)`` pieces, in order (empty observations omitted)."""
    pieces: list[tuple[Author, str]] = []
    for turn in turns:
        pieces.append(("model", turn.action.kept))
        if turn.observation:
            pieces.append(("env", turn.observation))
    return pieces


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
