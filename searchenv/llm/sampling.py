"""The decoding settings of a request to a model: what an endpoint's request body and a local engine both read."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SamplingSettings"]


@dataclass(frozen=True)
class SamplingSettings:
    """Decoding settings (greedy by default: the papers evaluate at temperature 0, and a judge's or a simulated
    engine's answers then repeat, so a record replays them exactly).

    Attributes:
        temperature: 0 = greedy.
        top_p: nucleus mass, in (0, 1].
        max_new_tokens: most tokens one reply may have.
        max_total_tokens: most tokens of prompt and reply together (a local model's window is the other cap).
        seed: the sampling seed sent to the endpoint (and a local engine's).
    """

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 500
    max_total_tokens: int = 4096
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"temperature must be >= 0 and top_p in (0, 1]; got {self.temperature}, {self.top_p}")
        if self.max_new_tokens < 1 or self.max_total_tokens < 2:
            raise ValueError("max_new_tokens must be >= 1 and max_total_tokens >= 2")
