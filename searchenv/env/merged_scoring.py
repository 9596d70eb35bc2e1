"""Terminal scoring for event loops: a reward that waits on a service (the LLM judge) is awaited, and the episodes
of concurrent ``step_async`` calls that end at nearly the same moment are scored in one call.

:func:`~searchenv.env.step_rules.score_outcomes` calls a spec synchronously; from a coroutine that would hold the
event loop for as long as the judge takes, and concurrent episodes would be judged one after another. A spec with
the coroutine ``ascore_batch(rollouts)`` (:class:`~searchenv.reward_specs.formulas.JudgeReward`) is awaited
instead, by :func:`ascore_outcomes`: ``step_batch_async`` hands it all the episodes its step ends, and
``SearchQAEnv.step_async`` goes through a :class:`ScoreMerger`, which gives the single episodes of an
asynchronous trainer their batch back the way :class:`~searchenv.env.merged_search.SearchMerger` does for
searches: one :class:`~searchenv.retrievers.batching.MicroBatcher` (the one micro-batching policy: one call at a
time, a short wait window once episodes arrive together) per event loop and reward spec. Specs without
``ascore_batch`` are cheap (exact match, F1, the format terms) and are scored as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from searchenv.env.step_rules import StepOutcome, score_outcomes
from searchenv.episode.reward_contract import RewardResult, Rollout
from searchenv.retrievers.batching import BatchersPerLoop, MicroBatcher, check_merge_window

__all__ = ["DEFAULT_SCORE_MERGER", "ScoreMerger", "ascore_outcomes", "scores_async"]


def scores_async(spec: Any) -> bool:
    """Whether ``spec`` has the coroutine ``ascore_batch`` (it waits on a service, so it is awaited)."""
    return callable(getattr(spec, "ascore_batch", None))


async def _ascore(spec: Any, rollouts: Sequence[Rollout]) -> list[RewardResult]:
    results = list(await spec.ascore_batch(list(rollouts)))
    if len(results) != len(rollouts):
        raise TypeError(f"{spec!r}.ascore_batch returned {len(results)} results for {len(rollouts)} rollouts")
    return results


@dataclass(eq=False)  # hashed by identity: two episodes' rollouts are never merged into one item
class _Item:
    rollout: Rollout


class ScoreMerger:
    """Merges the terminal scoring of concurrent episodes that share a reward spec, per event loop.

    Args:
        wait_ms: how long a merged call waits for more episodes once episodes have been seen ending together.
        max_rollouts: most rollouts in one call.
    """

    def __init__(self, wait_ms: float = 2.0, max_rollouts: int = 1024):
        check_merge_window(wait_ms, max_rollouts, "max_rollouts")
        self.wait_ms = float(wait_ms)
        self.max_rollouts = max_rollouts
        self._batchers: BatchersPerLoop[_Item, RewardResult] = BatchersPerLoop(self._new_batcher)

    async def score(self, spec: Any, rollout: Rollout) -> RewardResult:
        """One episode's result, from the next merged ``ascore_batch`` call of ``spec``."""
        (result,) = await self._batchers.get(spec).submit([_Item(rollout)], None)
        return result

    def stats(self) -> dict[str, int]:
        """Totals over the batchers of the event loops alive now: gathered batches, ``ascore_batch`` calls
        (``calls``), episodes scored (``requests``)."""
        return self._batchers.totals(("batches", "calls", "requests"))

    def __reduce__(self) -> tuple[Any, ...]:
        # Batchers belong to this process's event loops; a copy in another process starts with none.
        return (ScoreMerger, (self.wait_ms, self.max_rollouts))

    def _new_batcher(self, spec: Any) -> MicroBatcher[_Item, RewardResult]:
        async def run(key: object, items: list[_Item]) -> list[RewardResult]:
            return await _ascore(spec, [item.rollout for item in items])

        return MicroBatcher(run, max_wait_s=self.wait_ms / 1000, max_items=self.max_rollouts)


async def ascore_outcomes(
    specs: Sequence[Any], outcomes: Sequence[StepOutcome], merger: ScoreMerger | None = None
) -> None:
    """:func:`~searchenv.env.step_rules.score_outcomes` for coroutines: the outcomes whose spec has
    ``ascore_batch`` are awaited (one call per spec, or through ``merger`` so that concurrent callers share
    calls); the others are scored as ``score_outcomes`` does. Nothing is written to an outcome before every
    reward is computed."""
    pending = [i for i, outcome in enumerate(outcomes) if outcome.rollout is not None and outcome.reward is None]
    groups: dict[int, list[int]] = {}
    for i in pending:
        if scores_async(specs[i]):
            groups.setdefault(id(specs[i]), []).append(i)
    waited = {i for group in groups.values() for i in group}

    async def group_results(group: list[int]) -> list[tuple[int, RewardResult]]:
        spec, rollouts = specs[group[0]], [outcomes[i].rollout for i in group]
        if merger is None:
            results = await _ascore(spec, rollouts)  # type: ignore[arg-type]
        else:
            results = list(await asyncio.gather(*(merger.score(spec, r) for r in rollouts)))  # type: ignore[arg-type]
        return list(zip(group, results))

    scored = await asyncio.gather(*(group_results(group) for group in groups.values()))
    rest = [i for i in pending if i not in waited]
    score_outcomes([specs[i] for i in rest], [outcomes[i] for i in rest])
    for i, result in (pair for pairs in scored for pair in pairs):
        outcomes[i].reward = result


#: The merger every environment uses unless its ``score_merger`` attribute is set to another.
DEFAULT_SCORE_MERGER = ScoreMerger()
