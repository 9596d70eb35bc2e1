"""A Gymnasium space for free text.

``gymnasium.spaces.Text`` only admits a finite character set (alphanumerics by default), which rejects the
punctuation, tags and unicode that prompts, passages and model actions are made of.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.spaces import Space

__all__ = ["UnicodeText"]

_SAMPLE_ALPHABET = list("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,?<>/")


class UnicodeText(Space[str]):
    """Any Python string of at most ``max_length`` characters."""

    def __init__(self, max_length: int = 1 << 20, seed: int | np.random.Generator | None = None):
        if max_length < 1:
            raise ValueError(f"max_length must be positive, got {max_length}")
        self.max_length = int(max_length)
        super().__init__(dtype=object, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        length = int(self.np_random.integers(0, min(self.max_length, 64) + 1))
        return "".join(self.np_random.choice(_SAMPLE_ALPHABET, size=length))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"UnicodeText(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnicodeText) and other.max_length == self.max_length
