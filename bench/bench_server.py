"""Retrieval service throughput: K concurrent clients over loopback vs the same retriever in-process.

Starts ``python -m searchenv.retrievers.server`` in a child process, then for each K in ``--clients`` runs K
concurrent :class:`~searchenv.retrievers.remote.retriever.RemoteRetriever` clients (asyncio tasks spread over
``--client-procs`` processes) that send batches of ``--batch`` questions for ``--duration`` seconds, and reports
queries/s, request latency p50/p99 and errors. Beside it, the same retriever is timed in-process on the same
batches, before and after the service runs (other jobs share this machine). The server cache is off for these
rows so every query is really searched. ``--group G`` adds a GRPO-like run: 32 clients in groups of G send the
same batches (a group's episodes share their question), served with the cache off and on.

    python bench/bench_server.py --retriever bm25 --clients 1,8,32,64 --duration 10

``--search-r1 PATH/retrieval_server.py`` instead compares searchenv's server with Search-R1's own server (BM25 over
a Lucene index of the same corpus, started by ``bench/search_r1_peer.py``) in the same run, both driven by
Search-R1's own kind of client — ``requests.post(url, json=payload).json()``, as its ``generation.py`` does: one
client sending batches of 1/16/64/512 back to back, then 8 and 32 concurrent clients with batches of 16.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from tqdm.auto import tqdm

from searchenv.corpus import Corpus
from searchenv.retrievers import make_retriever
from searchenv.retrievers.remote.retriever import RemoteRetriever

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the loopback-server helpers the tests use
from servers import free_port, spawn_server  # noqa: E402
from warmup import warm_until_steady  # noqa: E402 - bench/warmup.py, beside this script

DATA = Path(os.environ.get("SEARCHENV_SHARED_DATA", REPO.parent / "shared" / "data"))


def batches_of(questions: list[str], size: int) -> list[list[str]]:
    return [questions[i : i + size] for i in range(0, len(questions) - size + 1, size)]


def in_process_qps(retriever: object, batches: list[list[str]], k: int, duration: float) -> float:
    """Queries/s of ``retriever.search`` called back to back on the batches, single caller, for ``duration`` s."""
    done, i = 0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < duration:
        batch = batches[i % len(batches)]
        retriever.search(batch, k)  # type: ignore[attr-defined]
        done += len(batch)
        i += 1
    elapsed = time.perf_counter() - start
    return {"qps": done / elapsed, "s": elapsed}


def _imported(_: int) -> bool:
    return True


async def _sender(kind: str, url: str, k: int, connections: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(send, close)``: ``send(batch)`` makes one request and returns ``(ok, error)``.

    ``remote`` is searchenv's client (pooled ``httpx.Client`` on threads, parses passages); ``aiohttp`` is a lean
    load generator that only decodes the JSON, to measure what the server itself sustains; ``httpx-async`` is
    ``httpx.AsyncClient``, the transport RemoteRetriever was first written with.
    """
    if kind == "remote":
        remote = RemoteRetriever(url, timeout=60, retries=0, on_error="empty", pool_size=connections)

        async def send_remote(batch: list[str]) -> tuple[bool, str]:
            results, error = await remote.asearch_or_error(batch, k)
            return error is None and len(results) == len(batch) and all(len(r) == k for r in results), str(error)

        async def close_remote() -> None:
            remote.close()

        return send_remote, close_remote

    def body_of(batch: list[str]) -> dict[str, Any]:
        return {"queries": batch, "topk": k, "return_scores": True}

    def ok_of(status: int, result: list[Any], batch: list[str]) -> bool:
        return status == 200 and len(result) == len(batch) and all(len(r) == k for r in result)

    if kind == "requests":  # Search-R1's own client: requests.post(url, json=payload).json(), one thread per client
        import requests

        executor = ThreadPoolExecutor(max_workers=connections)

        def post(batch: list[str]) -> tuple[bool, str]:
            try:
                response = requests.post(f"{url}/retrieve", json=body_of(batch), timeout=60)
                return ok_of(response.status_code, response.json()["result"], batch), ""
            except Exception as exc:  # noqa: BLE001 - counted as an error
                return False, repr(exc)

        async def send_requests(batch: list[str]) -> tuple[bool, str]:
            return await asyncio.get_running_loop().run_in_executor(executor, post, batch)

        async def close_requests() -> None:
            executor.shutdown()

        return send_requests, close_requests

    if kind == "httpx-async":  # the transport RemoteRetriever does not use: kept to show why
        client = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=connections))

        async def send_httpx(batch: list[str]) -> tuple[bool, str]:
            try:
                response = await client.post(f"{url}/retrieve", json=body_of(batch))
                return ok_of(response.status_code, response.json()["result"], batch), ""
            except Exception as exc:  # noqa: BLE001 - counted as an error
                return False, repr(exc)

        return send_httpx, client.aclose
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections))

    async def send_aiohttp(batch: list[str]) -> tuple[bool, str]:
        try:
            async with session.post(f"{url}/retrieve", json=body_of(batch), timeout=aiohttp.ClientTimeout(60)) as r:
                return ok_of(r.status, (await r.json())["result"], batch), ""
        except Exception as exc:  # noqa: BLE001 - counted as an error
            return False, repr(exc)

    return send_aiohttp, session.close


def _client_process(
    kind: str,
    url: str,
    tasks: int,
    offset: int,
    group: int,
    batches: list[list[str]],
    k: int,
    start_at: float,
    duration: float,
) -> tuple[int, list[float], int, list[str]]:
    """One client process: ``tasks`` asyncio clients sharing one connection pool; returns its tallies."""

    async def run() -> tuple[int, list[float], int, list[str]]:
        send, close = await _sender(kind, url, k, max(tasks, 1))
        latencies: list[float] = []
        done = errors = 0
        messages: list[str] = []

        async def client(index: int) -> None:
            nonlocal done, errors
            i = (index // group) * 7919  # groups of clients walk the batches from different places
            while time.time() < start_at + duration:
                batch = batches[i % len(batches)]
                i += 1
                began = time.perf_counter()
                ok, message = await send(batch)
                if time.time() > start_at + duration:
                    break  # finished after the window: not counted
                latencies.append(time.perf_counter() - began)
                if ok:
                    done += len(batch)
                else:
                    errors += 1
                    messages.append(message)

        await asyncio.sleep(max(0.0, start_at - time.time()))
        await asyncio.gather(*(client(offset + t) for t in range(tasks)))
        await close()
        return done, latencies, errors, messages[:3]

    return asyncio.run(run())


def load_run(
    kind: str, url: str, clients: int, procs: int, batches: list[list[str]], k: int, duration: float, group: int = 1
) -> dict[str, float]:
    """Drive ``clients`` concurrent clients for ``duration`` seconds; queries/s and latency percentiles.

    Clients in the same ``group`` send the same batches in the same order (GRPO episodes of one question).
    """
    procs = max(1, min(procs, clients))
    shares = [clients // procs + (1 if p < clients % procs else 0) for p in range(procs)]
    offsets = [sum(shares[:p]) for p in range(procs)]
    with mp.get_context("spawn").Pool(procs) as pool:
        pool.map(_imported, range(procs))  # every process has imported this module (and httpx) before the clock
        start_at = time.time() + 0.5
        jobs = [
            pool.apply_async(_client_process, (kind, url, share, offset, group, batches, k, start_at, duration))
            for share, offset in zip(shares, offsets, strict=True)
        ]
        outcomes = [job.get(timeout=duration + 120) for job in jobs]
    done = sum(o[0] for o in outcomes)
    latencies = sorted(lat for o in outcomes for lat in o[1])
    errors = sum(o[2] for o in outcomes)
    for message in (m for o in outcomes for m in o[3]):
        print(f"  error sample: {message}")
    return {
        "client": kind,
        "clients": clients,
        "qps": done / duration,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "requests": len(latencies),
        "errors": errors,
    }


def sequential_qps(url: str, batches: list[list[str]], k: int, duration: float) -> dict[str, float]:
    """``{"qps", "s"}`` of one client posting ``batches`` back to back with ``requests.post`` (Search-R1's client)."""
    import requests

    done, i = 0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < duration:
        batch = batches[i % len(batches)]
        response = requests.post(f"{url}/retrieve", json={"queries": batch, "topk": k, "return_scores": True})
        result = response.json()["result"]
        if response.status_code != 200 or len(result) != len(batch):
            raise RuntimeError(f"{url} answered {response.status_code}: {response.text[:300]}")
        done += len(batch)
        i += 1
    elapsed = time.perf_counter() - start
    return {"qps": done / elapsed, "s": elapsed}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux ``/proc``): a server's cost per query that, unlike
    wall-clock throughput, barely moves when other jobs share the machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spawn_search_r1(server: str, corpus: str, index: str, store_raw: bool) -> tuple[subprocess.Popen[bytes], str]:
    """Start Search-R1's server (see bench/search_r1_peer.py), building its Lucene index first if missing."""
    peer = [sys.executable, str(REPO / "bench" / "search_r1_peer.py")]
    if not Path(index).is_dir():
        raw = ["--store-raw"] if store_raw else []
        subprocess.run([*peer, "index", "--corpus", corpus, "--index", index, *raw], check=True)
    port = free_port()
    log = open(Path(index).parent / "search_r1_server.log", "wb")  # noqa: SIM115 - the child writes to it
    command = [*peer, "serve", "--server", server, "--corpus", corpus, "--index", index, "--port", str(port)]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Search-R1's server exited with {process.returncode}; see {log.name}")
        try:
            if httpx.post(f"{url}/retrieve", json={"queries": ["x"], "topk": 1, "return_scores": True}).is_success:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    raise RuntimeError(f"Search-R1's server not ready after 300 s; see {log.name}")


def compare_with_search_r1(args: argparse.Namespace, questions: list[str]) -> None:
    """Both servers over the same corpus and questions, same client, same run; rows interleave the two servers."""
    index = Path(args.index).parent / ("search-r1-lucene-index" + ("-raw" if args.search_r1_store_raw else ""))
    server_args = ["--retriever", "bm25", "--corpus", args.corpus, "--index", args.index, "--cache-size", "0"]
    make_retriever("bm25", Corpus.from_jsonl(args.corpus), index_dir=args.index, show_progress=False)  # build once
    ours, ours_url = spawn_server([*server_args, "--log-level", "warning"], startup_timeout=300)
    peer, peer_url = spawn_search_r1(args.search_r1, args.corpus, str(index), args.search_r1_store_raw)
    servers = {"searchenv": ours_url, "Search-R1": peer_url}
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    rows: list[dict[str, Any]] = []
    try:
        for name, url in servers.items():  # warm both as their users would: full passes until steady (JVM JIT)

            def one_pass(url: str = url) -> None:
                for batch in batches_of(questions, 64):
                    httpx.post(f"{url}/retrieve", json={"queries": batch, "topk": args.k, "return_scores": True})

            print(f"{name} warmed by {warm_until_steady(one_pass, min_passes=2)} full passes", flush=True)
        pids = {"searchenv": ours.pid, "Search-R1": peer.pid}

        def measured(name: str, load: str, run: Callable[[], dict[str, Any]]) -> None:
            cpu_before = cpu_seconds(pids[name])
            row = {"server": name, "load": load, **run()}
            row["server_cpu_us_per_query"] = 1e6 * (cpu_seconds(pids[name]) - cpu_before) / (row["qps"] * row["s"])
            rows.append(row)
            print(json.dumps(row))

        for size in (1, 16, 64, 512):
            # One client back to back is the most load-sensitive row: each server gets `rounds` alternating
            # slices of the row's time, so a load spike lands on both.
            batches = batches_of(questions, size)
            slices: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
            for _ in range(args.rounds):
                for name, url in servers.items():
                    cpu_before = cpu_seconds(pids[name])
                    part = sequential_qps(url, batches, args.k, args.duration / args.rounds)
                    slices[name].append({**part, "cpu": cpu_seconds(pids[name]) - cpu_before})
            for name in servers:
                seconds = sum(p["s"] for p in slices[name])
                queries = sum(p["qps"] * p["s"] for p in slices[name])
                row = {"server": name, "load": f"1 client, batch {size}", "qps": queries / seconds, "s": seconds}
                row["server_cpu_us_per_query"] = 1e6 * sum(p["cpu"] for p in slices[name]) / queries
                rows.append(row)
                print(json.dumps(row))
        for clients in (8, 32):
            batches = batches_of(questions, 16)
            for name, url in servers.items():
                measured(
                    name,
                    f"{clients} clients × batch 16",
                    lambda: {
                        **load_run("requests", url, clients, args.client_procs, batches, args.k, args.duration),
                        "s": args.duration,
                    },
                )
    finally:
        for process in (ours, peer):
            process.terminate()
            process.wait(timeout=30)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    print(
        "\n| load (Search-R1's client: requests.post) | searchenv q/s | Search-R1 q/s | ratio | server CPU µs/query |"
    )
    print("|---|---|---|---|---|")
    for mine, theirs in zip(rows[::2], rows[1::2], strict=True):
        extra = ""
        if "p99_ms" in mine:
            extra = f" (p99 {mine['p99_ms']:.0f} / {theirs['p99_ms']:.0f} ms)"
        ratio = mine["qps"] / theirs["qps"]
        cpu = f"{mine['server_cpu_us_per_query']:,.0f} / {theirs['server_cpu_us_per_query']:,.0f}"
        print(f"| {mine['load']}{extra} | {mine['qps']:,.0f} | {theirs['qps']:,.0f} | {ratio:.2f}× | {cpu} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "args": vars(args)}, indent=2))


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
    parser.add_argument("--rounds", type=int, default=4, help="with --search-r1: alternating slices per one-client row")
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="server worker processes")
    parser.add_argument("--batch-wait-ms", type=float, default=2.0)
    parser.add_argument("--group", type=int, default=8, help="GRPO group size of the extra run (0: skip it)")
    parser.add_argument(
        "--load-clients",
        default="remote,aiohttp",
        help="remote (RemoteRetriever), aiohttp (lean generator), httpx-async",
    )
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument(
        "--search-r1", default=None, help="Search-R1's retrieval_server.py: compare with its server instead"
    )
    parser.add_argument(
        "--search-r1-store-raw",
        action="store_true",
        help="give Search-R1's server an index with stored documents (-storeRaw) instead of its datasets corpus",
    )
    args = parser.parse_args()

    questions = [json.loads(line)["question"] for line in Path(args.questions).read_text(encoding="utf-8").splitlines()]
    if args.search_r1:
        compare_with_search_r1(args, questions)
        return
    batches = batches_of(questions, args.batch)
    corpus = Corpus.from_jsonl(args.corpus)
    options = {"index_dir": args.index, "show_progress": False, "rebuild": True} if args.retriever == "bm25" else {}
    retriever = make_retriever(args.retriever, corpus, **options)  # builds the index the server will load
    retriever.search(batches[0], args.k)  # warm-up (JIT, caches)

    def in_process() -> dict[str, float]:
        return {
            "batch": in_process_qps(retriever, batches, args.k, args.duration),
            "single": in_process_qps(retriever, [[q] for q in questions], args.k, min(args.duration, 5.0)),
        }

    load_before = os.getloadavg()[0]
    before = in_process()
    print(f"in-process {args.retriever} before: {before}")

    server_args = ["--retriever", args.retriever, "--corpus", args.corpus, "--workers", str(args.workers)]
    server_args += ["--batch-wait-ms", str(args.batch_wait_ms), "--log-level", "warning"]
    if args.retriever == "bm25":
        server_args += ["--index", args.index, "--option", "show_progress=false"]

    kinds = args.load_clients.split(",")

    def service(clients: list[int], group: int, cache_size: int) -> list[dict[str, Any]]:
        process, url = spawn_server([*server_args, "--cache-size", str(cache_size)], startup_timeout=300)
        try:
            probe = RemoteRetriever(url)
            probe.search(batches[-1], args.k)  # warm the server's engine
            rows = []
            for kind, n in tqdm(
                [(kind, n) for kind in kinds for n in clients], desc=f"group {group}, cache {cache_size}"
            ):
                cache_before = probe.health()["cache"]
                rows.append(load_run(kind, url, n, args.client_procs, batches, args.k, args.duration, group))
                cache_after = probe.health()["cache"]
                hits, misses = (cache_after[key] - cache_before[key] for key in ("hits", "misses"))
                rows[-1]["cache_hit_rate"] = hits / (hits + misses) if hits + misses else 0.0
                rows[-1]["cache"] = "on" if cache_size else "off"
                print(json.dumps(rows[-1]))
            return rows
        finally:
            process.terminate()
            process.wait(timeout=30)

    rows = service([int(c) for c in args.clients.split(",")], group=1, cache_size=0)
    grpo = []
    if args.group > 1:
        grpo = service([32], args.group, cache_size=0) + service([32], args.group, cache_size=100_000)
    after = in_process()
    load_after = os.getloadavg()[0]
    reference = (before["batch"] + after["batch"]) / 2
    print(f"in-process {args.retriever} after: {after}; load average {load_before:.1f} -> {load_after:.1f}")

    print(
        f"\nin-process, batch {args.batch}: {before['batch']:,.0f} / {after['batch']:,.0f} q/s (before / after); "
        f"batch 1: {before['single']:,.0f} / {after['single']:,.0f} q/s"
    )
    print(f"| client | clients × batch {args.batch} | queries/s | vs in-process | p50 ms | p99 ms | errors |")
    print("|---|---|---|---|---|---|---|")
    labelled = [(str(row["clients"]), row) for row in rows]
    for row in grpo:
        label = (
            f"{row['clients']} in groups of {args.group}, cache {row['cache']} (hit rate {row['cache_hit_rate']:.2f})"
        )
        labelled.append((label, row))
    for label, row in labelled:
        print(
            f"| {row['client']} | {label} | {row['qps']:,.0f} | {row['qps'] / reference:.2f}× | {row['p50_ms']:.1f} "
            f"| {row['p99_ms']:.1f} | {row['errors']} |"
        )
    if args.json:
        figures = {"in_process": {"before": before, "after": after}, "rows": rows, "grpo": grpo, "args": vars(args)}
        figures["load_average"] = [load_before, load_after]
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
