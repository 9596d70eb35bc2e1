"""The searches of concurrent episodes merged into few engine calls: what ``SearchQAEnv.step_async`` awaits.

Under an asynchronous trainer every episode steps on its own, so :func:`~searchenv.env.stepping.step_batch`'s
one engine call per step is lost: 256 episodes would make 256 calls of one query. A :class:`SearchMerger`
gives them back the batch. Episodes that share one retriever object search through one
:class:`~searchenv.retrievers.batching.MicroBatcher` (the retrieval service's policy: one call at a time, a
wait window of a few milliseconds once searches arrive together, grouped by ``k``), so searches made at nearly
the same moment are one ``search`` call. Each merged call goes through the step rules
(:func:`~searchenv.env.step_rules.arun_search`): ``asearch`` is awaited where the engine has one, any other
engine's ``search`` runs in a worker thread, a failure is narrowed down to the queries that cause it, and the
episodes' gold answers go to engines that ask for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from searchenv.env.step_rules import Found, arun_search
from searchenv.retrievers.batching import BatchersPerLoop, MicroBatcher, check_merge_window
from searchenv.types import Retriever

__all__ = ["DEFAULT_MERGER", "SearchMerger"]

#: One query of one episode with the episode's gold answers (for engines that set ``wants_golds``).
_Item = tuple[str, tuple[str, ...]]
#: Searches that may share a call: the same ``k`` and the same ``on_retrieval_error`` ("raise" or not).
_Key = tuple[int, bool]


class SearchMerger:
    """Merges the searches of episodes that share a retriever, per event loop.

    Args:
        wait_ms: how long a merged call waits for more searches once searches have been seen arriving together
            (2 ms, the retrieval service's default). An episode's search waits at most this long; a search that
            arrives alone is never held.
        max_queries: most queries in one call.

    One :class:`~searchenv.retrievers.batching.MicroBatcher` is kept per (event loop, retriever object): a
    batcher is never shared by two loops (two ``asyncio.run`` calls, or loops in two threads, each get their
    own), and one loop's batchers go when the loop does. Searches with different ``k`` never share a call;
    neither do episodes told ``on_retrieval_error="raise"`` and the others, because a merged call that raises
    is searched again request by request, so each raising episode gets exactly the error its own ``step``
    would have raised.
    """

    def __init__(self, wait_ms: float = 2.0, max_queries: int = 1024):
        check_merge_window(wait_ms, max_queries, "max_queries")
        self.wait_ms = float(wait_ms)
        self.max_queries = max_queries
        self._batchers: BatchersPerLoop[_Item, Found] = BatchersPerLoop(self._new_batcher)

    async def search(self, retriever: Retriever, query: str, k: int, golds: Sequence[str], raise_errors: bool) -> Found:
        """One episode's search, as part of the next merged call: its passages, or the message of its failure
        (raised instead when ``raise_errors``), exactly as :func:`~searchenv.env.step_rules.run_search` reads it."""
        (found,) = await self._batchers.get(retriever).submit([(query, tuple(golds))], (k, raise_errors))
        return found

    def stats(self) -> dict[str, int]:
        """Totals over the batchers of the event loops alive now (so call it inside the loop): gathered batches,
        engine calls (``calls``), episodes' searches (``requests``) and the queries they held."""
        return self._batchers.totals(("batches", "calls", "requests", "queries"))

    def __reduce__(self) -> tuple[Any, ...]:
        # Batchers belong to this process's event loops; a copy in another process starts with none.
        return (SearchMerger, (self.wait_ms, self.max_queries))

    def _new_batcher(self, retriever: Retriever) -> MicroBatcher[_Item, Found]:
        run = partial(_search_merged, retriever)
        return MicroBatcher(run, max_wait_s=self.wait_ms / 1000, max_items=self.max_queries)


async def _search_merged(retriever: Retriever, key: _Key, items: list[_Item]) -> list[Found]:
    k, raise_errors = key
    return await arun_search(retriever, [q for q, _ in items], k, raise_errors, [g for _, g in items])


#: The merger every environment uses unless its ``search_merger`` attribute is set to another.
DEFAULT_MERGER = SearchMerger()
