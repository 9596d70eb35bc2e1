"""What an inference engine is asked for and what it gives back, for one turn of a batch of episodes.

:class:`TurnGenerator` is the one interface an inference engine implements (continue a batch of token contexts
until a stop string, EOS or a cap), and :class:`GeneratedTurn` is its answer for one context: the sampled ids and
their log-probabilities. How to sample is :class:`searchenv.sampling.SamplingConfig`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Protocol as TypingProtocol

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["GeneratedTurn", "TurnGenerator"]


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
