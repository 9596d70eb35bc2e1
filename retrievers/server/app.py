"""The retrieval service's HTTP app: Search-R1's ``POST /retrieve`` in front of any searchenv retriever.

Compared with Search-R1's server this one accepts every body the peers send (Search-R1/verl's
``{"queries", "topk", "return_scores"}`` and SkyRL's single ``{"query"}``, with ``topk``/``top_k``/``k``), answers
``return_scores: false`` with bare documents instead of an HTTP 500, keeps the event loop free under load
(searches run on a worker thread, merged by :class:`~searchenv.retrievers.batching.MicroBatcher`; only a
quick lone request on an idle server is searched on the loop), caches ``(query, k)`` answers, enforces body/query
limits and an optional bearer token, answers bad requests with a JSON 4xx that says what to fix, and returns each
passage's ``contents`` exactly as the corpus file stores it (:attr:`~searchenv.types.Passage.contents`, which the
corpus fills from the row it read; the server keeps no copy of the corpus of its own).

``POST /retrieve`` is answered as a bare ASGI endpoint in front of FastAPI's middleware, telemetry checks and
routing, which a one-query request would otherwise pass through both ways; ``/health``, the docs and every other
path go through FastAPI.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from searchenv.http.retry import RetrievalUnavailable
from searchenv.retrievers.batching import MicroBatcher
from searchenv.retrievers.remote.retriever import TOKEN_ENV
from searchenv.retrievers.remote.wire import Limits, WireError, encode_response, parse_request
from searchenv.retrievers.server.answer_cache import QueryCache
from searchenv.types import ComputesInProcess, Passage, Retriever, has_flag

if TYPE_CHECKING:  # fastapi is imported by create_app only, so `searchenv --help` works without the server extra
    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.responses import JSONResponse

#: ASGI's three callables' types, spelled out so this module needs no ASGI package at import time.
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

__all__ = ["ServerConfig", "build_retriever", "create_app"]

log = logging.getLogger("searchenv.server")


@dataclass
class ServerConfig:
    """Everything a server process needs to build its retriever and enforce its limits (JSON-serialisable).

    Attributes:
        retriever: a name from ``searchenv.retrievers.RETRIEVERS`` or ``"package.module:factory"``, a callable
            taking ``(corpus, **options)`` — so custom engines can be served without registering them.
        corpus: path of the jsonl corpus (``{"id", "contents"}`` rows).
        index_dir: passed to the engine as ``index_dir`` when set.
        options: further engine keyword arguments (``seed``, ``engine``, ...).
        topk: ``k`` used when a request gives none.
        max_topk, max_queries, max_query_chars, max_body_bytes: request limits (answered with 413/422).
        cache_size: LRU entries keyed on ``(query, k)``; 0 disables the cache.
        batch_wait_ms: how long the batcher waits for more requests once it has seen concurrent traffic.
        max_batch_queries: most queries merged into one retriever call.
        inline_budget_ms: a request that finds the server idle is searched on the event loop, skipping the hand-off
            to the worker thread, when the engine computes in-process (``compute_only``) and its last call took at
            most this long (see :class:`~searchenv.retrievers.batching.MicroBatcher`); 0 turns it off.
        token: bearer token required on ``/retrieve``; ``None`` leaves the endpoint open.
        hold_while_loading_s: a request that arrives while the engine is still loading waits up to this long for
            it before being answered 503 + ``Retry-After`` (so clients rarely see a loading worker at all).
    """

    retriever: str = "random"
    corpus: str = ""
    index_dir: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    topk: int = 3
    max_topk: int = 100
    max_queries: int = 8192
    max_query_chars: int = 4096
    max_body_bytes: int = 16 * 1024 * 1024
    cache_size: int = 100_000
    batch_wait_ms: float = 2.0
    max_batch_queries: int = 1024
    inline_budget_ms: float = 1.0
    token: str | None = None
    hold_while_loading_s: float = 5.0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServerConfig:
        return cls(**json.loads(text))


def build_retriever(config: ServerConfig) -> Retriever:
    """Load the corpus and build the engine the configuration names (slow for big indexes: runs off-loop).

    ``config.corpus`` may be empty for engines that search no corpus of ours (``web``). One private instance
    per server process (``shared=False``), freed when dropped.
    """
    from searchenv.components import build_retriever as build

    options = dict(config.options)
    if config.index_dir is not None:
        options["index_dir"] = config.index_dir
    return build(config.retriever, config.corpus or None, options, shared=False)


class _RequestError(Exception):
    """A request the server refuses; becomes a JSON ``{"error", "detail"}`` answer with ``status``."""

    def __init__(self, status: int, code: str, detail: str, headers: dict[str, str] | None = None):
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = headers or {}


class _ClientGone(Exception):
    """The client disconnected before its request body arrived: there is nobody to answer."""


def _parse_request(body: bytes, config: ServerConfig) -> tuple[list[str], int, bool]:
    """Validate a ``/retrieve`` body under this server's limits (:func:`.wire.parse_request`)."""
    limits = Limits(config.topk, config.max_topk, config.max_queries, config.max_query_chars)
    try:
        return parse_request(body, limits)
    except WireError as error:
        raise _RequestError(error.status, error.code, error.detail) from None


class _State:
    """Per-process server state: the retriever (once loaded), its batcher and cache, and readiness."""

    def __init__(
        self, config: ServerConfig, retriever: Retriever | None, on_load_failure: Callable[[str], None] | None
    ):
        self.config = config
        self.retriever = retriever
        self.error: str | None = None
        self.started = time.time()
        self.cache = QueryCache(config.cache_size)
        # The engine runs on one worker thread (or, see MicroBatcher, on the loop for a quick lone request).
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="searchenv-retrieve")
        self.batcher: MicroBatcher[str, list[Passage]] = MicroBatcher(
            self._search_on_thread,
            max_wait_s=config.batch_wait_ms / 1000,
            max_items=config.max_batch_queries,
            run_inline=self._search,
        )
        self.corpus_size: int | None = None
        self.settled: asyncio.Event | None = None  # set once loading succeeded or failed
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_load_failure = on_load_failure
        if retriever is not None:
            self._ready(retriever)

    def _search(self, k: int, queries: list[str]) -> list[list[Passage]]:
        """The engine's answer, one list of at most ``k`` passages per query, or an error that says what is wrong."""
        assert self.retriever is not None
        results = self.retriever.search(queries, k)
        if len(results) != len(queries):
            raise RuntimeError(f"the retriever returned {len(results)} result lists for {len(queries)} queries")
        return [list(r[:k]) for r in results]

    async def _search_on_thread(self, k: int, queries: list[str]) -> list[list[Passage]]:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._search, k, queries)

    async def stop(self) -> None:
        """At shutdown: stop the merged search in progress and the engine's thread."""
        await self.batcher.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _ready(self, retriever: Retriever) -> None:
        corpus = getattr(retriever, "corpus", None)
        self.corpus_size = len(corpus) if corpus is not None else None
        if has_flag(retriever, ComputesInProcess):
            # One search before the server says it is ready: the native engine's numba kernels compile on their
            # first call (about 10 s with a cold cache), which would otherwise time out the first client.
            retriever.search(["searchenv warm-up"], 1)
            self.batcher.inline_budget_s = max(0.0, self.config.inline_budget_ms / 1000)
        self.retriever = retriever

    def start_loading(self) -> None:
        """Called on the event loop at start-up: build the retriever on a thread so /health answers meanwhile."""
        self._loop = asyncio.get_running_loop()
        self.settled = asyncio.Event()
        if self.retriever is not None:
            self.settled.set()
        else:
            threading.Thread(target=self._load, name="searchenv-load", daemon=True).start()

    def _load(self) -> None:
        try:
            started = time.perf_counter()
            self._ready(build_retriever(self.config))
            log.info("retriever %r ready in %.1fs", self.config.retriever, time.perf_counter() - started)
        except Exception as exc:  # noqa: BLE001 - reported on /health and /retrieve, and to the runner
            self.error = f"{type(exc).__name__}: {exc}"
            log.error("could not build retriever %r: %s", self.config.retriever, self.error)
            if self._on_load_failure is not None:
                self._on_load_failure(self.error)
        finally:
            assert self._loop is not None and self.settled is not None
            try:
                self._loop.call_soon_threadsafe(self.settled.set)
            except RuntimeError:  # the server stopped while the engine was loading: nobody is waiting
                pass

    async def wait_until_settled(self) -> None:
        """Hold a request while the engine loads, up to ``hold_while_loading_s``."""
        if self.settled is None or self.settled.is_set():
            return
        try:
            await asyncio.wait_for(self.settled.wait(), self.config.hold_while_loading_s)
        except asyncio.TimeoutError:
            pass

    async def answer(self, scope: Scope, receive: Receive) -> bytes:
        """The JSON body answering one ``POST /retrieve``; raises :class:`_RequestError` for every refusal."""
        config = self.config
        if config.token is not None:
            sent = _header(scope, b"authorization") or ""
            if not hmac.compare_digest(sent.encode(), f"Bearer {config.token}".encode()):
                raise _RequestError(
                    401, "unauthorized", "send 'Authorization: Bearer <token>'", {"WWW-Authenticate": "Bearer"}
                )
        queries, k, with_scores = _parse_request(await _read_body(scope, receive, config.max_body_bytes), config)
        if self.retriever is None:
            await self.wait_until_settled()
        if self.retriever is None:
            if self.error:
                raise _RequestError(503, "retriever_failed", f"the retriever could not be built: {self.error}")
            raise _RequestError(503, "loading", "the index is still loading; retry shortly", {"Retry-After": "1"})
        results: list[list[Passage] | None] = [self.cache.get(q, k) for q in queries]
        missing = list(dict.fromkeys(q for q, r in zip(queries, results, strict=True) if r is None))
        if missing:
            try:
                found = dict(zip(missing, await self.batcher.submit(missing, k), strict=True))
            except RetrievalUnavailable as exc:  # the engine's own backend (a web API) is away: retry later
                retry = {"Retry-After": "1"} if exc.retryable else None
                raise _RequestError(503 if exc.retryable else 502, f"backend_{exc.kind}", str(exc), retry) from None
            except Exception as exc:  # noqa: BLE001 - the engine failed on this request only
                log.warning("retriever failed on a request of %d queries: %r", len(queries), exc)
                raise _RequestError(
                    500, "retriever_error", f"the retriever failed on this request: {type(exc).__name__}: {exc}"
                ) from None
            for query, hits in found.items():
                self.cache.put(query, k, hits)
            results = [r if r is not None else found[q] for q, r in zip(queries, results, strict=True)]
        return encode_response(results, with_scores)  # type: ignore[arg-type]

    def engine(self) -> str:
        if self.retriever is None:
            return self.config.retriever
        return str(getattr(self.retriever, "name", type(self.retriever).__name__))

    def health(self) -> dict[str, Any]:
        c = self.config
        return {
            "status": "ok" if self.retriever is not None else ("error" if self.error else "loading"),
            "ready": self.retriever is not None,
            "error": self.error,
            "engine": self.engine(),
            "corpus": {"path": c.corpus or None, "size": self.corpus_size},
            "cache": self.cache.stats(),
            "batching": self.batcher.stats(),
            "limits": {
                "default_topk": c.topk,
                "max_topk": c.max_topk,
                "max_queries": c.max_queries,
                "max_query_chars": c.max_query_chars,
                "max_body_bytes": c.max_body_bytes,
            },
            "auth": c.token is not None,
            "pid": os.getpid(),
            "uptime_s": round(time.time() - self.started, 3),
        }


def _header(scope: Scope, name: bytes) -> str | None:
    """A request header by its lower-case name (ASGI lower-cases them)."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


async def _read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes before reading them all."""
    declared = _header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _RequestError(
            413, "body_too_large", f"the body has {declared} bytes; the limit is {limit} (--max-body-bytes)"
        )
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _RequestError(413, "body_too_large", f"the body exceeds {limit} bytes (--max-body-bytes)")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _is_retrieve(scope: Scope) -> bool:
    """Whether an HTTP request is for ``/retrieve`` (also under a ``root_path``, as Ray Serve's route prefixes)."""
    path = scope["path"]
    return path == "/retrieve" or path == f"{scope.get('root_path', '')}/retrieve"


async def _respond(state: _State, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer one HTTP request to ``/retrieve`` on the bare ASGI interface, errors included."""
    headers: dict[str, str] = {}
    try:
        if scope["method"] != "POST":
            raise _RequestError(
                405, "method_not_allowed", f"/retrieve takes POST, not {scope['method']}", {"Allow": "POST"}
            )
        status, body = 200, await state.answer(scope, receive)
    except _ClientGone:
        return
    except _RequestError as exc:
        status, body, headers = exc.status, _error_json(exc.code, exc.detail), exc.headers
    except Exception as exc:  # noqa: BLE001 - a bug answers this request with a 500, the server goes on
        log.exception("unexpected error on /retrieve")
        status, body = 500, _error_json("internal_error", f"{type(exc).__name__}: {exc}")
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(name.lower().encode(), value.encode()) for name, value in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _error_json(code: str, detail: str) -> bytes:
    return json.dumps({"error": code, "detail": detail}).encode()


def create_app(
    config: ServerConfig | None = None,
    *,
    retriever: Retriever | None = None,
    on_load_failure: Callable[[str], None] | None = None,
) -> FastAPI:
    """Build the FastAPI app.

    Args:
        config: limits, cache and batching settings, and (when ``retriever`` is not given) what to load.
        retriever: serve this ready object instead of building one from ``config`` (tests, notebooks).
        on_load_failure: called with the cause when the retriever cannot be built (the runner uses it to exit
            non-zero instead of answering 503 forever).

    Without ``retriever`` the engine is built on a thread when the app starts; a request arriving meanwhile
    waits up to ``config.hold_while_loading_s`` for it, then gets 503 with ``Retry-After``; ``/health`` reports
    ``"ready": false`` until then.
    """
    from fastapi import FastAPI
    from starlette.responses import JSONResponse

    config = config or ServerConfig()
    if config.token is None and os.environ.get(TOKEN_ENV):
        config.token = os.environ[TOKEN_ENV]
    state = _State(config, retriever, on_load_failure)

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # type: ignore[no-untyped-def]
        state.start_loading()
        yield
        await state.stop()

    class RetrievalApp(FastAPI):
        """FastAPI, except that ``/retrieve`` is answered before FastAPI's middleware and routing."""

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http" and _is_retrieve(scope):
                await _respond(state, scope, receive, send)
            else:
                await super().__call__(scope, receive, send)

    app = RetrievalApp(title="searchenv retrieval service", version="1", lifespan=lifespan)
    app.state.searchenv = state

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        return JSONResponse({"error": "internal_error", "detail": f"{type(exc).__name__}: {exc}"}, status_code=500)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse(state.health(), status_code=200 if state.retriever is not None else 503)

    app.add_exception_handler(Exception, unexpected)
    app.add_route("/health", health, methods=["GET"])
    return app
