"""The reward contract: what a reward spec reads (:class:`Rollout`) and what it returns (:class:`RewardResult`).

A rollout is built either from a live episode (the environment knows exactly which passages it
retrieved) or from a finished response text (veRL's ``compute_score`` and TRL's reward functions only see
text). Both paths give the same fields, so one spec serves every trainer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, runtime_checkable
from typing import Protocol as TypingProtocol

from searchenv.protocol import Protocol, get_protocol
from searchenv.reward_specs.text import split_response

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

    @classmethod
    def from_text(
        cls,
        response: str,
        golden_answers: str | Iterable[str],
        protocol: str | Protocol = "search-r1",
        question: str = "",
        extras: Mapping[str, Any] | None = None,
    ) -> Rollout:
        """Build a rollout from a response string, for trainers that only hand the reward text.

        ``response`` is everything after the prompt (model turns and inserted information blocks, in order),
        as veRL's ``compute_score`` and TRL's reward functions receive it. Information blocks that directly
        follow a search are taken as inserted and counted as executed searches; any other information block
        was written by the model and stays model text (see
        :func:`searchenv.reward_specs.text.split_response`). ``golden_answers`` may be one string or any
        iterable of them (a list, a tuple, a numpy array from a parquet file).
        """
        proto = get_protocol(protocol)
        if not isinstance(response, str):
            raise TypeError(f"response must be a str, got {type(response).__name__}; decode token ids first")
        golds = (golden_answers,) if isinstance(golden_answers, str) else tuple(str(g) for g in golden_answers)
        split = split_response(response, proto)
        return cls(
            question=question,
            golden_answers=golds,
            response=response,
            model_text=split.model_text,
            retrieved_texts=split.retrieved_texts,
            num_searches=split.num_searches,
            protocol=proto,
            extras=dict(extras or {}),
        )


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
