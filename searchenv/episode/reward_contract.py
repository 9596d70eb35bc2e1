"""The reward contract: what a reward spec reads (:class:`Rollout`) and what it returns (:class:`RewardResult`).

A rollout carries the episode's :class:`~searchenv.episode.turns.Facts` — the accepted answer, the searches that
ran, the text the model was shown — and nothing else a reward could re-read differently. It is built from a
live episode (:meth:`Rollout.from_episode`), from the environment's authored pieces
(:meth:`Rollout.from_segments`), or from a bare response string (:meth:`Rollout.from_text`) for trainers that
hold only text. All three read the transcript with the same parser and the same rules, so they agree by
construction; only the bare-text path has to be told whether to believe that ``<information>`` blocks were
inserted by the environment (see ``docs/rewards.md``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, runtime_checkable
from typing import Protocol as TypingProtocol

from searchenv.episode.readers import turns_from_segments, turns_from_text
from searchenv.episode.turns import Facts, Turn, facts
from searchenv.protocol import Protocol, get_protocol

if TYPE_CHECKING:
    from searchenv.episode.episode import Episode

__all__ = ["RewardResult", "RewardSpec", "Rollout"]


def _golds(golden_answers: str | Iterable[str]) -> tuple[str, ...]:
    return (golden_answers,) if isinstance(golden_answers, str) else tuple(map(str, golden_answers))


@dataclass(frozen=True, slots=True)
class Rollout:
    """Everything a reward needs about one finished episode.

    Attributes:
        question: the question (without the instruction template).
        golden_answers: accepted answers.
        protocol: tag set in force.
        facts: what the episode's turns establish (prediction, searches, shown text, accepted text).
        turns: the turns themselves, for specs that need more than the facts.
        extras: anything else a spec may use (e.g. an evidence answerer's output cache).
        metadata: the question's own metadata as its dataset gives it (``QAExample.metadata``: the generated
            world's ``hop_answers``, MuSiQue's ``question_decomposition``, ...), for specs that score more than the
            final answer against the golds (``hop-credit``). The environment path carries it from the episode's
            example; the text paths take it as an argument.
    """

    question: str
    golden_answers: tuple[str, ...]
    protocol: Protocol
    facts: Facts
    turns: tuple[Turn, ...] = ()
    extras: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)

    # -- the facts under the names specs use -------------------------------------------------------------
    @property
    def prediction(self) -> str | None:
        """The accepted answer of the final action, or ``None``."""
        return self.facts.prediction

    @property
    def response(self) -> str:
        """The accepted transcript after the prompt: model actions and inserted blocks, in order."""
        return self.facts.response

    @property
    def model_text(self) -> str:
        """The model's accepted actions only; evidence blocks are read from here."""
        return self.facts.model_text

    @property
    def retrieved_texts(self) -> tuple[str, ...]:
        """The information blocks shown after executed searches, as the model saw them (clipped)."""
        return self.facts.shown_texts

    @property
    def num_searches(self) -> int:
        """Searches that ran and were shown; failed or skipped ones do not count."""
        return self.facts.num_searches

    # -- construction ----------------------------------------------------------------------------------------
    @classmethod
    def from_turns(
        cls,
        turns: Sequence[Turn],
        golden_answers: str | Iterable[str],
        protocol: str | Protocol = "search-r1",
        question: str = "",
        extras: Mapping[str, Any] | None = None,
        *,
        credit_searches: bool = True,
        metadata: Mapping[str, Any] | None = None,
    ) -> Rollout:
        proto = get_protocol(protocol)
        record = facts(turns, proto, credit_searches=credit_searches)
        return cls(
            question, _golds(golden_answers), proto, record, record.turns, dict(extras or {}), dict(metadata or {})
        )

    @classmethod
    def from_episode(cls, episode: Episode, extras: Mapping[str, Any] | None = None) -> Rollout:
        """The environment path: the episode's own turns."""
        return cls.of_episode(episode, tuple(episode.turns), extras)

    @classmethod
    def of_episode(cls, episode: Episode, turns: Sequence[Turn], extras: Mapping[str, Any] | None = None) -> Rollout:
        """The environment's own path, at every terminal step: ``turns`` are the episode's, ending with the
        step being taken (the environment scores a step before it appends it)."""
        example, protocol = episode.example, episode.protocol
        record = episode.facts_of(turns)
        return cls(
            example.question,
            example.golden_answers,
            protocol,
            record,
            record.turns,
            dict(extras or {}),
            example.metadata,
        )

    @classmethod
    def from_segments(
        cls,
        segments: Iterable[tuple[str, str]],
        golden_answers: str | Iterable[str],
        protocol: str | Protocol = "search-r1",
        question: str = "",
        extras: Mapping[str, Any] | None = None,
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> Rollout:
        """The text path with authorship known: ``(author, text)`` pieces, ``author`` ``"model"`` or ``"env"``.

        Pieces come from ``episode.segments``, or from a token loss mask decoded run by run (mask 1 = model).
        Searches and retrieved text are credited exactly as the environment credited them. ``metadata`` is the
        question's (``QAExample.metadata``), for specs that read it.
        """
        proto = get_protocol(protocol)
        turns = turns_from_segments(segments, proto)
        return cls.from_turns(turns, golden_answers, proto, question, extras, metadata=metadata)

    @classmethod
    def from_text(
        cls,
        response: str,
        golden_answers: str | Iterable[str],
        protocol: str | Protocol = "search-r1",
        question: str = "",
        extras: Mapping[str, Any] | None = None,
        *,
        env_spans: Sequence[tuple[int, int]] | None = None,
        trust_transcript: bool = False,
        metadata: Mapping[str, Any] | None = None,
    ) -> Rollout:
        """The text path: a response string as veRL's ``compute_score`` and TRL's reward functions receive it.

        Args:
            response: everything after the prompt (model turns and inserted blocks, in order).
            golden_answers: one string or any iterable of them (a list, a numpy array from a parquet file).
            env_spans: ``(start, end)`` character spans of the text the environment inserted. With them the
                transcript is read exactly as the environment read it (:meth:`from_segments`).
            trust_transcript: without spans, text cannot say who wrote an ``<information>`` block — a model can
                write ``<search>q</search><information>…gold…</information>`` itself. By default such a
                transcript earns no search and no retrieval hit (the prediction is still the accepted answer,
                found by the environment's rule); pass ``True`` only for transcripts you know the environment
                produced.
            metadata: the question's metadata (``QAExample.metadata``), for specs that read it (``hop-credit``
                reads its intermediate answers).
        """
        if not isinstance(response, str):
            raise TypeError(f"response must be a str, got {type(response).__name__}; decode token ids first")
        proto = get_protocol(protocol)
        if env_spans is not None:
            pieces = _split_at_spans(response, env_spans)
            return cls.from_segments(pieces, golden_answers, proto, question, extras, metadata=metadata)
        return cls.from_turns(
            turns_from_text(response, proto),
            golden_answers,
            proto,
            question,
            extras,
            credit_searches=trust_transcript,
            metadata=metadata,
        )


def _split_at_spans(response: str, env_spans: Sequence[tuple[int, int]]) -> list[tuple[str, str]]:
    """``(author, text)`` pieces of ``response`` given the environment's character spans.

    Every span is one observation and follows one model action, possibly empty (an empty action is invalid and
    is answered by the hint), so two adjacent spans mean an empty action between them. An empty *final* action
    leaves no trace in spans; it changes no reward, only the action count (:meth:`Rollout.from_segments` keeps it).
    """
    pieces: list[tuple[str, str]] = []
    pos = 0
    for start, end in env_spans:
        if not 0 <= pos <= start <= end <= len(response):
            raise ValueError(
                f"env_spans must be sorted, non-overlapping (start, end) offsets in the response; got {(start, end)}"
            )
        pieces.append(("model", response[pos:start]))
        pieces.append(("env", response[start:end]))
        pos = end
    if pos < len(response) or not pieces:
        pieces.append(("model", response[pos:]))
    return pieces


class _NoNotes(Mapping[str, str]):
    """The empty, read-only notes of a result without any (one shared instance; picklable)."""

    def __getitem__(self, key: str) -> str:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "{}"

    def __reduce__(self) -> str:
        return "NO_NOTES"


NO_NOTES: Mapping[str, str] = _NoNotes()


class RewardResult(NamedTuple):
    """A scalar reward, the named parts it was made of (logged by adapters for dashboards), and notes: words on
    how it was decided that a number cannot carry (the judge's fallback reason), shown in
    ``info["reward_notes"]``."""

    reward: float
    parts: Mapping[str, float]
    notes: Mapping[str, str] = NO_NOTES


@runtime_checkable
class RewardSpec(TypingProtocol):
    """A reward: a name and a call from :class:`Rollout` to :class:`RewardResult`.

    A spec may also have ``score_batch(rollouts) -> list[RewardResult]`` (one result per rollout, in order, each
    equal to what the call gives alone): the environment then scores the episodes that end in the same batch step
    in one call (:func:`searchenv.env.step_rules.score_outcomes`), as the LLM judge needs to ask concurrently.
    A spec that waits on a service may also have the coroutine ``ascore_batch(rollouts)`` (the same results):
    ``step_async`` and ``step_batch_async`` await it, the episodes that end at nearly the same moment merged into
    one call (:mod:`searchenv.env.merged_scoring`), so the event loop keeps running while they are scored.
    A spec that reads more of a question than its golds (``hop-credit`` reads its hop answers) may have
    ``check_example(example)``, raising ``ValueError`` for a question it cannot score: the environment calls it on
    its dataset when built and on a row given to ``reset``, so a wrong dataset fails before any episode is played.
    """

    name: str

    def __call__(self, rollout: Rollout) -> RewardResult: ...
