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

from searchenv.episode.health import REPEAT_NGRAM, count_passages, think_scanner
from searchenv.protocol import ParsedAction, Protocol
from searchenv.types import Passage

__all__ = [
    "Facts",
    "FactsTally",
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


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
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
        tally = FactsTally(protocol, credit_searches=credit_searches)
        for turn in turns:
            tally.add(turn)
        return tally.facts()


class FactsTally:
    """:class:`Facts` kept up to date one turn at a time, so reading them costs the same late in an episode as
    early: each count, the repeated think 4-grams and the repeated queries are folded in as a turn is added, and
    only the texts are joined when :meth:`facts` is asked for.

    :meth:`Facts.of` reads every transcript this way (the text path too); an :class:`~searchenv.episode.Episode`
    keeps one, so a step that reads the episode's counters does not re-read the whole transcript.
    """

    def __init__(self, protocol: Protocol, *, credit_searches: bool = True):
        self.protocol = protocol
        self.credit_searches = credit_searches
        self.turns: list[Turn] = []
        self.searches: list[Turn] = []
        self.num_searches = self.num_failed_searches = self.num_invalid = self.num_opens = self.num_failed_opens = 0
        self.shown_texts: list[str] = []
        self.response_words = 0
        self.think_words = 0
        self._ends_in_word = False  # the model text so far ends inside a word (joined text may merge two)
        self._think_scanner = think_scanner(protocol.think_tags)
        self._grams: set[tuple[str, ...]] = set()
        self._gram_count = 0
        self._gram_tail: list[str] = []  # the last REPEAT_NGRAM - 1 think words: a 4-gram spans turns
        self._queries: set[str] = set()
        self._repeated_queries = 0
        self._passages: int | None = 0

    def add(self, turn: Turn) -> None:
        """Fold one more turn in (the turns of an episode, in order)."""
        self.turns.append(turn)
        kept = turn.action.kept
        self.num_invalid += turn.action.kind == "invalid"
        if kept.strip():
            merged = self._ends_in_word and not kept[0].isspace()
            self.response_words += len(kept.split()) - merged
        if kept:
            self._ends_in_word = not kept[-1].isspace()
        words = self._think_words(kept)
        self.think_words += len(words)
        grams = self._new_grams(words)
        self._grams.update(grams)
        self._gram_count += len(grams)
        self._gram_tail = (self._gram_tail + words)[-(REPEAT_NGRAM - 1) :]
        if not self.credit_searches:
            return
        self.num_failed_searches += turn.search == "failed"
        self.num_opens += turn.read
        self.num_failed_opens += turn.opened == "failed"
        if turn.searched or turn.read:
            body = self.protocol.information_body(turn.observation)
            if body is not None:
                self.shown_texts.append(body)
        if turn.searched:
            self.searches.append(turn)
            self.num_searches += 1
            key = " ".join((turn.action.content or "").lower().split())
            self._repeated_queries += key in self._queries
            self._queries.add(key)
            if self._passages is not None:
                body = self.protocol.information_body(turn.observation) or ""
                count = count_passages(body, self.protocol.passage_template)
                self._passages = None if count is None else self._passages + count

    @property
    def prediction(self) -> str | None:
        """The content of the accepted answer, when the final action is one."""
        final = self.turns[-1].action if self.turns else None
        return final.content if final is not None and final.kind == "answer" else None

    def facts(self) -> Facts:
        """The facts of the turns added so far."""
        turns = tuple(self.turns)
        prediction = self.prediction
        repeated = self._gram_count - len(self._grams)
        return Facts(
            turns=turns,
            prediction=prediction,
            searches=tuple(self.searches),
            num_actions=len(turns),
            num_searches=self.num_searches,
            num_failed_searches=self.num_failed_searches,
            num_invalid=self.num_invalid,
            num_opens=self.num_opens,
            num_failed_opens=self.num_failed_opens,
            shown_texts=tuple(self.shown_texts),
            model_text="".join(t.action.kept for t in turns),
            response="".join(t.action.kept + t.observation for t in turns),
            response_words=self.response_words,
            think_words=self.think_words,
            think_repetition=repeated / self._gram_count if self._gram_count else 0.0,
            answer_words=len(prediction.split()) if prediction else 0,
            num_repeated_searches=self._repeated_queries,
            passages_read=self._passages if self.credit_searches else 0,
        )

    def _think_words(self, action: str) -> list[str]:
        """The lower-cased words of the action's think blocks (:func:`~searchenv.episode.health.think_text`)."""
        blocks = self._think_scanner.read(action).blocks()
        return [word for b in blocks for word in action[b.body_start : b.body_end].lower().split()]

    def _new_grams(self, words: list[str]) -> list[tuple[str, ...]]:
        joined = self._gram_tail + words
        return list(zip(*(joined[i:] for i in range(REPEAT_NGRAM))))


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
