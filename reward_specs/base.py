"""The reward contract: what a reward spec reads (:class:`Rollout`) and what it returns (:class:`RewardResult`).

A rollout is built either from a live episode (the environment knows exactly which passages it
retrieved) or from a finished response text (veRL's ``compute_score`` and TRL's reward functions only see
text). Both paths give the same fields, so one spec serves every trainer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol as TypingProtocol, runtime_checkable

from searchenv.protocol import Protocol

__all__ = ["RewardResult", "RewardSpec", "Rollout"]


@dataclass(frozen=True)
class Rollout:
    """Everything a reward needs about one finished episode.

    Attributes:
        question: the question (without the instruction template).
        golden_answers: accepted answers.
        response: the full response after the prompt: model turns and inserted environment blocks, in order.
        model_text: only the model-authored turns, concatenated. Answers are read from here, never from
            retrieved text or the prompt.
        retrieved_texts: the text of every passage inserted during the episode.
        num_searches: searches actually executed.
        protocol: tag set in force.
        extras: anything else a spec may use (e.g. an evidence answerer's output cache).
    """

    question: str
    golden_answers: tuple[str, ...]
    response: str
    model_text: str
    retrieved_texts: tuple[str, ...]
    num_searches: int
    protocol: Protocol
    extras: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RewardResult:
    """A scalar reward and the named parts it was made of (logged by adapters for dashboards)."""

    reward: float
    parts: Mapping[str, float]


@runtime_checkable
class RewardSpec(TypingProtocol):
    """A reward: a name and a call from :class:`Rollout` to :class:`RewardResult`."""

    name: str

    def __call__(self, rollout: Rollout) -> RewardResult: ...
