"""The simulated engine: ``k`` documents per query written by a model, each useful or noisy by a seeded draw.

Which documents are noisy is a pure function of ``(seed, query)`` (:func:`~searchenv.retrievers.degraded.schedule.
query_rng`, the degraded wrappers' rule): document ``i`` of a query is noisy when its draw ``u_i < p_noisy``, so a
schedule that raises ``p_noisy`` turns more documents noisy without reshuffling the others, and the same query
gets the same documents in any batch. The text is deterministic at ``temperature`` 0 (the default, greedy).
With ``cache=PATH`` every document goes through an :class:`~searchenv.answer_store.AnswerStore`
(``cache_mode="record" | "replay" | "cached"``, keyed by the model, sampling and prompt — which holds the query,
the document's number, its kind and the golds), so a simulated run replays with the endpoint down and a repeated
search costs nothing. The documents are ordinary :class:`~searchenv.types.Passage` values: the environment
clips, neutralises and masks them like any engine's.

A document the model could not write (the endpoint failed after its retries) fails the whole call with the
query named: the environment then searches the batch again in halves, so only the episode whose query failed
sees the protocol's search-error text (see :mod:`searchenv.env.step_rules`); nothing invented takes its place.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from searchenv.answer_store import AnswerStore
from searchenv.corpus import Corpus
from searchenv.llm.prompter import Prompter, PromptFailure
from searchenv.retrievers.degraded.schedule import FollowsTrainingStep, Schedule, parse_schedule, query_rng
from searchenv.retrievers.simulated.options import check_simulated_options
from searchenv.retrievers.simulated.prompts import document_prompt
from searchenv.sampling import SamplingConfig
from searchenv.types import Passage

__all__ = ["SimulatedRetriever", "simulated_retriever"]

_END = "\n\n"  # a document is one paragraph: the server may stop here, and the text is cut here anyway


class SimulatedRetriever(FollowsTrainingStep):
    """A search engine whose results a model writes (ZeroSearch-style); see the module docstring.

    Args:
        url: base URL of an OpenAI-compatible server, or ``None`` to run ``model`` locally.
        model: the served model's name, or a local checkpoint folder / packaged alias (``smollm2-135m``).
        p_noisy: the probability that a document is noisy, or ``(step, p)`` points over training steps
            (see :meth:`set_step`).
        seed: which documents are noisy, and the endpoint's sampling seed.
        temperature: 0 (greedy, reproducible) by default.
        words: the length asked of each document (the reply is capped at ``2 * words`` tokens).
        mode / timeout / retries / concurrency: the endpoint's; device: the local model's.
        cache, cache_mode: the answer store documents are recorded in and replayed from (see the module
            docstring); ``None``: none.
        check_on_start: whether the composition root (``gym.make``, the CLI, the trainers) checks the endpoint
            with one one-token request when it builds the engine (never in ``replay``).
    """

    name = "simulated"
    wants_golds = True  # a useful document is steered towards the episode's gold answers, as in ZeroSearch
    compute_only = False

    def __init__(
        self,
        url: str | None = None,
        model: str | None = None,
        *,
        p_noisy: Any = 0.0,
        seed: int = 0,
        temperature: float = 0.0,
        words: int = 60,
        mode: str = "chat",
        timeout: float = 60.0,
        retries: int = 2,
        concurrency: int = 8,
        device: str = "",
        cache: str | None = None,
        cache_mode: str | None = None,
        check_on_start: bool = True,
    ):
        options = {"url": url, "model": model, "p_noisy": p_noisy, "seed": seed, "temperature": temperature}
        check_simulated_options({**options, "words": words, "mode": mode, "retries": retries, "cache_mode": cache_mode})
        self.schedule: Schedule = parse_schedule(p_noisy, "simulated: p_noisy")
        self.seed = seed
        self.words = words
        sampling = SamplingConfig(temperature=temperature, max_new_tokens=2 * words, seed=seed)
        self.prompter = Prompter(
            url,
            model,  # type: ignore[arg-type]  # checked above
            sampling,
            mode=mode,
            timeout=timeout,
            retries=retries,
            concurrency=concurrency,
            device=device,
            store=AnswerStore(cache, cache_mode) if cache is not None or cache_mode else None,
            store_kind="simulated",
        )
        self.check_on_start = bool(check_on_start) and url is not None and cache_mode != "replay"

    @property
    def p_noisy(self) -> float:
        """The probability that a document is noisy, at the current step."""
        return self.schedule.at(self._step)

    def noisy_flags(self, query: str, k: int) -> list[bool]:
        """Which of the query's ``k`` documents are noisy at the current step."""
        p = self.p_noisy
        return [bool(u < p) for u in query_rng(self.name, self.seed, query).random(k)]

    def search(
        self, queries: Sequence[str], k: int, golds: Sequence[Sequence[str]] | None = None
    ) -> list[list[Passage]]:
        queries, plan = self._plan(queries, k, golds)
        return self._documents(queries, k, plan, self.prompter.ask([prompt for *_, prompt in plan], [_END]))

    async def asearch(
        self, queries: Sequence[str], k: int, golds: Sequence[Sequence[str]] | None = None
    ) -> list[list[Passage]]:
        """:meth:`search` for event loops: the documents' requests are awaited on the running loop."""
        queries, plan = self._plan(queries, k, golds)
        return self._documents(queries, k, plan, await self.prompter.aask([prompt for *_, prompt in plan], [_END]))

    def _plan(
        self, queries: Sequence[str], k: int, golds: Sequence[Sequence[str]] | None
    ) -> tuple[list[str], list[tuple[int, int, str]]]:
        """``(queries, [(query index, document index, prompt)])``: the documents to write."""
        queries = list(queries)
        golds = [()] * len(queries) if golds is None else [tuple(g) for g in golds]
        if len(golds) != len(queries):
            raise ValueError(f"simulated: got {len(golds)} gold lists for {len(queries)} queries; give one per query")
        plan = [
            (q, i, document_prompt(query, i + 1, noisy, self.words, golds[q]))
            for q, query in enumerate(queries)
            for i, noisy in enumerate(self.noisy_flags(query, k))
        ]
        return queries, plan

    def _documents(
        self, queries: list[str], k: int, plan: list[tuple[int, int, str]], replies: Sequence[str | PromptFailure]
    ) -> list[list[Passage]]:
        results: list[list[Passage]] = [[] for _ in queries]
        for (q, i, prompt), reply in zip(plan, replies):
            if isinstance(reply, PromptFailure):
                raise RuntimeError(f"simulated engine: no document for query {queries[q]!r}: {reply.reason}")
            text = " ".join(reply.strip().split(_END, 1)[0].split())  # one paragraph, whatever the server did
            if text:
                results[q].append(Passage(self._id(prompt), queries[q].strip(), text, score=float(k - i)))
        return results

    def check_reachable(self) -> None:
        """One one-token request to the endpoint (``ConnectionError`` naming the cause and the fix)."""
        self.prompter.check()

    def close(self) -> None:
        if self.prompter.store is not None:
            self.prompter.store.close()

    def _id(self, prompt: str) -> str:
        # the model, not where it is served: a replay against another port (or none) names documents alike
        key = f"{self.prompter.model}\x00{self.seed}\x00{prompt}"
        return "simulated-" + hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


def simulated_retriever(corpus: Corpus | None = None, **options: Any) -> SimulatedRetriever:
    """``retriever="simulated"``: see :class:`SimulatedRetriever` (the corpus is not read)."""
    return SimulatedRetriever(**options)
