"""The retrieval app's own CPU per one-query request, in process: no sockets, no client, no uvicorn.

Drives ``POST /retrieve`` through the ASGI interface of :func:`~searchenv.retrievers.server.app.create_app`, one
request at a time with an idle gap before each (as one client sending back to back leaves the server), and reports
the process CPU per request (event loop and worker thread together) with lone requests searched on the event loop
(the default) and with that turned off (``--inline-budget-ms 0``: every search goes to the worker thread and back).
Beside them: the engine's ``search`` alone on the same questions. Apps alternate over ``--rounds``; the best round
of each is reported (CPU time barely moves with load, but caches and frequency do).

    python bench/bench_server_app.py --index /tmp/service-bench/searchenv-bm25
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from searchenv.corpus import Corpus
from searchenv.retrievers import make_retriever
from searchenv.retrievers.server.app import ServerConfig, create_app

DATA = Path(os.environ.get("SEARCHENV_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


async def post(app: Any, body: bytes) -> None:
    """One ``POST /retrieve`` through the app's ASGI interface; fails unless it is answered 200."""
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = {"type": "http", "method": "POST", "path": "/retrieve", "root_path": "", "headers": headers}
    await app(scope, receive, send)
    if sent[0]["status"] != 200:
        raise RuntimeError(f"/retrieve answered {sent[0]['status']}: {sent[1]['body'][:300]!r}")


async def cpu_per_request(app: Any, bodies: list[bytes], gap_s: float) -> float:
    """Process CPU µs per request over ``bodies``, each sent after ``gap_s`` of idleness."""
    spent = 0.0
    for body in bodies:
        await asyncio.sleep(gap_s)
        started = time.process_time()
        await post(app, body)
        spent += time.process_time() - started
    return 1e6 * spent / len(bodies)


async def run(args: argparse.Namespace) -> None:
    questions = [json.loads(line)["question"] for line in Path(args.questions).open(encoding="utf-8")]
    corpus = Corpus.from_jsonl(args.corpus)
    engine = make_retriever("bm25", corpus, index_dir=args.index, show_progress=False)
    bodies = [json.dumps({"queries": [q], "topk": args.k, "return_scores": True}).encode() for q in questions]
    budgets = {"searched on the event loop (default)": ServerConfig().inline_budget_ms, "worker thread (0)": 0.0}
    apps = {
        name: create_app(ServerConfig(corpus=args.corpus, cache_size=0, inline_budget_ms=ms), retriever=engine)
        for name, ms in budgets.items()
    }
    for app in apps.values():
        app.state.searchenv.batcher.start()
        await cpu_per_request(app, bodies, 0.0)  # warm-up: JIT, page cache, memos
    best = {name: float("inf") for name in apps}
    for _ in range(args.rounds):
        for name, app in apps.items():
            best[name] = min(best[name], await cpu_per_request(app, bodies, args.gap_ms / 1000))
    started = time.process_time()
    for question in questions:
        engine.search([question], args.k)
    alone = 1e6 * (time.process_time() - started) / len(questions)
    for name, app in apps.items():
        stats = app.state.searchenv.batcher.stats()
        print(f"{name:40s} {best[name]:6.0f} µs CPU/request  (inline requests so far: {stats['inline_requests']})")
    print(f"{'engine.search alone, back to back':40s} {alone:6.0f} µs CPU/query")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=str(DATA / "corpus" / "union.jsonl"))
    parser.add_argument("--questions", default=str(DATA / "qa" / "nq_test_1000.jsonl"))
    parser.add_argument("--index", default="/tmp/searchenv-bench-server-index", help="bm25 index dir, reused")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gap-ms", type=float, default=0.3, help="idle time before each request")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
