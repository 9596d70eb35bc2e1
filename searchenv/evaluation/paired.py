"""Paired comparisons of two policies on the same questions: the mean difference and its bootstrap interval.

Two policies evaluated on the same held-out questions are compared question by question: the difference of their
per-question scores (EM 1 or 0) is resampled with the questions, so the interval reflects which questions each got
right, not two independent samples (a paired test is far tighter when both policies find the same questions easy).
The percentile interval of 10,000 resamples is the usual choice for EM differences in NLP evaluation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["PairedDifference", "paired_bootstrap"]


@dataclass(frozen=True)
class PairedDifference:
    """``mean(a - b)`` over ``n`` shared questions with its 95% bootstrap interval ``[low, high]``."""

    n: int
    a_mean: float
    b_mean: float
    difference: float
    low: float
    high: float

    @property
    def excludes_zero(self) -> bool:
        """Whether the interval lies wholly above or below 0 (the difference is resolved at this sample size)."""
        return self.low > 0 or self.high < 0

    def __str__(self) -> str:
        return f"{self.difference:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"


def paired_bootstrap(
    a: Mapping[str, float],
    b: Mapping[str, float],
    *,
    resamples: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
) -> PairedDifference:
    """Compare per-question scores ``a`` and ``b`` (question id → score) on the ids both have.

    Raises:
        ValueError: when the two share no question (a comparison of nothing), or ``resamples < 1``.
    """
    shared: Sequence[str] = sorted(set(a) & set(b))
    if not shared:
        raise ValueError("the two policies share no evaluated question; evaluate both on the same questions")
    if resamples < 1 or not 0 < confidence < 1:
        raise ValueError(f"resamples must be >= 1 and confidence in (0, 1), got {resamples}, {confidence}")
    left = np.array([float(a[k]) for k in shared])
    right = np.array([float(b[k]) for k in shared])
    differences = left - right
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(shared), size=(resamples, len(shared)))
    means = differences[draws].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return PairedDifference(
        len(shared), float(left.mean()), float(right.mean()), float(differences.mean()), float(low), float(high)
    )
