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
from dataclasses import dataclass, field
from typing import Literal

from searchenv.episode.health import count_passages, count_repeated_queries, repetition_ratio, think_text
from searchenv.protocol import ParsedAction, Protocol
from searchenv.types import Passage

__all__ = [
    "Facts",
    "OpenStatus",
    "SearchStatus",
    "Turn",
    "facts",
    "segments_of",
]

Author = Literal["model", "env"]
SearchStatus = Literal["executed", "failed", "skipped"]
#: How an open action ended: the document was shown, it could not be opened (or the reference named none), or the
#: action budget had ended.
OpenStatus = Literal["executed", "failed", "skipped"]


@dataclass(frozen=True)
class Turn:
    """One action and the environment's answer to it: a record, one per action, never changed once appended.

    Attributes:
        action: what the parser accepted (``kind``, ``content``, the ``kept`` text, the ``dropped`` rest).
        observation: the text the environment inserted after it (``""`` when it inserted nothing).
        search: for search actions, whether the search ran and returned (``"executed"``), could not be served
            (``"failed"``), or was not run because the action budget had ended (``"skipped"``); else ``None``.
        passages: what the engine returned (environment path only; the text path cannot know).
        shown_ids: ids of the passages shown after clipping (environment path only).
        error: why a search or an open failed (environment path only; never shown to the model).
        opened: for open actions, whether the document was shown (``"executed"``), could not be opened or the
            reference named no document (``"failed"``), or the action budget had ended (``"skipped"``); else ``None``.
        document_ref: what an open asked the opener for — the id or URL of the result it named (environment path
            only; the text path cannot resolve an index).
    """

    action: ParsedAction
    observation: str = ""
    search: SearchStatus | None = None
    passages: tuple[Passage, ...] = ()
    shown_ids: tuple[str, ...] = ()
    error: str | None = None
    opened: OpenStatus | None = None
    document_ref: str | None = None

    @property
    def searched(self) -> bool:
        """A search ran and its results were shown."""
        return self.search == "executed"

    @property
    def read(self) -> bool:
        """A document was opened and shown."""
        return self.opened == "executed"


@dataclass(frozen=True)
class Facts:
    """The facts every reward, metric and ``info`` field reads, derived from the turns and nothing else.

    Built by :func:`facts` (or :meth:`of`); every value is computed when the facts are made — a handful of sums
    and joins over the turns — so they are plain attributes that compare, copy and pickle as data. The turns are
    copied, so an episode that goes on does not change facts taken earlier.

    Attributes:
        turns: the turns these facts were read from.
        prediction: the content of the accepted answer, when the final action was one; ``None`` otherwise.
        searches: the turns whose search ran and was shown (none when searches are not credited).
        num_actions / num_searches / num_failed_searches / num_invalid: counts over the turns; a search that
            failed or was skipped is not a search.
        num_opens / num_failed_opens: documents opened and shown, and opens that failed (a skipped open is
            neither); not credited, like searches, without ``credit_searches``.
        shown_texts: the body of every information block shown after an executed search or open, in order,
            exactly as the model saw it (clipped, neutralised): what a retrieval hit is judged on.
        model_text: the model's accepted actions, concatenated (dropped text excluded).
        response: the whole transcript after the prompt: accepted actions and inserted text, in order.
        response_words: length of :attr:`model_text` in whitespace-separated words (a tokenizer-free length).
        think_words / think_repetition: the words inside the model's think blocks, and the share of their word
            4-grams that repeat an earlier one (:mod:`searchenv.episode.health`).
        answer_words: words of the prediction (0 without one).
        num_repeated_searches: credited searches whose query repeats an earlier credited one.
        passages_read: passages shown after credited searches, counted in the information blocks as the model
            saw them (:func:`~searchenv.episode.health.count_passages`), so the environment and the text path
            agree; ``None`` when the protocol's passage template has no ``{rank}`` to count by.
    """

    # The turns are what the facts were read from, not facts: the text path cannot know the passages an
    # environment returned, so two readings of one transcript compare equal on the facts alone.
    turns: tuple[Turn, ...] = field(compare=False)
    prediction: str | None
    searches: tuple[Turn, ...] = field(compare=False)
    num_actions: int
    num_searches: int
    num_failed_searches: int
    num_invalid: int
    num_opens: int
    num_failed_opens: int
    shown_texts: tuple[str, ...]
    model_text: str
    response: str
    response_words: int
    think_words: int
    think_repetition: float
    answer_words: int
    num_repeated_searches: int
    passages_read: int | None

    @classmethod
    def of(cls, turns: Sequence[Turn], protocol: Protocol, *, credit_searches: bool = True) -> Facts:
        """Read the facts of ``turns``. ``credit_searches=False`` counts no search and no shown text (a bare
        transcript whose information blocks nobody vouches for)."""
        turns = tuple(turns)
        final = turns[-1].action if turns else None
        searches = tuple(t for t in turns if t.searched) if credit_searches else ()
        shown = (t for t in turns if t.searched or t.read) if credit_searches else ()
        bodies = (protocol.information_body(t.observation) for t in shown)
        model_text = "".join(t.action.kept for t in turns)
        thought = think_text((t.action.kept for t in turns), protocol.think_tags)
        prediction = final.content if final is not None and final.kind == "answer" else None
        return cls(
            turns=turns,
            prediction=prediction,
            searches=searches,
            num_actions=len(turns),
            num_searches=len(searches),
            num_failed_searches=sum(t.search == "failed" for t in turns) if credit_searches else 0,
            num_invalid=sum(t.action.kind == "invalid" for t in turns),
            num_opens=sum(t.read for t in turns) if credit_searches else 0,
            num_failed_opens=sum(t.opened == "failed" for t in turns) if credit_searches else 0,
            shown_texts=tuple(body for body in bodies if body is not None),
            model_text=model_text,
            response="".join(t.action.kept + t.observation for t in turns),
            response_words=len(model_text.split()),
            think_words=len(thought.split()),
            think_repetition=repetition_ratio(thought),
            answer_words=len(prediction.split()) if prediction else 0,
            num_repeated_searches=count_repeated_queries([t.action.content or "" for t in searches]),
            passages_read=_passages_read(searches, protocol),
        )


def _passages_read(searches: Sequence[Turn], protocol: Protocol) -> int | None:
    """The passages of every search's information block, by the one counting rule of both paths."""
    template = protocol.passage_template
    counts = [count_passages(protocol.information_body(t.observation) or "", template) for t in searches]
    return None if None in counts else sum(counts)  # type: ignore[arg-type]


def facts(turns: Sequence[Turn], protocol: Protocol, *, credit_searches: bool = True) -> Facts:
    """Derive :class:`Facts` from turns. ``credit_searches=False`` counts no search and no shown text."""
    return Facts.of(turns, protocol, credit_searches=credit_searches)


def segments_of(turns: Iterable[Turn]) -> list[tuple[Author, str]]:
    """The transcript as ``(author, text)`` pieces, in order (empty observations omitted)."""
    pieces: list[tuple[Author, str]] = []
    for turn in turns:
        pieces.append(("model", turn.action.kept))
        if turn.observation:
            pieces.append(("env", turn.observation))
    return pieces
