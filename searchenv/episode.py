"""One episode's transcript: who wrote which text, what was retrieved, how it ended.

The transcript is a list of :class:`Segment` values authored by the ``model`` or the ``env``. Adapters turn
it into token ids and a loss mask (:mod:`searchenv.tokenization`); reward specs read it as a
:class:`~searchenv.reward_specs.base.Rollout`. Keeping authorship explicit is what makes retrieved-token
masking exact instead of inferred from tags or pad ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from searchenv.protocol import Protocol
from searchenv.types import Passage, QAExample

__all__ = ["Episode", "Segment"]

Author = Literal["model", "env"]


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
        segments: the response so far, model and environment text interleaved.
        retrieved: passages of each executed search, in order.
        num_actions: actions taken (every step counts, whatever it was).
        num_searches: searches executed.
        num_invalid: actions with neither a complete search nor a complete answer.
        prediction: the answer, once given.
        terminated / truncated: the Gymnasium end flags.
        reward / reward_parts: set on the terminal step.
    """

    example: QAExample
    prompt: str
    protocol: Protocol
    segments: list[Segment] = field(default_factory=list)
    retrieved: list[list[Passage]] = field(default_factory=list)
    num_actions: int = 0
    num_searches: int = 0
    num_invalid: int = 0
    prediction: str | None = None
    terminated: bool = False
    truncated: bool = False
    reward: float = 0.0
    reward_parts: Mapping[str, float] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def response_text(self) -> str:
        """Everything after the prompt: model turns and inserted blocks, in order."""
        return "".join(s.text for s in self.segments)

    @property
    def model_text(self) -> str:
        """Only what the model wrote."""
        return "".join(s.text for s in self.segments if s.author == "model")

    @property
    def response_words(self) -> int:
        """Length of the model's own text in whitespace-separated words (a tokenizer-free length metric)."""
        return len(self.model_text.split())

    def metrics(self) -> dict[str, float]:
        """Per-episode numbers the papers plot: reward, searches, invalid actions, response length."""
        return {
            "reward": float(self.reward),
            "num_actions": float(self.num_actions),
            "num_searches": float(self.num_searches),
            "num_invalid": float(self.num_invalid),
            "response_words": float(self.response_words),
            "answered": float(self.terminated),
            **{f"reward/{k}": float(v) for k, v in self.reward_parts.items()},
        }
