"""Stepping many episodes at once: every action validated first, one search call per engine, then all applied.

A batch step runs in three phases. *Plan*: every action is read and checked; a bad action (wrong type, an
ended episode, the same environment twice) raises before any episode changes. *Search*: the pending queries
are grouped by (retriever, k) and each group is one ``Retriever.search`` call (``asearch`` for the async
variant). *Commit*: each episode's outcome — its new turn, observation and, on the terminal step, its reward —
is computed for the whole batch and only then applied. So a step either happens to every episode of the
batch or to none of them, and a trainer that retries a failed batch never counts an action twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from searchenv.episode.turns import Facts, Turn
from searchenv.protocol import ParsedAction
from searchenv.types import Passage, Retriever

if TYPE_CHECKING:
    from searchenv.env.search_qa import SearchQAEnv
    from searchenv.episode.rollout import RewardResult

__all__ = ["StepOutcome", "StepPlan", "StepResult", "search_and_commit", "step_batch", "step_batch_async"]


class StepResult(NamedTuple):
    """The Gymnasium step 5-tuple."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


# The step's internal records are slotted dataclasses: built and read at every step, they cost less than a
# NamedTuple, whose fields Python 3.11 reads through an unspecialised descriptor (see transcript.Turn).
@dataclass(slots=True)
class StepPlan:
    """One action read and checked, nothing changed yet: the query to run (if any) and whether the budget ends."""

    parsed: ParsedAction
    query: str | None
    final: bool


@dataclass(slots=True)
class StepOutcome:
    """What a step will do to its episode: the turn to append, the end flag, the reward (terminal step only)."""

    turn: Turn
    truncated: bool
    reward: RewardResult | None
    facts: Facts | None  # the episode's facts after this step, on the terminal step
    info: dict[str, Any]


def _unwrap(envs: Sequence[Any]) -> list[SearchQAEnv]:
    """Accept wrapped environments (``gym.make`` adds checkers) as well as bare ones; refuse duplicates."""
    from searchenv.env.search_qa import SearchQAEnv  # noqa: PLC0415 - env imports this module

    if len(envs) == 1 and type(envs[0]) is SearchQAEnv:  # env.step(): nothing to unwrap or compare
        return [envs[0]]
    unwrapped = [e if isinstance(e, SearchQAEnv) else getattr(e, "unwrapped", e) for e in envs]
    for e in unwrapped:
        if not isinstance(e, SearchQAEnv):
            raise TypeError(f"step_batch needs SearchQAEnv instances, got {type(e).__name__}")
    if len({id(e) for e in unwrapped}) != len(unwrapped):
        raise ValueError("step_batch got the same environment twice; each episode takes one action per step")
    return unwrapped


def _plan_all(envs: Sequence[Any], actions: Sequence[str]) -> tuple[list[SearchQAEnv], list[StepPlan]]:
    unwrapped = _unwrap(envs)
    if len(unwrapped) != len(actions):
        raise ValueError(f"step_batch got {len(unwrapped)} environments but {len(actions)} actions")
    return unwrapped, [env._plan(action) for env, action in zip(unwrapped, actions)]


def _search_groups(envs: Sequence[SearchQAEnv], plans: Sequence[StepPlan]) -> dict[tuple[int, int], list[int]]:
    """Indices of episodes that search, grouped by (retriever, k) so each group is one engine call."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (env, plan) in enumerate(zip(envs, plans)):
        if plan.query is not None:
            groups.setdefault((id(env.retriever), env.topk), []).append(i)
    return groups


def _search_options(retriever: Retriever, envs: Sequence[SearchQAEnv], group: list[int]) -> dict[str, Any]:
    """Keyword arguments of one group's search: the episodes' gold answers for an engine that sets
    ``wants_golds`` (the ``distractor`` engine drops the passages holding them), nothing for any other."""
    if not getattr(retriever, "wants_golds", False):
        return {}
    return {"golds": [envs[i].episode.example.golden_answers for i in group]}


def _checked(results: Any, n: int, retriever: Retriever) -> list[list[Passage]]:
    if not isinstance(results, list) or len(results) != n:
        size = len(results) if hasattr(results, "__len__") else "?"
        raise RuntimeError(
            f"{type(retriever).__name__}.search returned {type(results).__name__} of length {size} for {n} "
            "queries; it must return one list per query"
        )
    return results


def _record(
    group: list[int],
    envs: Sequence[SearchQAEnv],
    outcome: list[list[Passage]] | BaseException,
    found: dict[int, list[Passage]],
    errors: dict[int, str],
) -> None:
    # A client told to return empty results on failure (RemoteRetriever(on_error="empty")) marks them: the
    # search still failed, and is recorded as such, not as a search that found nothing.
    marked = getattr(outcome, "retrieval_error", None)
    if marked is not None:
        outcome = marked
    if not isinstance(outcome, BaseException):
        found.update(zip(group, outcome))
        return
    if any(envs[i].on_retrieval_error == "raise" for i in group):
        raise outcome  # nothing has been applied yet: every episode of the batch is as it was
    detail = getattr(outcome, "detail", None)
    message = f"{type(outcome).__name__}: {outcome}" + (f" ({detail})" if detail else "")
    errors.update(dict.fromkeys(group, message))


def _commit_all(
    envs: Sequence[SearchQAEnv],
    plans: Sequence[StepPlan],
    found: Mapping[int, list[Passage]],
    errors: Mapping[int, str],
) -> list[StepResult]:
    outcomes = [env._outcome(plan, found.get(i), errors.get(i)) for i, (env, plan) in enumerate(zip(envs, plans))]
    return [env._commit(outcome) for env, outcome in zip(envs, outcomes)]


def step_batch(envs: Sequence[Any], actions: Sequence[str]) -> list[StepResult]:
    """Step several episodes at once with one ``search`` call per distinct (retriever, k); all or nothing.

    A retriever that raises does not take the batch down: with ``on_retrieval_error="observe"`` the searching
    episodes are shown the protocol's short "search unavailable" block and get ``info["retrieval_error"]``;
    the failed search does not count as a search.
    """
    return search_and_commit(*_plan_all(envs, actions))


def search_and_commit(unwrapped: Sequence[SearchQAEnv], plans: Sequence[StepPlan]) -> list[StepResult]:
    """Phases two and three of :func:`step_batch` for actions already planned (``SearchQAEnv.step`` plans its
    one action itself: it has nothing to unwrap or compare)."""
    found: dict[int, list[Passage]] = {}
    errors: dict[int, str] = {}
    for (_, k), group in _search_groups(unwrapped, plans).items():
        retriever = unwrapped[group[0]].retriever
        try:
            queries = [plans[i].query for i in group]
            found_now = retriever.search(queries, k, **_search_options(retriever, unwrapped, group))
            outcome: Any = _checked(found_now, len(group), retriever)
        except Exception as exc:  # noqa: BLE001 - reported per episode, see docstring
            outcome = exc
        _record(group, unwrapped, outcome, found, errors)
    return _commit_all(unwrapped, plans, found, errors)


async def step_batch_async(envs: Sequence[Any], actions: Sequence[str]) -> list[StepResult]:
    """:func:`step_batch` for event loops: searches run concurrently and never block the loop.

    A retriever with an ``asearch`` coroutine (the HTTP client) is awaited; any other runs in a worker thread.
    """
    unwrapped, plans = _plan_all(envs, actions)
    groups = list(_search_groups(unwrapped, plans).items())

    async def run(group: list[int], k: int) -> list[list[Passage]]:
        retriever = unwrapped[group[0]].retriever
        queries = [plans[i].query for i in group]
        asearch = getattr(retriever, "asearch", None)
        options = _search_options(retriever, unwrapped, group)
        results = await (
            asearch(queries, k, **options) if asearch else asyncio.to_thread(retriever.search, queries, k, **options)
        )
        return _checked(results, len(group), retriever)

    outcomes = await asyncio.gather(*(run(group, k) for (_, k), group in groups), return_exceptions=True)
    found: dict[int, list[Passage]] = {}
    errors: dict[int, str] = {}
    for (_, group), outcome in zip(groups, outcomes):
        _record(group, unwrapped, outcome, found, errors)
    return _commit_all(unwrapped, plans, found, errors)
