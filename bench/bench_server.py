"""Retrieval service throughput: K concurrent clients over loopback vs the same retriever in-process.

Starts ``python -m searchenv.retrievers.server`` in a child process, then for each K in ``--clients`` runs K
concurrent :class:`~searchenv.retrievers.remote.RemoteRetriever` clients (asyncio tasks spread over
``--client-procs`` processes) that send batches of ``--batch`` questions for ``--duration`` seconds, and reports
queries/s, request latency p50/p99 and errors. Beside it, the same retriever is timed in-process on the same
batches. The server cache is off by default so every query is really searched; ``--group`` adds a GRPO-like
run where each batch holds ``batch / group`` questions repeated ``group`` times, with the cache on.

    python bench/bench_server.py --retriever bm25 --clients 1,8,32,64 --duration 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path

from searchenv.retrievers import make_retriever
from searchenv.retrievers.remote import RemoteRetriever
from searchenv.retrievers.server import spawn_server
from tqdm.auto import tqdm

from searchenv.types import Corpus

DATA = Path(os.environ.get("SEARCHENV_DATA", "/work/shared/data"))


def batches_of(questions: list[str], size: int, group: int) -> list[list[str]]:
    """Batches of ``size`` queries; with ``group > 1`` each question appears ``group`` times (a GRPO group)."""
    distinct = size // group
    return [
        [q for q in questions[i : i + distinct] for _ in range(group)]
        for i in range(0, len(questions) - distinct + 1, distinct)
    ]


def in_process_qps(retriever: object, batches: list[list[str]], k: int, duration: float) -> float:
    """Queries/s of ``retriever.search`` called back to back on the batches, single caller, for ``duration`` s."""
    done, i = 0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < duration:
        batch = batches[i % len(batches)]
        retriever.search(batch, k)  # type: ignore[attr-defined]
        done += len(batch)
        i += 1
    return done / (time.perf_counter() - start)


def _imported(_: int) -> bool:
    return True


def _client_process(
    url: str, tasks: int, offset: int, batches: list[list[str]], k: int, start_at: float, duration: float
) -> tuple[int, list[float], int, list[str]]:
    """One client process: ``tasks`` asyncio clients sharing a pooled RemoteRetriever; returns its tallies."""

    async def run() -> tuple[int, list[float], int, list[str]]:
        remote = RemoteRetriever(url, timeout=60, retries=0, on_error="empty", pool_size=max(tasks, 1))
        latencies: list[float] = []
        done = errors = 0
        messages: list[str] = []

        async def client(index: int) -> None:
            nonlocal done, errors
            i = index * 7919  # clients walk the batches from different places
            while time.time() < start_at + duration:
                batch = batches[i % len(batches)]
                i += 1
                began = time.perf_counter()
                results, error = await remote.asearch_or_error(batch, k)
                if time.time() > start_at + duration:
                    break  # finished after the window: not counted
                latencies.append(time.perf_counter() - began)
                if error is not None or len(results) != len(batch) or any(len(r) != k for r in results):
                    errors += 1
                    messages.append(str(error))
                else:
                    done += len(batch)

        await asyncio.sleep(max(0.0, start_at - time.time()))
        await asyncio.gather(*(client(offset + t) for t in range(tasks)))
        await remote.aclose()
        return done, latencies, errors, messages[:3]

    return asyncio.run(run())


def load_run(url: str, clients: int, procs: int, batches: list[list[str]], k: int, duration: float) -> dict[str, float]:
    """Drive ``clients`` concurrent clients for ``duration`` seconds; queries/s and latency percentiles."""
    procs = max(1, min(procs, clients))
    shares = [clients // procs + (1 if p < clients % procs else 0) for p in range(procs)]
    offsets = [sum(shares[:p]) for p in range(procs)]
    with mp.get_context("spawn").Pool(procs) as pool:
        pool.map(_imported, range(procs))  # every process has imported this module (and httpx) before the clock
        start_at = time.time() + 0.5
        jobs = [
            pool.apply_async(_client_process, (url, share, offset, batches, k, start_at, duration))
            for share, offset in zip(shares, offsets, strict=True)
        ]
        outcomes = [job.get(timeout=duration + 120) for job in jobs]
    done = sum(o[0] for o in outcomes)
    latencies = sorted(lat for o in outcomes for lat in o[1])
    errors = sum(o[2] for o in outcomes)
    for message in (m for o in outcomes for m in o[3]):
        print(f"  error sample: {message}")
    return {
        "clients": clients,
        "qps": done / duration,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "requests": len(latencies),
        "errors": errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--retriever", default="bm25")
    parser.add_argument("--corpus", default=str(DATA / "corpus" / "union.jsonl"))
    parser.add_argument("--questions", default=str(DATA / "qa" / "nq_test_1000.jsonl"))
    parser.add_argument("--index", default="/tmp/searchenv-bench-server-index", help="index dir (bm25), reused")
    parser.add_argument("--clients", default="1,8,32,64")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="server worker processes")
    parser.add_argument("--batch-wait-ms", type=float, default=2.0)
    parser.add_argument("--group", type=int, default=8, help="GRPO group size for the cached run (0: skip it)")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()

    questions = [json.loads(line)["question"] for line in Path(args.questions).read_text(encoding="utf-8").splitlines()]
    batches = batches_of(questions, args.batch, 1)
    corpus = Corpus.from_jsonl(args.corpus)
    options = {"index_dir": args.index, "show_progress": False, "rebuild": True} if args.retriever == "bm25" else {}
    retriever = make_retriever(args.retriever, corpus, **options)  # builds the index the server will load
    retriever.search(batches[0], args.k)  # warm-up (JIT, caches)
    in_proc = in_process_qps(retriever, batches, args.k, args.duration)
    in_proc_single = in_process_qps(retriever, [[q] for q in questions], args.k, min(args.duration, 5.0))
    del retriever
    print(f"in-process {args.retriever}: batch {args.batch}: {in_proc:,.0f} q/s; batch 1: {in_proc_single:,.0f} q/s")

    server_args = ["--retriever", args.retriever, "--corpus", args.corpus, "--workers", str(args.workers)]
    server_args += ["--batch-wait-ms", str(args.batch_wait_ms), "--log-level", "warning"]
    if args.retriever == "bm25":
        server_args += ["--index", args.index, "--option", "show_progress=false"]
    rows: list[dict[str, float]] = []
    process, url = spawn_server([*server_args, "--cache-size", "0"], startup_timeout=300)
    try:
        RemoteRetriever(url).search(batches[0], args.k)  # warm the server's engine
        for clients in tqdm([int(c) for c in args.clients.split(",")], desc="client counts"):
            rows.append(load_run(url, clients, args.client_procs, batches, args.k, args.duration))
            print(json.dumps(rows[-1]))
    finally:
        process.terminate()
        process.wait(timeout=30)

    grouped: dict[str, float] | None = None
    if args.group > 1:
        process, url = spawn_server(server_args, startup_timeout=300)
        try:
            group_batches = batches_of(questions, args.batch, args.group)
            grouped = load_run(url, 32, args.client_procs, group_batches, args.k, args.duration)
            grouped["cache"] = RemoteRetriever(url).health()["cache"]  # type: ignore[assignment]
            print("grpo groups:", json.dumps(grouped))
        finally:
            process.terminate()
            process.wait(timeout=30)

    print(f"\n| clients × batch {args.batch} | queries/s | vs in-process | p50 ms | p99 ms | errors |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['clients']} | {row['qps']:,.0f} | {row['qps'] / in_proc:.2f}× | {row['p50_ms']:.1f} "
            f"| {row['p99_ms']:.1f} | {row['errors']} |"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "in_process_qps": in_proc,
                    "in_process_single_qps": in_proc_single,
                    "rows": rows,
                    "grpo": grouped,
                    "args": vars(args),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
