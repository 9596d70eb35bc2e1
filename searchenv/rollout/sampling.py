"""What an inference engine is asked for and what it gives back, for one turn of a batch of episodes.

:class:`SamplingConfig` holds the sampling settings and token caps of a rollout, :class:`TurnGenerator` is the
one interface an inference engine implements (continue a batch of token contexts until a stop string, EOS or a
cap), and :class:`GeneratedTurn` is its answer for one context: the sampled ids and their log-probabilities.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Protocol as TypingProtocol

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["GeneratedTurn", "SamplingConfig", "TurnGenerator"]


@dataclass(frozen=True)
class SamplingConfig:
    """How actions are sampled.

    Attributes:
        temperature: sampling temperature; ``0`` means greedy decoding.
        top_p: nucleus sampling mass.
        max_new_tokens: cap on tokens generated per turn (Search-R1: 500).
        max_total_tokens: cap on prompt + response tokens of one episode (Search-R1: 4096).
        max_response_tokens: optional cap on response tokens (model + environment) of one episode, e.g. TRL's
            ``max_completion_length``. When an episode reaches a cap, no further action is sampled: the
            environment scores it as truncated (``env.truncate()``) and it is reported with ``truncated = 1``.
            The environment block that followed its last action is kept, so a response may exceed the cap by
            that block.
        chat_template: passed to :func:`searchenv.tokenization.encode_prompt` (``None``: use the tokenizer's
            chat template when it has one).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 500
    max_total_tokens: int = 4096
    max_response_tokens: int | None = None
    chat_template: bool | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1 or self.max_total_tokens < 2:
            raise ValueError("max_new_tokens must be >= 1 and max_total_tokens >= 2")
        if self.max_response_tokens is not None and self.max_response_tokens < 1:
            raise ValueError(f"max_response_tokens must be >= 1 or None, got {self.max_response_tokens}")

    def budget(self, prompt_tokens: int, response_tokens: int) -> int:
        """How many more tokens an episode may generate."""
        left = self.max_total_tokens - prompt_tokens - response_tokens
        if self.max_response_tokens is not None:
            left = min(left, self.max_response_tokens - response_tokens)
        return left


@dataclass
class GeneratedTurn:
    """What an engine produced for one context: the sampled ids and their logprobs under the sampler."""

    token_ids: list[int]
    logprobs: list[float]


class TurnGenerator(TypingProtocol):
    """An inference engine that continues a batch of token contexts until a stop string, EOS or the cap."""

    tokenizer: PreTrainedTokenizerBase

    def generate(
        self, contexts: Sequence[Sequence[int]], stop_strings: Sequence[str], max_new_tokens: Sequence[int]
    ) -> list[GeneratedTurn]:
        """Continue each context; ``max_new_tokens[i]`` caps row ``i``. Tokens past a stop string may be returned
        (the rollout cuts them); tokens after EOS must not be."""
        ...
