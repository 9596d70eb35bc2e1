"""One episode: the question, the prompt, and the turns — the single record every reward, metric and log reads.

The environment appends one :class:`~searchenv.episode.turns.Turn` per action: what the parser accepted, what the
environment inserted after it, and how its search ended. Everything else — the transcript as
:class:`Segment` values authored by the ``model`` or the ``env``, the counters, the prediction, the metrics —
is derived from those turns, so no two parts of the code can disagree about what happened. Keeping
authorship explicit is also what makes retrieved-token masking exact (:mod:`searchenv.tokenization`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from searchenv.episode.turns import Facts, Turn, facts, segments_of
from searchenv.lazy import LazyDict, LazyKeys
from searchenv.protocol import Protocol
from searchenv.types import Passage, QAExample

__all__ = ["END_REASONS", "EndReason", "Episode", "Segment"]

_METRIC_NAMES = (
    "reward",
    "num_actions",
    "num_searches",
    "num_failed_searches",
    "num_invalid",
    "response_words",
    "answered",
)

Author = Literal["model", "env"]
#: Why an episode ended, as verifiers names its stop conditions: an accepted ``answer``; the ``action_budget`` ran
#: out; the trainer cut it (``trainer_cut``: its own turn or time limit, through ``env.truncate()``); or the
#: context was full (``context_limit``: ``env.truncate("context_limit")``).
EndReason = Literal["answer", "action_budget", "trainer_cut", "context_limit"]
END_REASONS: tuple[EndReason, ...] = ("answer", "action_budget", "trainer_cut", "context_limit")


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
    """

    example: QAExample
    prompt: str
    protocol: Protocol
    turns: list[Turn] = field(default_factory=list)
    truncated: bool = False
    end_reason: EndReason | None = None
    reward: float = 0.0
    reward_parts: Mapping[str, float] = field(default_factory=dict)

    @property
    def facts(self) -> Facts:
        """Prediction, counts and shown text, derived from the turns (see :func:`searchenv.episode.turns.facts`)."""
        return facts(self.turns, self.protocol)

    @property
    def terminated(self) -> bool:
        """An answer was accepted: the final action was a complete answer tag."""
        return bool(self.turns) and self.turns[-1].action.kind == "answer"

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def prediction(self) -> str | None:
        """The accepted answer, or ``None`` when the episode ended (or runs) without one."""
        return self.turns[-1].action.content if self.terminated else None

    @property
    def num_actions(self) -> int:
        return len(self.turns)

    @property
    def num_searches(self) -> int:
        """Searches that ran and whose results were shown (failed and skipped searches do not count)."""
        return sum(t.searched for t in self.turns)

    @property
    def num_invalid(self) -> int:
        """Actions with neither a complete search nor a complete answer."""
        return sum(t.action.kind == "invalid" for t in self.turns)

    @property
    def retrieved(self) -> list[list[Passage]]:
        """The passages each executed search returned, in order (before clipping)."""
        return [list(t.passages) for t in self.turns if t.searched]

    @property
    def segments(self) -> list[Segment]:
        """The response as authored pieces: each accepted action, then what the environment inserted."""
        return [Segment(author, text) for author, text in segments_of(self.turns)]

    @property
    def response_text(self) -> str:
        """Everything after the prompt: model turns and inserted blocks, in order."""
        return "".join(t.action.kept + t.observation for t in self.turns)

    @property
    def model_text(self) -> str:
        """Only what the model wrote and the environment accepted (text after a closing tag is dropped)."""
        return "".join(t.action.kept for t in self.turns)

    @property
    def response_words(self) -> int:
        """Length of the model's own text in whitespace-separated words (a tokenizer-free length metric)."""
        return len(self.model_text.split())

    def metrics(self, record: Facts | None = None) -> dict[str, float]:
        """Per-episode numbers the papers plot: reward, searches, invalid actions, response length, reward parts.

        ``record`` is the episode's facts when the caller has them already (the environment's terminal step).
        The values are computed when first read (a :class:`~searchenv.lazy.LazyDict`), so a step whose
        caller never looks at them does not pay for the reward parts behind them.
        """
        record = record if record is not None else self.facts
        reward, parts = float(self.reward), self.reward_parts

        def compute() -> dict[str, float]:
            return {
                "reward": reward,
                "num_actions": float(record.num_actions),
                "num_searches": float(record.num_searches),
                "num_failed_searches": float(record.num_failed_searches),
                "num_invalid": float(record.num_invalid),
                "response_words": float(len(record.model_text.split())),
                "answered": float(record.prediction is not None),
                **{f"reward/{k}": float(v) for k, v in parts.items()},
            }

        part_keys = getattr(parts, "key_set", None) or LazyKeys.of(tuple(parts))  # a LazyDict announces its keys
        return LazyDict.of(_metric_keys(part_keys), compute)


@lru_cache(maxsize=64)
def _metric_keys(part_keys: LazyKeys) -> LazyKeys:
    # One key set per reward spec's parts, built once and found by identity: every terminal step needs it.
    return LazyKeys.of((*_METRIC_NAMES, *(f"reward/{k}" for k in part_keys.names)))
