"""How a model is asked to write: the one type for sampling settings and token caps.

:class:`SamplingConfig` is read by every part of searchenv that makes a model write — the rollout engines
(:mod:`searchenv.rollout`), the trainers, ``searchenv eval``'s policies, and the LLM client below rewards and
retrievers (:mod:`searchenv.llm`: the judge, the simulated engine, the page summariser). Its checks are the only
ones (:mod:`searchenv.checks`' rules: a ``bool`` is no integer); the command line declares the same settings once,
in :func:`searchenv.cli.options.add_sampling_arguments`. Nothing here imports more than the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from searchenv.checks import integer, is_int, is_number, number

__all__ = ["SamplingConfig"]


@dataclass(frozen=True)
class SamplingConfig:
    """How a model samples: temperature, nucleus mass, token caps, prompt format and seed.

    Attributes:
        temperature: sampling temperature; ``0`` means greedy decoding (:meth:`greedy`: the papers evaluate so,
            and a judge's or a simulated engine's answers then repeat, so a record replays them exactly).
        top_p: nucleus sampling mass, in (0, 1] (``1`` = off).
        max_new_tokens: cap on tokens generated per turn or reply (Search-R1: 500).
        max_total_tokens: cap on prompt + response tokens of one episode or request (Search-R1: 4096; a local
            model's window is the other cap).
        max_response_tokens: optional cap on response tokens (model + environment) of one episode, e.g. TRL's
            ``max_completion_length``. When an episode reaches a cap, no further action is sampled: the
            environment scores it as truncated (``env.truncate()``) and it is reported with ``truncated = 1``.
            The environment block that followed its last action is kept, so a response may exceed the cap by
            that block.
        chat_template: passed to :func:`searchenv.tokenization.encode_prompt` (``None``: use the tokenizer's
            chat template when it has one).
        seed: the sampling seed sent to an endpoint (and a local engine's, where the caller seeds it).

    A value of the wrong type (``max_new_tokens=True``, ``top_p="0.9"``) or out of range (a cap of 0) raises
    ``ValueError`` naming the setting and its range.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 500
    max_total_tokens: int = 4096
    max_response_tokens: int | None = None
    chat_template: bool | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        number(self.temperature, "temperature", 0, fix="0 is greedy")
        if not is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {self.top_p!r}")
        integer(self.max_new_tokens, "max_new_tokens", 1)
        integer(self.max_total_tokens, "max_total_tokens", 2)
        if self.max_response_tokens is not None:
            integer(self.max_response_tokens, "max_response_tokens", 1, fix="or None for no cap")
        if self.chat_template is not None and not isinstance(self.chat_template, bool):
            given = self.chat_template
            raise ValueError(
                f"chat_template must be True, False or None (the tokenizer's when it has one), got {given!r}"
            )
        if not is_int(self.seed):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    @classmethod
    def greedy(cls, **settings: Any) -> SamplingConfig:
        """Greedy decoding (temperature 0) with ``settings``: what evaluation and a request to a judge use."""
        return cls(**{"temperature": 0.0, **settings})

    def budget(self, prompt_tokens: int, response_tokens: int) -> int:
        """How many more tokens an episode may generate."""
        left = self.max_total_tokens - prompt_tokens - response_tokens
        if self.max_response_tokens is not None:
            left = min(left, self.max_response_tokens - response_tokens)
        return left
