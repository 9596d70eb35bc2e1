"""One episode: the question, the prompt, and the turns — the single record every reward, metric and log reads.

The environment appends one :class:`~searchenv.episode.turns.Turn` per action: what the parser accepted, what the
environment inserted after it, and how its search ended. Everything else — the transcript as
:class:`Segment` values authored by the ``model`` or the ``env``, the counters, the prediction, the metrics —
is derived from those turns, so no two parts of the code can disagree about what happened. Keeping
authorship explicit is also what makes retrieved-token masking exact (:mod:`searchenv.tokenization`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from searchenv.episode.generation import Generation
from searchenv.episode.health import HEALTH_METRICS
from searchenv.episode.turns import Facts, FactsTally, Turn, facts, segments_of
from searchenv.protocol import Protocol
from searchenv.types import Passage, QAExample

__all__ = ["END_REASONS", "METRIC_NAMES", "EndReason", "Episode", "Segment", "aggregate_metrics", "metrics_of"]

Author = Literal["model", "env"]
#: Why an episode ended, as verifiers names its stop conditions: an accepted ``answer``; the ``action_budget`` ran
#: out; the trainer cut it (``trainer_cut``: its own turn or time limit, through ``env.truncate()``); or the
#: context was full (``context_limit``: ``env.truncate("context_limit")``).
EndReason = Literal["answer", "action_budget", "trainer_cut", "context_limit"]
END_REASONS: tuple[EndReason, ...] = ("answer", "action_budget", "trainer_cut", "context_limit")
_END_REASON_KEYS = tuple((f"end_reason/{reason}", reason) for reason in END_REASONS)  # the metric keys, made once


@dataclass(frozen=True, slots=True)
class Segment:
    """A contiguous piece of the response written by one author."""

    author: Author
    text: str


@dataclass
class Episode:
    """The state of one question being answered.

    Attributes:
        example: the question and its gold answers.
        prompt: the instruction plus question shown to the model (not part of the response).
        protocol: the tag set in force.
        turns: one entry per action, in order (see :class:`~searchenv.episode.turns.Turn`).
        truncated: the episode was cut (action budget, or a trainer's own limit via ``env.truncate()``).
        end_reason: why it ended (see :data:`EndReason`); ``None`` while it runs.
        reward / reward_parts: set on the terminal step.
        generations: what the policy sampled for each model turn (ids, log-probs, policy versions), aligned with
            ``turns``; filled by the token loops (:class:`~searchenv.tokenization.EpisodeTokens` given the episode),
            empty when only text reached the environment. See :mod:`searchenv.episode.generation`.
    """

    example: QAExample
    prompt: str
    protocol: Protocol
    turns: list[Turn] = field(default_factory=list)
    truncated: bool = False
    end_reason: EndReason | None = None
    reward: float = 0.0
    reward_parts: Mapping[str, float] = field(default_factory=dict)
    generations: list[Generation] = field(default_factory=list)

    # The facts, kept one turn at a time (what a step reads costs the same late in an episode as early).
    _tally: FactsTally | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def facts(self) -> Facts:
        """Prediction, counts and shown text, derived from the turns (see :class:`searchenv.episode.turns.Facts`)."""
        return self._synced_tally().facts()

    def facts_of(self, turns: Sequence[Turn]) -> Facts:
        """The facts of ``turns``: read from the episode's tally when they are its turns and at most one more (the
        step the environment scores before it applies it), else from the turns alone."""
        tally = self._synced_tally()
        count = len(tally.turns)
        if len(turns) in (count, count + 1) and all(a is b for a, b in zip(turns, tally.turns, strict=False)):
            if len(turns) > count:  # a refused step's turn is undone by the next sync's rebuild
                tally.add(turns[-1])
            return tally.facts()
        return facts(turns, self.protocol)

    def _synced_tally(self) -> FactsTally:
        """The tally with every turn of :attr:`turns` folded in (rebuilt if the list was changed other than by
        appending, or holds a turn a refused step never appended)."""
        tally, turns = self._tally, self.turns
        count = 0 if tally is None else len(tally.turns)
        if (
            tally is None
            or count > len(turns)
            or (count and (tally.turns[0] is not turns[0] or tally.turns[-1] is not turns[count - 1]))
        ):
            tally, count = FactsTally(self.protocol), 0
            self._tally = tally
        for turn in turns[count:]:
            tally.add(turn)
        return tally

    @property
    def terminated(self) -> bool:
        """An answer was accepted: the final action was a complete answer tag (read on every step, so from the
        last turn alone rather than from the whole :attr:`facts`)."""
        return bool(self.turns) and self.turns[-1].action.kind == "answer"

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    # The derived values under the names callers use: each is read from the one :class:`Facts`.
    @property
    def prediction(self) -> str | None:
        """The accepted answer, or ``None`` when the episode ended (or runs) without one."""
        return self._synced_tally().prediction

    @property
    def num_actions(self) -> int:
        return len(self.turns)

    @property
    def num_searches(self) -> int:
        """Searches that ran and whose results were shown (failed and skipped searches do not count)."""
        return self._synced_tally().num_searches

    @property
    def num_opens(self) -> int:
        """Documents opened and shown (failed and skipped opens do not count)."""
        return self._synced_tally().num_opens

    @property
    def num_invalid(self) -> int:
        """Actions with neither a complete search nor a complete answer."""
        return self._synced_tally().num_invalid

    @property
    def retrieved(self) -> list[list[Passage]]:
        """The passages each executed search returned, in order (before clipping)."""
        return [list(t.passages) for t in self._synced_tally().searches]

    @property
    def segments(self) -> list[Segment]:
        """The response as authored pieces: each accepted action, then what the environment inserted."""
        return [Segment(author, text) for author, text in segments_of(self.turns)]

    @property
    def response_text(self) -> str:
        """Everything after the prompt: model turns and inserted blocks, in order."""
        return self.facts.response

    @property
    def model_text(self) -> str:
        """Only what the model wrote and the environment accepted (text after a closing tag is dropped)."""
        return self.facts.model_text

    @property
    def response_words(self) -> int:
        """Length of the model's own text in whitespace-separated words (a tokenizer-free length metric)."""
        return self.facts.response_words

    def metrics(self, record: Facts | None = None) -> dict[str, float]:
        """The episode's numbers under THE metric names every adapter and report logs (see :func:`metrics_of`).

        ``record`` is the episode's facts when the caller has them already (the environment's terminal step).
        """
        record = record if record is not None else self.facts
        return metrics_of(record, self.reward, self.reward_parts, self.end_reason)


def metrics_of(
    record: Facts, reward: float, reward_parts: Mapping[str, float], end_reason: EndReason | None
) -> dict[str, float]:
    """One episode's metrics: the vocabulary every adapter, trainer log and report uses (:data:`METRIC_NAMES`).

    ``reward``, the counts (``num_actions``, ``num_searches``, ``num_failed_searches``, ``num_invalid``,
    ``num_opens``, ``num_failed_opens``), ``response_words``, the reasoning-health numbers (``think_words``,
    ``think_repetition``: the share of repeated word 4-grams in the think text, ``answer_words``,
    ``duplicate_search_rate``: the share of searches that repeat an earlier query, ``passages_read``: NaN when
    the protocol's passage template cannot be counted), then
    ``end_reason/<reason>`` for every :data:`EndReason` — 1.0 for the reason the episode ended, 0.0 for the others
    (all 0.0 while it runs), so that a batch mean (:func:`aggregate_metrics`) is the share of episodes that ended
    that way — then one ``reward/<part>`` per reward part. Every value is a float, so the dict goes as it is into a
    logger, JSON or a table. :meth:`Episode.metrics` is the usual caller; a text-only scorer that has a
    :class:`~searchenv.episode.reward_contract.Rollout` and no episode calls it with the rollout's facts.
    """
    return {
        "reward": float(reward),
        "num_actions": float(record.num_actions),
        "num_searches": float(record.num_searches),
        "num_failed_searches": float(record.num_failed_searches),
        "num_invalid": float(record.num_invalid),
        "num_opens": float(record.num_opens),
        "num_failed_opens": float(record.num_failed_opens),
        "response_words": float(record.response_words),
        "think_words": float(record.think_words),
        "think_repetition": float(record.think_repetition),
        "answer_words": float(record.answer_words),
        "duplicate_search_rate": record.num_repeated_searches / record.num_searches if record.num_searches else 0.0,
        "passages_read": float("nan") if record.passages_read is None else float(record.passages_read),
        **{key: float(reason == end_reason) for key, reason in _END_REASON_KEYS},
        **{f"reward/{k}": float(v) for k, v in reward_parts.items()},
    }


#: The metric names every episode reports, whatever its reward spec (``reward/<part>`` keys come on top).
METRIC_NAMES: tuple[str, ...] = (
    "reward",
    "num_actions",
    "num_searches",
    "num_failed_searches",
    "num_invalid",
    "num_opens",
    "num_failed_opens",
    "response_words",
    *HEALTH_METRICS,
    *(f"end_reason/{reason}" for reason in END_REASONS),
)


def aggregate_metrics(rows: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """The mean of every key over a batch of :meth:`Episode.metrics` rows: what adapters that log a batch log.

    A key is averaged over the rows that have it (episodes scored by different specs carry different
    ``reward/<part>`` keys); keys come out sorted. An empty batch gives ``{}``.
    """
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for row in rows:
        for key, value in row.items():
            sums[key] = sums.get(key, 0.0) + float(value)
            counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sorted(sums)}
