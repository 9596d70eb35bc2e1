"""Which questions a training step plays, and which of its groups carry a learning signal.

A group of episodes of one question teaches something only when its rewards differ: all right or all wrong, every
group-relative advantage is 0 (GRPO), and there is no success to imitate that the policy does not already produce
(expert iteration). A warm-started policy gets most one-hop questions right every time and most four-hop ones wrong
every time, so a uniform draw spends most of its rollouts on groups that teach nothing (issue 39: 43% of episodes
were informative). Two levers, both from the literature (peers.md §11):

- :class:`QuestionPool` draws questions in proportion to the variance of their success under the current policy,
  ``p (1 - p)``, estimated from every group played so far (a question's own record, shrunk toward the mean of its
  hop count while it has few): learning is bounded by that variance and largest near ``p = 0.5`` (arXiv
  2504.03380), so questions the policy always or never solves are drawn rarely, not never (estimates move as it
  learns).
- :func:`informative_groups` keeps the groups whose rewards differ; a trainer plays further rounds until it has a
  fixed number of them (DAPO's dynamic sampling refills the batch the same way).

:func:`shuffle_within_groups` is the placebo: the same groups and the same number of updates, with each group's
rewards permuted among its episodes, so an update happens but says nothing about which episode earned the reward.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

__all__ = ["QuestionPool", "informative_groups", "shuffle_within_groups"]


class QuestionPool:
    """Training questions drawn by their estimated success variance under the current policy.

    Args:
        size: questions ``0 .. size - 1`` may be drawn (the validation questions after them never are).
        hops: each question's hop count (or ``None`` for every question: one prior for all).
        filtered: ``False`` draws uniformly (the records are still kept, for the logs).
        prior_weight: how many episodes' worth of evidence the hop count's mean pass rate counts for in a
            question's estimate (a question never played is estimated by its hop count's mean alone).
        floor: every question keeps at least this weight, so a question estimated solved or hopeless is still
            drawn now and then and its estimate can move.
    """

    def __init__(
        self,
        size: int,
        hops: Sequence[int] | None = None,
        *,
        filtered: bool = True,
        prior_weight: float = 2.0,
        floor: float = 0.02,
    ):
        if size < 1:
            raise ValueError("the question pool is empty: leave at least one training question out of validation")
        self.size, self.filtered, self.prior_weight, self.floor = size, filtered, prior_weight, floor
        self.hops = [int(h) for h in hops[:size]] if hops is not None else [0] * size
        self.played = np.zeros(size)
        self.solved = np.zeros(size)

    def hop_pass_rates(self) -> dict[int, float]:
        """Mean reward of every episode played so far, per hop count (0.5 for a hop count not played yet)."""
        played: dict[int, float] = defaultdict(float)
        solved: dict[int, float] = defaultdict(float)
        for i, h in enumerate(self.hops):
            played[h] += self.played[i]
            solved[h] += self.solved[i]
        return {h: (solved[h] / played[h] if played[h] else 0.5) for h in sorted(set(self.hops))}

    def pass_rates(self) -> np.ndarray:
        """Each question's estimated pass rate: its own record shrunk toward its hop count's mean."""
        prior = self.hop_pass_rates()
        means = np.array([prior[h] for h in self.hops])
        return (self.solved + self.prior_weight * means) / (self.played + self.prior_weight)

    def weights(self) -> np.ndarray:
        """Drawing weights, ``max(p (1 - p), floor)`` (uniform when the pool is not filtered)."""
        if not self.filtered:
            return np.ones(self.size)
        p = self.pass_rates()
        return np.maximum(p * (1.0 - p), self.floor)

    def sample(self, count: int, rng: np.random.Generator, allowed: Sequence[int] | None = None) -> list[int]:
        """``count`` distinct questions of ``allowed`` (default: all), drawn by :meth:`weights`; with replacement
        only when fewer than ``count`` are allowed. Unfiltered, the draw is uniform."""
        choices = np.arange(self.size) if allowed is None else np.asarray(allowed, dtype=int)
        if len(choices) == 0:
            raise ValueError("no training question is allowed at this step (check min_hops and curriculum_steps)")
        replace = len(choices) < count
        if not self.filtered:
            return [int(i) for i in rng.choice(choices, count, replace=replace)]
        weights = self.weights()[choices]
        return [int(i) for i in rng.choice(choices, count, replace=replace, p=weights / weights.sum())]

    def record(self, index: int, rewards: Sequence[float]) -> None:
        """Add one group's rewards (each clipped to [0, 1] as a success measure) to question ``index``'s record."""
        if 0 <= index < self.size:
            self.played[index] += len(rewards)
            self.solved[index] += float(np.clip(np.asarray(rewards, dtype=float), 0.0, 1.0).sum())


def informative_groups(rewards: Sequence[float], group_size: int) -> list[int]:
    """Indices of the groups (consecutive runs of ``group_size``) whose rewards are not all equal."""
    groups = [rewards[i : i + group_size] for i in range(0, len(rewards), group_size)]
    return [g for g, values in enumerate(groups) if len(set(values)) > 1]


def shuffle_within_groups(rewards: Sequence[float], group_size: int, rng: np.random.Generator) -> list[float]:
    """The placebo: each group's rewards permuted among its own episodes (the multiset of a group is unchanged, so
    which groups are informative and how many episodes an update keeps are unchanged too)."""
    out: list[float] = []
    for start in range(0, len(rewards), group_size):
        group = list(rewards[start : start + group_size])
        out += [group[i] for i in rng.permutation(len(group))]
    return out
