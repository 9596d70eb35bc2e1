"""An OpenAI-compatible endpoint as searchenv asks it: vLLM serve, SGLang, llama.cpp, ``transformers serve``, a
hosted API.

:class:`EndpointClient` posts ``/v1/chat/completions`` (``mode="chat"``: the prompt as one user message, a
response so far as the assistant's message to continue) or ``/v1/completions`` (``mode="completions"``: the
text as it is). Every request:

* goes through the one HTTP client setup (:mod:`searchenv.http.clients`): one pooled ``httpx.AsyncClient`` per
  event loop, so the requests of a batch, and of every later batch in that loop, reuse kept-alive connections;
* waits for one of ``concurrency`` slots of its loop;
* is retried by the one retry policy (:mod:`searchenv.http.retry`): connection errors, timeouts, 429, 502, 503
  and 504 within ``retry_window`` seconds (``Retry-After`` honoured, in seconds or as an HTTP date), never a
  refusal (other 4xx) or a reply that is not OpenAI's shape; giving up raises :class:`EndpointUnavailable`
  (``kind``, ``detail``), with the key scrubbed from every text.

Servers that strip the stop string from the text (the OpenAI default) and report it as vLLM's ``stop_reason`` get
it put back, so a caller sees a complete closing tag. The key is read from ``$<api_key_env>`` and sent only as a
header; ``repr`` never shows it.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from searchenv.http.clients import LoopClients
from searchenv.http.retry import (
    AttemptFailed,
    Retrier,
    RetryPolicy,
    ServiceUnavailable,
    attempt_failed_from_exception,
    attempt_failed_from_status,
)
from searchenv.llm.blocking import run_coroutine
from searchenv.sampling import SamplingConfig

__all__ = ["MODES", "Completion", "EndpointClient", "EndpointUnavailable", "endpoint_base_url"]

#: The two OpenAI APIs a client can post to.
MODES = ("chat", "completions")


class EndpointUnavailable(ServiceUnavailable):
    """An endpoint gave no usable reply (down, timed out, overloaded after the retry window; or it refused the
    request, or its reply was not OpenAI's shape): ``kind`` and ``detail`` say which."""

    service = "endpoint"


@dataclass(frozen=True)
class Completion:
    """One reply: its text, the tokens the server says it generated (``usage.completion_tokens``), and why it
    stopped (``"stop"``: a stop string or end of sequence; ``"length"``: the token cap)."""

    text: str
    num_tokens: int
    finish_reason: str


def endpoint_base_url(url: str) -> str:
    """``http://host:8000/v1/`` → ``http://host:8000``: the base the API paths are appended to."""
    base = str(url).rstrip("/")
    return base[:-3] if base.endswith("/v1") else base


class EndpointClient:
    """Requests to one OpenAI-compatible endpoint; see the module docstring.

    Args:
        url: the server's base URL, with or without ``/v1``.
        model: the served model's name.
        sampling: the decoding settings every request carries.
        mode: ``"chat"`` or ``"completions"``.
        timeout: seconds per request attempt.
        retry_window: seconds from the first attempt during which transient failures are retried.
        retries: cap on retries within the window (``None``: the window alone limits them; 0 tries once).
        backoff, max_backoff: the first wait between attempts (doubling, capped), with jitter.
        concurrency: requests in flight at once, per event loop (also the connection pool's size).
        extra_body: fields added to every request body (``{"continue_final_message": True}`` for vLLM).
        api_key_env: the variable holding the key (none needed for a local server).
        seed: seeds the backoff jitter.
    """

    def __init__(
        self,
        url: str,
        model: str,
        sampling: SamplingConfig | None = None,
        *,
        mode: str = "chat",
        timeout: float = 60.0,
        retry_window: float = 60.0,
        retries: int | None = None,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        concurrency: int = 8,
        extra_body: dict[str, Any] | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        seed: int | None = None,
    ):
        if mode not in MODES:
            raise ValueError(f"endpoint mode must be 'chat' or 'completions', got {mode!r}")
        if not str(url).startswith(("http://", "https://")):
            raise ValueError(f"'url' must be an http(s):// base URL of an OpenAI-compatible server, got {url!r}")
        if not (timeout > 0 and concurrency >= 1 and (retries is None or retries >= 0)):
            raise ValueError(
                f"need timeout > 0, concurrency >= 1 and retries >= 0 (or None); got timeout={timeout}, "
                f"concurrency={concurrency}, retries={retries}"
            )
        self.url = endpoint_base_url(url)
        self.model = str(model)
        self.sampling = sampling or SamplingConfig.greedy()
        self.mode = mode
        self.timeout = float(timeout)
        self.concurrency = int(concurrency)
        self.extra_body = dict(extra_body or {})
        self.policy = RetryPolicy.of(retry_window, retries, backoff, max_backoff)
        self.seed = seed
        self._key = os.environ.get(api_key_env) or None
        self._init_transient()

    def _init_transient(self) -> None:
        self._retrier = Retrier(self.policy, self.seed, unavailable=EndpointUnavailable)
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        self._clients = LoopClients(timeout=self.timeout, headers=headers, pool_size=self.concurrency)
        self._gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:  # a Ray worker or a subprocess gets its own pool and counters
        state = self.__dict__.copy()
        for transient in ("_retrier", "_clients", "_gates", "_lock"):
            state.pop(transient, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_transient()

    def __repr__(self) -> str:  # the key stays out of every printed form
        return f"EndpointClient(url={self.url!r}, model={self.model!r}, mode={self.mode!r})"

    @property
    def requests(self) -> int:
        """HTTP requests sent, retries included."""
        return self._retrier.attempts

    # -- requests ---------------------------------------------------------------------------------------------
    def request_body(
        self,
        prompt: str,
        response: str = "",
        stop: Sequence[str] = (),
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """``(path, body)`` of one request: ``prompt`` (and the ``response`` so far, to be continued)."""
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens or self.sampling.max_new_tokens,
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "seed": self.sampling.seed,
        }
        if stop:  # some servers fail on an empty list
            body["stop"] = list(stop)
        if self.mode == "completions":
            body["prompt"] = prompt + response
            path = "/v1/completions"
        else:
            messages = [{"role": "user", "content": prompt}]
            if response:
                messages.append({"role": "assistant", "content": response})
            body["messages"] = messages
            if tools:
                body["tools"] = tools
            path = "/v1/chat/completions"
        body.update(self.extra_body)
        return path, body

    async def acomplete(
        self,
        prompt: str,
        *,
        response: str = "",
        stop: Sequence[str] = (),
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """One reply, awaited without blocking the event loop; raises :class:`EndpointUnavailable`."""
        path, body = self.request_body(prompt, response, stop, tools, max_tokens)
        async with self._gate():
            return await self._retrier.arun(lambda: self._attempt(path, body, stop), self.url + path)

    def complete(self, prompt: str, **options: Any) -> Completion:
        """:meth:`acomplete` from synchronous code (see :mod:`searchenv.llm.blocking`)."""

        async def once() -> Completion:
            try:
                return await self.acomplete(prompt, **options)
            finally:
                await self.aclose()

        return run_coroutine(once)

    async def aclose(self) -> None:
        """Close the running loop's pooled connections (the next request opens new ones)."""
        await self._clients.aclose_current()

    def check(self, timeout: float | None = None) -> None:
        """One one-token request, tried once within ``timeout`` seconds (default: the client's): raises
        ``ConnectionError`` naming the URL, the cause and the fix when the endpoint cannot answer, so a dead,
        hung or misconfigured endpoint fails before any work starts. A server still loading (503) passes."""
        run_coroutine(lambda: self.acheck(timeout))

    async def acheck(self, timeout: float | None = None) -> None:
        """:meth:`check` for coroutines."""
        import httpx

        from searchenv.http.clients import async_http_client

        path, body = self.request_body("Hello", max_tokens=1)
        where = f"{self.url}{path}"
        fix = "start one (vllm serve MODEL, transformers serve MODEL) or fix 'url'"
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        limit = self.timeout if timeout is None else float(timeout)
        async with async_http_client(timeout=limit, headers=headers) as client:
            try:
                reply = await client.post(where, json=body)
            except httpx.TimeoutException:
                raise ConnectionError(
                    f"the OpenAI-compatible endpoint at {self.url} did not answer a one-token request within "
                    f"{limit:g} s; is it overloaded or hung? ({fix})"
                ) from None
            except httpx.HTTPError as exc:
                raise ConnectionError(
                    f"no OpenAI-compatible server answers at {self.url} ({type(exc).__name__}: {self._scrub(exc)}); "
                    f"{fix}"
                ) from None
        status = reply.status_code
        if status in (200, 503):
            return
        text = self._scrub(" ".join(reply.text[:300].split()))
        if status in (401, 403):
            raise ConnectionError(
                f"the endpoint at {self.url} refused the request (HTTP {status}: {text}); set its key in the "
                "variable named by api_key_env (default $OPENAI_API_KEY)"
            )
        raise ConnectionError(
            f"the endpoint at {self.url} rejected the request for model {self.model!r} at {path} (a one-token "
            f"request; HTTP {status}: {text}); check the model name (the server's GET /v1/models lists them) and "
            f"mode ({self.mode!r})"
        )

    # -- internals --------------------------------------------------------------------------------------------
    def _gate(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        with self._lock:
            gate = self._gates.get(loop)
            if gate is None:
                gate = self._gates[loop] = asyncio.Semaphore(self.concurrency)
            return gate

    async def _attempt(self, path: str, body: dict[str, Any], stop: Sequence[str]) -> Completion:
        import httpx

        try:
            response = await self._clients.get().post(self.url + path, json=body)
        except httpx.HTTPError as exc:
            raise self._scrubbed(attempt_failed_from_exception(exc, self.timeout)) from None
        if response.status_code != 200:
            raise self._scrubbed(attempt_failed_from_status(response.status_code, response.headers, response.text))
        try:
            return self._parse(response.json(), stop)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            reason = f"not an OpenAI-compatible reply: {response.text[:300]!r}"
            raise self._scrubbed(AttemptFailed("bad_response", reason, False)) from None

    def _parse(self, reply: dict[str, Any], stop: Sequence[str]) -> Completion:
        choice = reply["choices"][0]
        text = choice["text"] if self.mode == "completions" else (choice["message"].get("content") or "")
        if not isinstance(text, str):
            raise TypeError("the reply's text is not a string")
        matched = choice.get("stop_reason")
        if isinstance(matched, str) and matched in stop and not any(s in text for s in stop):
            text += matched  # the server removed the stop string it stopped at
        usage = reply.get("usage") or {}
        tokens = int(usage.get("completion_tokens") or 0)
        return Completion(text, tokens, "length" if choice.get("finish_reason") == "length" else "stop")

    def _scrub(self, text: object) -> str:
        text = str(text)
        return text.replace(self._key, "<key>") if self._key else text

    def _scrubbed(self, failure: AttemptFailed) -> AttemptFailed:
        failure.reason = self._scrub(failure.reason)
        return failure
