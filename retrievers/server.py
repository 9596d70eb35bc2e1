"""Retrieval as a service: any searchenv retriever behind Search-R1's ``POST /retrieve`` HTTP API.

Trainers (verl, SkyRL, Search-R1's own loop) expect retrieval on a URL, so one warm index serves many
rollout workers instead of each loading its own copy. Compared with Search-R1's server this one

* accepts every body the peers send: Search-R1/verl's ``{"queries": [...], "topk": k, "return_scores": b}``
  and SkyRL's single ``{"query": q}``, with ``topk``/``top_k``/``k``, and answers ``return_scores: false``
  with bare documents instead of an HTTP 500;
* never blocks the event loop: searches run on a worker thread, and concurrent requests are merged into one
  retriever call by a small micro-batcher (engines are much faster per query on batches);
* caches ``(query, k)`` answers in an LRU, because GRPO groups send the same question many times;
* binds 127.0.0.1 by default, limits body size, queries per request and query length, checks an optional
  bearer token, and answers bad requests with a JSON 4xx that says what to fix.

Run it with ``searchenv serve`` (see :func:`add_serve_parser`) or ``python -m searchenv.retrievers.server``.
Several uvicorn worker processes can serve one index: each builds its own retriever from the same index
files, so engines that memory-map their index share its pages through the OS page cache.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hmac
import json
import logging
import math
import os
import socket
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from searchenv.retrievers.remote import TOKEN_ENV
from searchenv.types import Passage, Retriever

if TYPE_CHECKING:  # fastapi is imported by create_app only, so `searchenv --help` works without the server extra
    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

__all__ = [
    "CONFIG_ENV",
    "TOKEN_ENV",
    "MicroBatcher",
    "QueryCache",
    "ServerConfig",
    "add_serve_parser",
    "app_from_env",
    "build_retriever",
    "create_app",
    "free_port",
    "main",
    "run_serve",
    "serve",
    "serve_in_thread",
    "spawn_server",
]

log = logging.getLogger("searchenv.server")

#: Environment variable through which :func:`serve` hands the configuration to uvicorn worker processes.
CONFIG_ENV = "SEARCHENV_SERVE_CONFIG"

_TOPK_KEYS = ("topk", "top_k", "k")


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
        token: bearer token required on ``/retrieve``; ``None`` leaves the endpoint open.
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
    token: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ServerConfig:
        return cls(**json.loads(text))


def build_retriever(config: ServerConfig) -> Retriever:
    """Load the corpus and build the engine the configuration names (slow for big indexes: runs off-loop)."""
    from searchenv.components import build_retriever as build

    options = dict(config.options)
    if config.index_dir is not None:
        options["index_dir"] = config.index_dir
    return build(config.retriever, config.corpus, options, shared=False)  # one per process, freed when dropped


class QueryCache:
    """A least-recently-used map ``(query, k) -> passages`` with hit statistics.

    Only the event-loop thread touches it, so it needs no lock. Passages are frozen dataclasses, so cached
    lists are shared between answers safely.
    """

    def __init__(self, capacity: int):
        self.capacity = max(0, int(capacity))
        self._data: OrderedDict[tuple[str, int], list[Passage]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, query: str, k: int) -> list[Passage] | None:
        if not self.capacity:
            self.misses += 1
            return None
        found = self._data.get((query, k))
        if found is None:
            self.misses += 1
            return None
        self._data.move_to_end((query, k))
        self.hits += 1
        return found

    def put(self, query: str, k: int, passages: list[Passage]) -> None:
        if not self.capacity:
            return
        self._data[(query, k)] = passages
        self._data.move_to_end((query, k))
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def stats(self) -> dict[str, Any]:
        looked_up = self.hits + self.misses
        return {
            "size": len(self._data),
            "capacity": self.capacity,
            "hits": self.hits,
            "misses": self.misses,
            "hit_rate": round(self.hits / looked_up, 4) if looked_up else 0.0,
        }


@dataclass
class _Job:
    queries: list[str]
    k: int
    future: asyncio.Future[list[list[Passage]]]


class MicroBatcher:
    """Merges concurrent requests into one ``retriever.search`` call on a single worker thread.

    One batch runs at a time; requests that arrive meanwhile queue up and form the next batch, so batching
    costs nothing at low load. Once a batch has held more than one request (concurrent clients exist), the
    batcher also waits up to ``max_wait_s`` for stragglers. Within a batch, requests are grouped by ``k`` and
    duplicate queries are searched once. If a merged call fails, each request is retried alone so one bad
    query fails only its own request.
    """

    def __init__(
        self, search: Callable[[Sequence[str], int], list[list[Passage]]], max_wait_s: float, max_queries: int
    ):
        self._search = search
        self.max_wait_s = max(0.0, float(max_wait_s))
        self.max_queries = max(1, int(max_queries))
        self._queue: asyncio.Queue[_Job] | None = None
        self._task: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="searchenv-retrieve")
        self._concurrent = False
        self.batches = 0
        self.requests = 0
        self.queries = 0

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="searchenv-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, queries: list[str], k: int) -> list[list[Passage]]:
        """Search ``queries`` at ``k`` as part of the next batch; raises what the engine raised."""
        if self._queue is None:
            raise RuntimeError("MicroBatcher.start() was not called")
        future: asyncio.Future[list[list[Passage]]] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Job(queries, k, future))
        return await future

    def stats(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "requests": self.requests,
            "queries": self.queries,
            "mean_requests_per_batch": round(self.requests / self.batches, 3) if self.batches else 0.0,
            "max_wait_ms": self.max_wait_s * 1000,
        }

    async def _run(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            jobs = [await self._queue.get()]
            n = len(jobs[0].queries)
            deadline = loop.time() + (self.max_wait_s if self._concurrent else 0.0)
            while n < self.max_queries:
                if self._queue.empty():
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    try:
                        job = await asyncio.wait_for(self._queue.get(), remaining)
                    except asyncio.TimeoutError:
                        break
                else:
                    job = self._queue.get_nowait()
                jobs.append(job)
                n += len(job.queries)
            self._concurrent = len(jobs) > 1
            self.batches += 1
            self.requests += len(jobs)
            self.queries += n
            by_k: dict[int, list[_Job]] = {}
            for job in jobs:
                by_k.setdefault(job.k, []).append(job)
            for k, group in by_k.items():
                try:
                    await self._execute(group, k)
                except Exception as exc:  # a bug here must fail these requests, not stop the batcher
                    log.exception("micro-batch failed")
                    for job in group:
                        _settle(job.future, exc=exc)

    async def _execute(self, jobs: list[_Job], k: int) -> None:
        unique = list(dict.fromkeys(q for job in jobs for q in job.queries))
        try:
            found = dict(zip(unique, await self._call(unique, k), strict=True))
        except Exception as exc:  # noqa: BLE001 - isolate the failing request below
            if len(jobs) == 1:
                _settle(jobs[0].future, exc=exc)
                return
            for job in jobs:  # one bad query must not fail its neighbours' requests
                try:
                    _settle(job.future, result=await self._call(job.queries, k))
                except Exception as job_exc:  # noqa: BLE001
                    _settle(job.future, exc=job_exc)
            return
        for job in jobs:
            _settle(job.future, result=[found[q] for q in job.queries])

    async def _call(self, queries: list[str], k: int) -> list[list[Passage]]:
        results = await asyncio.get_running_loop().run_in_executor(self._executor, self._search, queries, k)
        if len(results) != len(queries):
            raise RuntimeError(f"the retriever returned {len(results)} result lists for {len(queries)} queries")
        return [list(r[:k]) for r in results]


def _settle(future: asyncio.Future[Any], result: Any = None, exc: BaseException | None = None) -> None:
    if future.done():  # the client went away and its request was cancelled
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


class _RequestError(Exception):
    """A request the server refuses; becomes a JSON ``{"error", "detail"}`` answer with ``status``."""

    def __init__(self, status: int, code: str, detail: str):
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail


def _parse_request(body: bytes, config: ServerConfig) -> tuple[list[str], int, bool]:
    """Validate a ``/retrieve`` body; returns ``(queries, k, return_scores)`` (a single ``query`` becomes one)."""
    example = '{"queries": ["who wrote hamlet"], "topk": 3, "return_scores": true}'
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _RequestError(400, "invalid_json", f"the body is not JSON ({exc}); send e.g. {example}") from None
    if not isinstance(payload, dict):
        raise _RequestError(400, "invalid_body", f"the body must be a JSON object such as {example}")
    if ("queries" in payload) == ("query" in payload):
        raise _RequestError(
            422, "missing_queries", f"give exactly one of 'queries' (a list) or 'query'; e.g. {example}"
        )
    single = "query" in payload
    queries = [payload["query"]] if single else payload["queries"]
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        key = "query" if single else "queries"
        expected = "a string" if single else "a list of strings"
        raise _RequestError(422, "invalid_queries", f"'{key}' must be {expected}")
    if len(queries) > config.max_queries:
        raise _RequestError(
            413,
            "too_many_queries",
            f"{len(queries)} queries in one request; this server accepts at most "
            f"{config.max_queries} (split the batch or start the server with a larger --max-queries)",
        )
    longest = max((len(q) for q in queries), default=0)
    if longest > config.max_query_chars:
        raise _RequestError(
            413,
            "query_too_long",
            f"a query has {longest} characters; the limit is {config.max_query_chars} (--max-query-chars)",
        )
    given = [key for key in _TOPK_KEYS if payload.get(key) is not None]
    if len(given) > 1 and len({json.dumps(payload[key]) for key in given}) > 1:
        raise _RequestError(422, "conflicting_topk", f"{' and '.join(given)} disagree; send one of them")
    k = payload[given[0]] if given else config.topk
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= config.max_topk:
        raise _RequestError(422, "invalid_topk", f"topk must be an integer in [1, {config.max_topk}], got {k!r}")
    scores = payload.get("return_scores", False)
    if not isinstance(scores, bool):
        raise _RequestError(422, "invalid_return_scores", f"return_scores must be true or false, got {scores!r}")
    return queries, k, scores


@functools.lru_cache(maxsize=1 << 18)
def _document_json(passage_id: str, title: str, text: str) -> str:
    """A passage's ``{"id", "contents"}`` JSON, memoised: popular passages are encoded once, not per answer."""
    return json.dumps({"id": passage_id, "contents": Passage(passage_id, title, text).contents}, ensure_ascii=False)


def _score_json(score: float) -> str:
    score = float(score)
    return repr(score) if math.isfinite(score) else json.dumps(score)  # repr is JSON for finite floats, and fast


def _encode(results: list[list[Passage]], with_scores: bool) -> bytes:
    """The response body, assembled from memoised document fragments (JSON-encoding dominated the CPU cost)."""
    lists = []
    for hits in results:
        if with_scores:
            items = [
                f'{{"document": {_document_json(p.id, p.title, p.text)}, "score": {_score_json(p.score)}}}'
                for p in hits
            ]
        else:
            items = [_document_json(p.id, p.title, p.text) for p in hits]
        lists.append("[" + ", ".join(items) + "]")
    return ('{"result": [' + ", ".join(lists) + "]}").encode()


class _State:
    """Per-process server state: the retriever (once loaded), its batcher and cache, and readiness."""

    def __init__(self, config: ServerConfig, retriever: Retriever | None):
        self.config = config
        self.retriever = retriever
        self.error: str | None = None
        self.started = time.time()
        self.cache = QueryCache(config.cache_size)
        self.batcher = MicroBatcher(self._search, config.batch_wait_ms / 1000, config.max_batch_queries)
        self.corpus_size: int | None = None
        if retriever is not None:
            self._ready(retriever)

    def _search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        assert self.retriever is not None
        return self.retriever.search(queries, k)

    def _ready(self, retriever: Retriever) -> None:
        self.retriever = retriever
        corpus = getattr(retriever, "corpus", None)
        self.corpus_size = len(corpus) if corpus is not None else None

    def load(self) -> None:
        """Build the retriever (runs on a thread so /health answers while a big index loads)."""
        try:
            started = time.perf_counter()
            self._ready(build_retriever(self.config))
            log.info("retriever %r ready in %.1fs", self.config.retriever, time.perf_counter() - started)
        except Exception as exc:  # noqa: BLE001 - reported on /health and /retrieve
            self.error = f"{type(exc).__name__}: {exc}"
            log.error("could not build retriever %r: %s", self.config.retriever, self.error)

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


async def _read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes before reading them all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _RequestError(
            413, "body_too_large", f"the body has {declared} bytes; the limit is {limit} (--max-body-bytes)"
        )
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _RequestError(413, "body_too_large", f"the body exceeds {limit} bytes (--max-body-bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(config: ServerConfig | None = None, *, retriever: Retriever | None = None) -> FastAPI:
    """Build the FastAPI app.

    Args:
        config: limits, cache and batching settings, and (when ``retriever`` is not given) what to load.
        retriever: serve this ready object instead of building one from ``config`` (tests, notebooks).

    Without ``retriever`` the engine is built on a thread when the app starts; until it is ready
    ``/retrieve`` answers 503 with ``Retry-After`` and ``/health`` reports ``"ready": false``.
    """
    from fastapi import FastAPI
    from starlette.responses import JSONResponse, Response

    config = config or ServerConfig()
    if config.token is None and os.environ.get(TOKEN_ENV):
        config.token = os.environ[TOKEN_ENV]
    state = _State(config, retriever)

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # type: ignore[no-untyped-def]
        state.batcher.start()
        if state.retriever is None:
            threading.Thread(target=state.load, name="searchenv-load", daemon=True).start()
        yield
        await state.batcher.stop()

    app = FastAPI(title="searchenv retrieval service", version="1", lifespan=lifespan)
    app.state.searchenv = state

    def error(status: int, code: str, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse({"error": code, "detail": detail}, status_code=status, headers=headers)

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        return error(500, "internal_error", f"{type(exc).__name__}: {exc}")

    async def health(request: Request) -> JSONResponse:
        return JSONResponse(state.health(), status_code=200 if state.retriever is not None else 503)

    async def retrieve(request: Request) -> Response:
        if config.token is not None:
            sent = request.headers.get("authorization", "")
            if not hmac.compare_digest(sent.encode(), f"Bearer {config.token}".encode()):
                return error(
                    401, "unauthorized", "send 'Authorization: Bearer <token>'", {"WWW-Authenticate": "Bearer"}
                )
        try:
            queries, k, with_scores = _parse_request(await _read_body(request, config.max_body_bytes), config)
        except _RequestError as exc:
            return error(exc.status, exc.code, exc.detail)
        if state.retriever is None:
            if state.error:
                return error(503, "retriever_failed", f"the retriever could not be built: {state.error}")
            return error(503, "loading", "the index is still loading; retry shortly", {"Retry-After": "1"})
        results: list[list[Passage] | None] = [state.cache.get(q, k) for q in queries]
        missing = list(dict.fromkeys(q for q, r in zip(queries, results, strict=True) if r is None))
        if missing:
            try:
                found = dict(zip(missing, await state.batcher.submit(missing, k), strict=True))
            except Exception as exc:  # noqa: BLE001 - the engine failed on this request only
                log.warning("retriever failed on a request of %d queries: %r", len(queries), exc)
                return error(
                    500, "retriever_error", f"the retriever failed on this request: {type(exc).__name__}: {exc}"
                )
            for query, hits in found.items():
                state.cache.put(query, k, hits)
            results = [r if r is not None else found[q] for q, r in zip(queries, results, strict=True)]
        return Response(_encode(results, with_scores), media_type="application/json")  # type: ignore[arg-type]

    # Plain Starlette routes: the endpoints read the raw body themselves (size limit first, then clear errors),
    # so FastAPI's validation layer would only add cost.
    app.add_exception_handler(Exception, unexpected)
    app.add_route("/health", health, methods=["GET"])
    app.add_route("/retrieve", retrieve, methods=["POST"])
    return app


def app_from_env() -> FastAPI:
    """App factory for uvicorn worker processes: reads :class:`ServerConfig` JSON from ``$SEARCHENV_SERVE_CONFIG``."""
    text = os.environ.get(CONFIG_ENV)
    if not text:
        raise RuntimeError(f"${CONFIG_ENV} is not set; start the server with `searchenv serve` or serve()")
    return create_app(ServerConfig.from_json(text))


def serve(
    config: ServerConfig, host: str = "127.0.0.1", port: int = 8000, workers: int = 1, log_level: str = "info"
) -> None:
    """Run the service until interrupted (blocking).

    With ``workers > 1`` uvicorn starts that many processes on one socket; each builds its retriever from the
    same files (see module docstring for what they share).
    """
    import uvicorn

    os.environ[CONFIG_ENV] = config.to_json()
    uvicorn.run(
        "searchenv.retrievers.server:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        access_log=False,
    )


@contextmanager
def serve_in_thread(app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a background thread; yields its base URL (``port=0`` picks a free port).

    For notebooks and tests, where a second process is a nuisance; production serving uses :func:`serve`.
    """
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, name="searchenv-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the in-thread server did not start on {host}:{port}")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (for child servers that must be told their port)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def spawn_server(
    args: Sequence[str],
    port: int | None = None,
    host: str = "127.0.0.1",
    env: dict[str, str] | None = None,
    startup_timeout: float = 120.0,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``python -m searchenv.retrievers.server ARGS`` in a child process and wait until it is ready.

    Returns the process and its base URL. The child's output goes to a temporary file (a pipe nobody reads
    would stall a long-running server once full) and is quoted in the ``RuntimeError`` raised when the child
    exits, reports that its engine failed, or is not ready within ``startup_timeout`` seconds. The caller owns
    the process (terminate it when done).
    """
    import tempfile

    import httpx

    port = free_port(host) if port is None else port
    command = [sys.executable, "-m", "searchenv.retrievers.server", *args, "--host", host, "--port", str(port)]
    log_file = tempfile.TemporaryFile()  # noqa: SIM115 - the child keeps writing to it after we return
    process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    url = f"http://{host}:{port}"

    def fail(why: str) -> RuntimeError:
        if process.poll() is None:
            process.kill()
            process.wait()
        log_file.seek(0)
        output = log_file.read().decode(errors="replace")[-4000:]
        return RuntimeError(f"server {why}: {' '.join(command)}\n{output}")

    deadline = time.monotonic() + startup_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise fail(f"exited with status {process.returncode}")
        try:
            health = httpx.get(f"{url}/health", timeout=2.0)
            if health.status_code == 200:
                return process, url
            if health.json().get("status") == "error":
                raise fail(f"could not build its retriever ({health.json().get('error')})")
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.05)
    raise fail(f"not ready after {startup_timeout}s")


def _option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--option expects KEY=VALUE (e.g. seed=1 or engine=bm25s), got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def add_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``serve`` subcommand to a ``parser.add_subparsers()`` object; :func:`run_serve` runs it."""
    defaults = ServerConfig()
    p = subparsers.add_parser(
        "serve",
        help="serve a retriever over HTTP (Search-R1's POST /retrieve API)",
        description="Serve a retriever over HTTP with Search-R1's POST /retrieve API, plus GET /health.",
    )
    p.add_argument(
        "--retriever", default="random", help="engine name (random, bm25, e5-exact, e5-hnsw) or module:factory"
    )
    p.add_argument("--corpus", required=True, help="jsonl corpus of {'id', 'contents'} rows")
    p.add_argument("--index", dest="index_dir", default=None, help="index directory passed to the engine as index_dir")
    p.add_argument(
        "--option",
        dest="options",
        action="append",
        type=_option,
        default=[],
        metavar="KEY=VALUE",
        help="extra engine option, repeatable; VALUE is parsed as JSON when it can be",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; use 0.0.0.0 to expose it)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes sharing the port")
    p.add_argument("--topk", type=int, default=defaults.topk, help="k when a request gives none")
    p.add_argument("--max-topk", type=int, default=defaults.max_topk)
    p.add_argument("--max-queries", type=int, default=defaults.max_queries, help="most queries per request")
    p.add_argument("--max-query-chars", type=int, default=defaults.max_query_chars)
    p.add_argument("--max-body-bytes", type=int, default=defaults.max_body_bytes)
    p.add_argument("--cache-size", type=int, default=defaults.cache_size, help="LRU (query, k) entries; 0 disables")
    p.add_argument(
        "--batch-wait-ms",
        type=float,
        default=defaults.batch_wait_ms,
        help="how long to gather concurrent requests into one engine call",
    )
    p.add_argument("--max-batch-queries", type=int, default=defaults.max_batch_queries)
    p.add_argument("--token", default=None, help=f"require 'Authorization: Bearer TOKEN' (or set ${TOKEN_ENV})")
    p.add_argument("--log-level", default="info")
    p.add_argument("--ray", action="store_true", help="serve through Ray Serve (pip install 'searchenv[ray]')")
    p.add_argument("--replicas", type=int, default=1, help="Ray Serve replicas (with --ray)")
    p.add_argument("--ray-address", default=None, help="existing Ray cluster to join (with --ray; default: start one)")
    p.add_argument("--replica-cpus", type=float, default=1.0, help="CPUs reserved per Ray replica")
    p.add_argument("--replica-gpus", type=float, default=0.0, help="GPUs reserved per Ray replica (dense retrieval)")
    p.set_defaults(handler=run_serve)
    return p


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """Turn parsed ``serve`` arguments into a :class:`ServerConfig`, failing fast on a missing corpus."""
    if not Path(args.corpus).is_file():
        raise SystemExit(f"searchenv serve: corpus file not found: {args.corpus}")
    for name in ("port", "workers", "topk", "max_topk", "max_queries", "max_query_chars", "max_body_bytes"):
        if getattr(args, name) < (0 if name == "port" else 1):
            raise SystemExit(f"searchenv serve: --{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    return ServerConfig(
        retriever=args.retriever,
        corpus=str(Path(args.corpus).resolve()),
        index_dir=args.index_dir,
        options=dict(args.options),
        topk=args.topk,
        max_topk=args.max_topk,
        max_queries=args.max_queries,
        max_query_chars=args.max_query_chars,
        max_body_bytes=args.max_body_bytes,
        cache_size=args.cache_size,
        batch_wait_ms=args.batch_wait_ms,
        max_batch_queries=args.max_batch_queries,
        token=args.token or os.environ.get(TOKEN_ENV) or None,
    )


def run_serve(args: argparse.Namespace) -> int:
    """Run ``searchenv serve`` with parsed arguments (blocking); returns the exit status."""
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    config = config_from_args(args)
    if config.index_dir is not None and (args.ray or args.workers > 1):
        # Build (or verify) the index once here, so that N processes do not race to build it into one directory;
        # they then only open it (memory-mapped where the engine supports it).
        log.info("preparing the index in %s before starting the workers", config.index_dir)
        build_retriever(config)  # discarded at once: only the files on disk matter
    if args.ray:
        from searchenv.retrievers.ray_serve import serve_with_ray

        serve_with_ray(
            config,
            host=args.host,
            port=args.port,
            replicas=args.replicas,
            address=args.ray_address,
            num_cpus=args.replica_cpus,
            num_gpus=args.replica_gpus,
        )
    else:
        serve(config, host=args.host, port=args.port, workers=args.workers, log_level=args.log_level)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m searchenv.retrievers.server")
    sub = parser.add_subparsers(dest="command")
    add_serve_parser(sub)
    args = parser.parse_args(["serve", *(sys.argv[1:] if argv is None else argv)])
    return run_serve(args)


if __name__ == "__main__":
    sys.exit(main())
