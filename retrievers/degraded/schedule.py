"""A probability that may change over training: a constant, or ``(step, p)`` points linearly interpolated.

ZeroSearch-style curricula raise the noise as training goes on; a list of points says that in a config file
(``p: [[0, 0.0], [200, 0.5]]``) without code. Before the first point the first ``p`` holds, after the last the
last one. Steps are the trainer's: the wrappers are told the step with ``set_step`` (see
:class:`~searchenv.retrievers.degraded.wrappers.DegradedRetriever`).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from searchenv.checks import non_negative_int, probability

__all__ = ["FollowsTrainingStep", "Schedule", "parse_schedule", "query_rng"]


@dataclass(frozen=True)
class Schedule:
    """Points ``(step, p)`` with strictly increasing steps; one point is a constant."""

    steps: tuple[int, ...]
    values: tuple[float, ...]

    def at(self, step: int) -> float:
        """``p`` at ``step``: linear between the surrounding points, flat outside them."""
        i = bisect.bisect_right(self.steps, step)
        if i == 0:
            return self.values[0]
        if i == len(self.steps):
            return self.values[-1]
        s0, s1 = self.steps[i - 1], self.steps[i]
        v0, v1 = self.values[i - 1], self.values[i]
        return v0 + (v1 - v0) * (step - s0) / (s1 - s0)


def parse_schedule(value: Any, name: str = "p") -> Schedule:
    """A :class:`Schedule` from a number in [0, 1] or a list of ``(step, p)`` pairs; ``ValueError`` names the fix."""
    if isinstance(value, Schedule):
        return value
    if not isinstance(value, Sequence) or isinstance(value, str):
        return Schedule((0,), (probability(value, name),))
    usage = f"{name} must be a number in [0, 1] or a list of (step, p) pairs such as [[0, 0.0], [100, 0.5]]"
    if not value:
        raise ValueError(f"{usage}; got an empty list")
    steps: list[int] = []
    values: list[float] = []
    for point in value:
        if isinstance(point, str) or not isinstance(point, Sequence) or len(point) != 2:
            raise ValueError(f"{usage}; got the point {point!r}")
        step, p = point
        non_negative_int(step, "a step", fix=usage)
        if steps and step <= steps[-1]:
            raise ValueError(f"{usage}; steps must increase strictly, got {step} after {steps[-1]}")
        steps.append(step)
        values.append(probability(p, f"{name} at step {step}"))
    return Schedule(tuple(steps), tuple(values))


def query_rng(name: str, seed: int, query: str) -> np.random.Generator:
    """The random numbers of one query, a pure function of ``(name, seed, query)``: the same query draws the same
    numbers in any batch and any order, so a degradation (or a simulated engine's choice of noisy documents)
    reproduces under a seed and a repeated search cannot re-roll it. A query is degraded when its draw
    ``u < p``, so raising ``p`` along a schedule degrades a superset of what came before."""
    digest = hashlib.blake2b(f"{name}\x00{seed}\x00{query}".encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little"))


class FollowsTrainingStep:
    """What every engine with a schedule shares: the trainer's step it is read at, told with :meth:`set_step`
    (``SearchQAEnv.set_training_step`` calls it before each rollout); searches never advance it, so a curriculum
    does not depend on the batch size. Subclasses name themselves in ``name``."""

    name: str
    _step: int = 0

    @property
    def step(self) -> int:
        """The training step the schedule is read at (0 until :meth:`set_step` is called)."""
        return self._step

    def set_step(self, step: int) -> None:
        """Move the schedule to training step ``step``; a non-negative integer, else ``ValueError``."""
        self._step = non_negative_int(step, f"{self.name}.set_step's step")
