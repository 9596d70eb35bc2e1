"""Stepping many episodes at once: every action validated first, one search call per engine (and one
``open_documents`` call per opener), then all applied.

A batch step runs the phases of :mod:`.step_rules` for the whole batch, one phase at a time. *Plan*: every
action is read and checked; a bad action (wrong type, an ended episode, the same environment twice) raises
before any episode changes. *Search*: the pending queries are grouped by (retriever, k) and each group is one
``Retriever.search`` call (``asearch`` for the async variant); only a call that fails is searched again, in
halves, to find the queries that fail. *Outcome*, then *apply*: each episode's new
turn, observation and, on the terminal step, its reward are computed for the whole batch and only then
applied; the episodes the step ends are scored together (one ``score_batch`` call per reward spec that has one,
:func:`~searchenv.env.step_rules.score_outcomes`). So a step either happens to every episode of the batch or
to none of them, and a trainer that retries a failed batch never counts an action twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any

from searchenv.env.merged_scoring import ascore_outcomes
from searchenv.env.search_qa import SearchQAEnv
from searchenv.env.step_rules import (
    Found,
    StepOutcome,
    StepPlan,
    StepResult,
    arun_open,
    arun_search,
    plan_step,
    run_open,
    run_search,
    score_outcomes,
    step_outcome,
)

__all__ = ["step_batch", "step_batch_async"]


def step_batch(envs: Sequence[Any], actions: Sequence[str]) -> list[StepResult]:
    """Step several episodes at once with one ``search`` call per distinct (retriever, k); all or nothing.

    A retriever that raises does not take the batch down: with ``on_retrieval_error="observe"`` the episodes
    whose search failed are shown the protocol's short "search unavailable" block and get
    ``info["retrieval_error"]``; the failed search does not count as a search. One bad query fails only its own
    episode: the failed call is searched again in halves until it stands alone (see
    :func:`~searchenv.env.step_rules.isolates`; a service that is down fails the whole call at once).
    """
    unwrapped, plans = _plan_all(envs, actions)
    found: dict[int, Found] = {}
    for group in _search_groups(unwrapped, plans):
        env = unwrapped[group[0]]
        queries, golds = [plans[i].query for i in group], _golds(unwrapped, group)
        found.update(zip(group, run_search(env.retriever, queries, env.topk, _raises(unwrapped, group), golds)))
    for group in _open_groups(unwrapped, plans):
        refs = [plans[i].open_ref for i in group]
        questions = [unwrapped[i].episode.example.question for i in group]
        found.update(zip(group, run_open(unwrapped[group[0]].opener, refs, _raises(unwrapped, group), questions)))
    return _apply_all(unwrapped, plans, found)


async def step_batch_async(envs: Sequence[Any], actions: Sequence[str]) -> list[StepResult]:
    """:func:`step_batch` for event loops: searches run concurrently and never block the loop.

    A retriever with an ``asearch`` coroutine (the HTTP client) is awaited; any other runs in a worker thread. The
    episodes the step ends are scored with a spec's ``ascore_batch`` when it has one (the LLM judge: awaited).
    """
    unwrapped, plans = _plan_all(envs, actions)
    groups = _search_groups(unwrapped, plans)

    def search(group: list[int]) -> Coroutine[Any, Any, list[Found]]:
        env = unwrapped[group[0]]
        queries = [plans[i].query for i in group]
        return arun_search(env.retriever, queries, env.topk, _raises(unwrapped, group), _golds(unwrapped, group))

    def open_refs(group: list[int]) -> Coroutine[Any, Any, list[Found]]:
        refs = [plans[i].open_ref for i in group]
        questions = [unwrapped[i].episode.example.question for i in group]
        return arun_open(unwrapped[group[0]].opener, refs, _raises(unwrapped, group), questions)  # type: ignore[arg-type]

    opens = _open_groups(unwrapped, plans)
    # every search ends before an error of one is raised, so none runs on unwatched after the step returns
    calls = [*(search(group) for group in groups), *(open_refs(group) for group in opens)]
    searched = await asyncio.gather(*calls, return_exceptions=True)
    found: dict[int, Found] = {}
    for group, results in zip([*groups, *opens], searched):
        if isinstance(results, BaseException):
            raise results
        found.update(zip(group, results))
    outcomes = _outcomes(unwrapped, plans, found)
    await ascore_outcomes([env.reward_spec for env in unwrapped], outcomes)  # a judge is awaited, not blocked on
    return [env.apply_step(outcome) for env, outcome in zip(unwrapped, outcomes)]


def _unwrap(envs: Sequence[Any]) -> list[SearchQAEnv]:
    """Accept wrapped environments (``gym.make`` adds checkers) as well as bare ones; refuse duplicates."""
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
    return unwrapped, [plan_step(env, env.episode, action) for env, action in zip(unwrapped, actions)]


def _search_groups(envs: Sequence[SearchQAEnv], plans: Sequence[StepPlan]) -> list[list[int]]:
    """Indices of episodes that search, grouped by (retriever, k) so each group is one engine call."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (env, plan) in enumerate(zip(envs, plans)):
        if plan.query is not None:
            groups.setdefault((id(env.retriever), env.topk), []).append(i)
    return list(groups.values())


def _open_groups(envs: Sequence[SearchQAEnv], plans: Sequence[StepPlan]) -> list[list[int]]:
    """Indices of episodes that open a document, grouped by opener so each group is one ``open_documents`` call."""
    groups: dict[int, list[int]] = {}
    for i, (env, plan) in enumerate(zip(envs, plans)):
        if plan.open_ref is not None:
            groups.setdefault(id(env.opener), []).append(i)
    return list(groups.values())


def _golds(envs: Sequence[SearchQAEnv], group: list[int]) -> list[tuple[str, ...]]:
    return [envs[i].episode.example.golden_answers for i in group]


def _raises(envs: Sequence[SearchQAEnv], group: list[int]) -> bool:
    """A failed search raises (nothing applied yet) if any episode of its group was told to raise."""
    return any(envs[i].on_retrieval_error == "raise" for i in group)


def _outcomes(envs: Sequence[SearchQAEnv], plans: Sequence[StepPlan], found: dict[int, Found]) -> list[StepOutcome]:
    """Every episode's outcome, not yet scored nor applied."""
    return [
        step_outcome(env, env.episode, plan, found.get(i), score=False)
        for i, (env, plan) in enumerate(zip(envs, plans))
    ]


def _apply_all(envs: Sequence[SearchQAEnv], plans: Sequence[StepPlan], found: dict[int, Found]) -> list[StepResult]:
    """Every outcome, the episodes this step ends scored together (one ``score_batch`` call per reward spec that
    has one: the judge's requests for the batch go out concurrently), then all applied."""
    outcomes = _outcomes(envs, plans, found)
    score_outcomes([env.reward_spec for env in envs], outcomes)
    return [env.apply_step(outcome) for env, outcome in zip(envs, outcomes)]
