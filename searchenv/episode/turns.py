"""What happened in an episode, turn by turn (:class:`Turn`), and the one reading of it that every reward, metric
and log uses (:class:`Facts`).

An episode is a list of :class:`Turn` values: the action the parser accepted (first complete search or answer
tag; text after it dropped), then what the environment inserted after it and whether a search really ran.
Everything downstream derives from that list through :class:`Facts` — the prediction (the accepted answer of
the final action, nothing else), the number of searches that returned results, the text the model was
actually shown (after clipping), the invalid actions. There is no second extractor: the text path
(:mod:`searchenv.episode.readers`) rebuilds the same turns from a transcript.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from searchenv.lazy import computed_once
from searchenv.protocol import ParsedAction, Protocol
from searchenv.types import Passage

__all__ = [
    "Facts",
    "SearchStatus",
    "Turn",
    "facts",
    "segments_of",
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
