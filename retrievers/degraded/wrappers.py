"""The four degraded engines: each makes one batched call to its base engine and degrades each query's list.

Randomness is a pure function of ``(wrapper, seed, query)``, as in
:class:`~searchenv.retrievers.random_retriever.RandomRetriever`: the same query is degraded the same way in any
batch and any order, so runs reproduce under a seed, and a repeated search cannot re-roll a bad result (a real
engine is deterministic too). Each query (each passage, for ``noisy``) draws one uniform number ``u`` and is
degraded when ``u < p``; a higher ``p`` therefore degrades a superset of what a lower one did, so a schedule
that raises ``p`` adds degradation without reshuffling what came before.

The step of a schedule is told, never counted: a trainer calls ``set_step(step)`` (once: the composition root
shares one wrapper between the environments built with the same arguments). Counting search calls would tie
the curriculum to the batch size and to how many episodes happen to search.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from searchenv.corpus import Corpus
from searchenv.retrievers.degraded.options import check_wrapper_options
from searchenv.retrievers.degraded.schedule import FollowsTrainingStep, Schedule, parse_schedule, query_rng
from searchenv.retrievers.random_retriever import RandomRetriever
from searchenv.reward_specs.metrics import answer_in_passages
from searchenv.types import ComputesInProcess, Passage, Retriever, has_flag

__all__ = ["DegradedRetriever", "DistractorRetriever", "EmptyRetriever", "NoisyRetriever", "ShuffledRetriever"]


class DegradedRetriever(FollowsTrainingStep):
    """A wrapper around ``base`` that degrades each query's passages with probability ``p`` (a :class:`Schedule`).

    Args:
        base: the engine whose results are degraded (any object with ``search(queries, k)``).
        p: a probability, or ``(step, p)`` points interpolated over training steps (see :meth:`set_step`).
        seed: makes the degradation reproducible; different seeds degrade different queries.
    """

    name = "degraded"

    def __init__(self, base: Retriever, *, p: Any = 1.0, seed: int = 0):
        if not isinstance(base, Retriever):
            raise TypeError(f"{self.name}: base must be an engine with search(queries, k), got {type(base).__name__}")
        check_wrapper_options(self.name, {"p": p, "seed": seed})
        self.base = base
        self.schedule: Schedule = parse_schedule(p)
        self.seed = seed

    @property
    def compute_only(self) -> bool:
        """As the base engine's (see :class:`~searchenv.types.Retriever`): the wrapper adds only computation."""
        return has_flag(self.base, ComputesInProcess)

    @property
    def p(self) -> float:
        """The degradation probability at the current step."""
        return self.schedule.at(self._step)

    def _rng(self, query: str) -> np.random.Generator:
        return query_rng(self.name, self.seed, query)

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        queries = list(queries)
        results = self.base.search(queries, k)
        p = self.p
        return [self._degrade(query, list(found[:k]), p) for query, found in zip(queries, results)]

    def _degrade(self, query: str, passages: list[Passage], p: float) -> list[Passage]:
        """One query's passages, degraded or not as this query's draw and ``p`` say."""
        raise NotImplementedError


class EmptyRetriever(DegradedRetriever):
    """No passages, with probability ``p`` per query (default 1: never any): a search engine that finds nothing."""

    name = "empty"

    def _degrade(self, query: str, passages: list[Passage], p: float) -> list[Passage]:
        return [] if self._rng(query).random() < p else passages


class ShuffledRetriever(DegradedRetriever):
    """The base's passages in another order, with probability ``p`` per query (default 1): right set, wrong rank.

    A shuffled list of two or more passages is never the original order (a permutation equal to it is drawn
    again), so ``p = 1`` always moves something.
    """

    name = "shuffled"

    def _degrade(self, query: str, passages: list[Passage], p: float) -> list[Passage]:
        rng = self._rng(query)
        if rng.random() >= p or len(passages) < 2:
            return passages
        order = np.arange(len(passages))
        while (order == np.arange(len(passages))).all():
            order = rng.permutation(len(passages))
        return [passages[i] for i in order]


class NoisyRetriever(DegradedRetriever):
    """Each passage replaced, with probability ``p``, by a random corpus passage the base did not return.

    The replacements are the :class:`~searchenv.retrievers.random_retriever.RandomRetriever`'s ranking for the
    query (same seed), minus the base's passages, so ``p = 1`` shares no passage with the base and ``p = 0``
    is the base exactly. A replaced passage keeps its rank; its score is the random engine's (0.0).
    """

    name = "noisy"

    def __init__(self, base: Retriever, corpus: Corpus, *, p: Any, seed: int = 0):
        super().__init__(base, p=p, seed=seed)
        self._random = RandomRetriever(corpus, seed=seed)

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        queries = list(queries)
        results = [list(found[:k]) for found in self.base.search(queries, k)]
        p = self.p
        draws = [self._rng(query).random(len(found)) for query, found in zip(queries, results)]
        noisy = [i for i, u in enumerate(draws) if (u < p).any()]
        # Enough random passages that, after skipping the base's own, every replaced rank gets one.
        pools = self._random.search([queries[i] for i in noisy], 2 * k) if noisy else []
        for i, pool in zip(noisy, pools):
            taken = {passage.id for passage in results[i]}
            spare = iter([passage for passage in pool if passage.id not in taken])
            results[i] = [next(spare, passage) if u < p else passage for passage, u in zip(results[i], draws[i])]
        return results


class DistractorRetriever(DegradedRetriever):
    """The base's best passages that hold none of the episode's gold answers, with probability ``p`` per query.

    The golds reach the engine with the query: :class:`~searchenv.env.SearchQAEnv` passes each episode's gold
    answers as ``search(queries, k, golds=...)`` to an engine that sets ``wants_golds`` (the ``Retriever``
    contract itself has no golds, and a query written by the model cannot be traced back to its question).
    Callers that do not know the golds — the retrieval service, ``searchenv study`` — may give ``answers`` at
    construction instead: then every passage holding any of them is dropped, whatever the query. A passage
    "holds" a gold as :func:`~searchenv.reward_specs.metrics.answer_in_passages` decides, on its title and text.

    To fill ``k`` places after dropping, the base is asked for ``fetch`` passages per query (default ``3 * k``);
    fewer than ``k`` come back when the base's top ``fetch`` hold too many golds.
    """

    name = "distractor"
    wants_golds = True

    def __init__(
        self,
        base: Retriever,
        *,
        p: Any = 1.0,
        seed: int = 0,
        fetch: int | None = None,
        answers: Sequence[str] | None = None,
    ):
        super().__init__(base, p=p, seed=seed)
        check_wrapper_options(self.name, {"fetch": fetch, "answers": answers})
        self.fetch = fetch
        self.answers = None if answers is None else tuple(answers)

    def search(
        self, queries: Sequence[str], k: int, golds: Sequence[Sequence[str]] | None = None
    ) -> list[list[Passage]]:
        queries = list(queries)
        if golds is None:
            if self.answers is None:
                raise ValueError(
                    "the distractor engine needs the gold answers: use it inside SearchQAEnv (which passes each "
                    "episode's golds) or give retriever_options={'answers': [...]} for callers without golds"
                )
            golds = [self.answers] * len(queries)
        if len(golds) != len(queries):
            raise ValueError(f"distractor: got {len(golds)} gold lists for {len(queries)} queries; give one per query")
        results = self.base.search(queries, max(self.fetch or 3 * k, k))
        p = self.p
        out = []
        for query, found, gold in zip(queries, results, golds):
            if self._rng(query).random() < p:
                found = [passage for passage in found if not answer_in_passages(gold, [passage.contents])]
            out.append(list(found[:k]))
        return out


# -- factories, as :func:`searchenv.retrievers.make_retriever` calls them: ``factory(corpus, **options)`` with
# ``base`` already built (by make_retriever, or shared by searchenv.components.build_retriever).


def noisy_retriever(corpus: Corpus, *, base: Retriever, p: Any = None, seed: int = 0) -> NoisyRetriever:
    """``retriever="noisy"``: see :class:`NoisyRetriever`."""
    return NoisyRetriever(base, corpus, p=p, seed=seed)


def empty_retriever(corpus: Corpus | None, *, base: Retriever, p: Any = 1.0, seed: int = 0) -> EmptyRetriever:
    """``retriever="empty"``: see :class:`EmptyRetriever`."""
    return EmptyRetriever(base, p=p, seed=seed)


def shuffled_retriever(corpus: Corpus | None, *, base: Retriever, p: Any = 1.0, seed: int = 0) -> ShuffledRetriever:
    """``retriever="shuffled"``: see :class:`ShuffledRetriever`."""
    return ShuffledRetriever(base, p=p, seed=seed)


def distractor_retriever(
    corpus: Corpus | None,
    *,
    base: Retriever,
    p: Any = 1.0,
    seed: int = 0,
    fetch: int | None = None,
    answers: Sequence[str] | None = None,
) -> DistractorRetriever:
    """``retriever="distractor"``: see :class:`DistractorRetriever`."""
    return DistractorRetriever(base, p=p, seed=seed, fetch=fetch, answers=answers)
