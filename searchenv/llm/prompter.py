"""Short questions put to a model, each prompt's failure its own: what the judge, the simulated engine and the page
summariser ask through.

A :class:`Prompter` sends one prompt per item to an OpenAI-compatible endpoint (``url`` + ``model``, through
:class:`~searchenv.llm.client.EndpointClient`) or to a local checkpoint (``model`` alone, through
:class:`~searchenv.llm.local.LocalModel`). Unlike a policy it isolates failures: a prompt the model could not
answer comes back as a :class:`PromptFailure` for that item alone (with the failure's ``kind``: ``unreachable``,
``timeout``, ``refused``, ``not_recorded``, ...), so a caller can fall back for it and count the fallback instead
of losing the whole batch.

Answers go through an :class:`~searchenv.answer_store.AnswerStore` when one is given (``cache=PATH,
cache_mode=...`` on the judge reward and the simulated engine): a recorded run replays with the endpoint down,
and every recording caller gets the first answer stored for its prompt. Without a store nothing is kept between
calls (a prompt asked twice in one batch is asked once); failures are never stored.

:meth:`Prompter.aask` is the asynchronous API: requests are awaited on the caller's event loop (a local model
runs in a worker thread), so concurrent episodes' prompts go out together and the loop keeps running.
:meth:`Prompter.ask` is the synchronous one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from searchenv.answer_store import AnswerStore, NotRecorded
from searchenv.http.retry import ServiceUnavailable
from searchenv.llm.blocking import run_coroutine
from searchenv.llm.client import EndpointClient
from searchenv.llm.local import LocalModel, check_model_source
from searchenv.sampling import SamplingConfig

__all__ = ["PromptFailure", "Prompter", "check_model_source"]


@dataclass(frozen=True)
class PromptFailure:
    """Why one prompt got no answer: ``reason`` in words (never a key), ``kind`` in one word (``unreachable``,
    ``timeout``, ``overloaded``, ``refused``, ``bad_response``, ``not_recorded``, or ``failed``)."""

    reason: str
    kind: str = "failed"


class Prompter:
    """Asks a model many short prompts concurrently; see the module docstring.

    Args:
        url: base URL of an OpenAI-compatible server; ``None`` runs ``model`` locally.
        model: the served model's name (with ``url``), or a local checkpoint folder / packaged alias.
        sampling: decoding settings (greedy by default, so answers repeat and a record replays them).
        mode: ``"chat"`` (the prompt as one user message) or ``"completions"``.
        timeout: seconds per request attempt.
        retries: retries of a failed request within ``retry_window`` seconds (see
            :class:`~searchenv.llm.client.EndpointClient`).
        concurrency: requests in flight at once.
        device: the local model's torch device (default: CUDA when there is one).
        api_key_env: the variable holding the endpoint's key (sent only as a header).
        store: where answers are recorded and replayed from; ``None``: nowhere.
        store_kind: the ``kind`` of this prompter's answers in the store (``judge``, ``simulated``).
    """

    def __init__(
        self,
        url: str | None,
        model: str,
        sampling: SamplingConfig | None = None,
        *,
        mode: str = "chat",
        timeout: float = 60.0,
        retries: int = 2,
        retry_window: float = 60.0,
        backoff: float = 0.5,
        concurrency: int = 8,
        device: str = "",
        api_key_env: str = "OPENAI_API_KEY",
        store: AnswerStore | None = None,
        store_kind: str = "llm",
    ):
        check_model_source(url, model, "prompter")
        self.url, self.model = url, model
        self.sampling = sampling or SamplingConfig.greedy()
        self.mode = mode
        self.concurrency = concurrency
        self.store = store
        self.store_kind = store_kind
        self.client = (
            EndpointClient(
                url,
                model,
                self.sampling,
                mode=mode,
                timeout=timeout,
                retry_window=retry_window,
                retries=retries,
                backoff=backoff,
                concurrency=concurrency,
                api_key_env=api_key_env,
            )
            if url is not None
            else None
        )
        self.local = LocalModel(model, self.sampling, device) if url is None else None

    def __repr__(self) -> str:
        return f"Prompter({self.identity!r}, store={self.store!r})"

    @property
    def identity(self) -> str:
        """Which model answers: ``model@url``, or the local model."""
        return f"{self.model}@{self.client.url}" if self.client is not None else self.model

    def check(self, timeout: float | None = None) -> None:
        """One one-token request, so a dead, hung or misconfigured endpoint fails (``ConnectionError`` naming the
        cause and the fix) before any work starts; a local model is checked when it loads."""
        if self.client is not None:
            self.client.check(timeout)

    def ask(self, prompts: Sequence[str], stop: Sequence[str] = ()) -> list[str | PromptFailure]:
        """One answer (or :class:`PromptFailure`) per prompt, in order. From a coroutine, await :meth:`aask`
        instead: this call blocks its thread until every answer is in (see :mod:`searchenv.llm.blocking`)."""

        async def once() -> list[str | PromptFailure]:
            try:
                return await self.aask(prompts, stop)
            finally:
                if self.client is not None:
                    await self.client.aclose()  # this loop ends here: close its pooled connections

        return run_coroutine(once)

    async def aask(self, prompts: Sequence[str], stop: Sequence[str] = ()) -> list[str | PromptFailure]:
        """:meth:`ask`, awaited on the running event loop: the prompts' requests go out concurrently (at most
        ``concurrency`` at a time) and the loop keeps running while they are answered."""
        unique = list(dict.fromkeys(prompts))
        answers: dict[str, str | PromptFailure] = {}
        pending: list[str] = []
        for prompt in unique:
            found = self._stored(prompt, stop)
            if found is None:
                pending.append(prompt)
            else:
                answers[prompt] = found
        if pending:
            fresh = await (self._alocal(pending, stop) if self.local is not None else self._aendpoint(pending, stop))
            for prompt, reply in zip(pending, fresh):
                answers[prompt] = self._keep(prompt, stop, reply)
        return [answers[prompt] for prompt in prompts]

    # -- internals --------------------------------------------------------------------------------------------
    def _request(self, prompt: str, stop: Sequence[str]) -> dict[str, Any]:
        """What an answer depends on, as the store keys it: the model (not where it is served), the API, the
        decoding settings, the stop strings and the prompt."""
        s = self.sampling
        return {
            "model": self.model,
            "mode": self.mode,
            "sampling": [s.temperature, s.top_p, s.max_new_tokens, s.seed],
            "stop": list(stop),
            "prompt": prompt,
        }

    def _stored(self, prompt: str, stop: Sequence[str]) -> str | PromptFailure | None:
        """The stored answer, a replay miss as a failure, or ``None`` to ask the model."""
        if self.store is None:
            return None
        try:
            found = self.store.lookup(self.store_kind, self._request(prompt, stop))
        except NotRecorded as miss:
            return PromptFailure(miss.detail, "not_recorded")
        if found is AnswerStore.MISSING:
            return None
        return found if isinstance(found, str) else PromptFailure(f"the record holds a non-text answer: {found!r}")

    def _keep(self, prompt: str, stop: Sequence[str], reply: str | PromptFailure) -> str | PromptFailure:
        """A fresh answer, stored (the stored one returned: the first stored wins); a failure, never stored."""
        if self.store is None:
            return reply
        self.store.count_call(self.store_kind)
        if isinstance(reply, PromptFailure):
            return reply
        return str(self.store.keep(self.store_kind, self._request(prompt, stop), reply))

    async def _aendpoint(self, prompts: list[str], stop: Sequence[str]) -> list[str | PromptFailure]:
        client = self.client
        assert client is not None

        async def one(prompt: str) -> str | PromptFailure:
            try:
                return (await client.acomplete(prompt, stop=stop)).text
            except ServiceUnavailable as exc:  # this prompt's failure, not the batch's
                return PromptFailure(f"{exc} ({exc.detail})", exc.kind)
            except Exception as exc:  # noqa: BLE001 - as above
                return PromptFailure(f"{type(exc).__name__}: {exc}")

        return list(await asyncio.gather(*(one(prompt) for prompt in prompts)))

    async def _alocal(self, prompts: list[str], stop: Sequence[str]) -> list[str | PromptFailure]:
        local = self.local
        assert local is not None
        try:
            return list(await asyncio.to_thread(local.generate, prompts, list(stop)))
        except Exception as exc:  # noqa: BLE001 - one broken batch is the batch's failure, reported per prompt
            return [PromptFailure(f"{type(exc).__name__}: {exc}")] * len(prompts)
