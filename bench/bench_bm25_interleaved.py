"""Native BM25 against bm25s (numba, threaded) in one process, batch sizes interleaved: ratios that hold on a
loaded machine. ``--engines lucene,pyserini`` puts searchenv's Lucene wrapper against pyserini's own
``LuceneSearcher`` on the same index in the same JVM.

    python bench/bench_bm25_interleaved.py --rounds 5
    python bench/bench_bm25_interleaved.py --corpus WORLD/corpus.jsonl --questions WORLD/train.jsonl --work W
    python bench/bench_bm25_interleaved.py --engines lucene,pyserini --warm-seconds 60

``bench_bm25.py`` runs each engine in a child of its own, one after another, so a change in the machine's load
between children moves their ratio. Here both engines search the same 1,000 NQ questions over ``union.jsonl`` in
the same process, in calls of each ``--batch-sizes``, alternating engine and batch size every pass; each figure
is the best of ``--rounds`` passes (the pass least disturbed by other work), and the ratio of the first engine to
the last is also given per round (the two passes back to back): median and range. Each round also times a pass
by the calling thread's CPU time (``time.thread_time``, best of the rounds): the work done on the caller's
thread — analysis, a wrapper's calls across to Java, reading results — and none of what the engine's own threads
(the JVM's search threads, numba's) do, so it shows a wrapper's overhead even where load blurs the throughput.
Indexes are built once into ``--work`` and reused. ``--corpus``/``--questions`` run it on another corpus (opened
from disk) and the first 1,000 questions of a jsonl file, e.g. a world written by ``searchenv world --passages N``.
``pyserini`` (listed after ``lucene``) opens the index the ``lucene`` engine built, as ``bench_bm25.py`` calls it
(``search(q, k)`` for one query, ``batch_search`` for more, docids and scores read from every hit). Every engine
is warmed at every batch size until a pass stops getting faster (``bench/warmup.py``; the JVM compiles for tens
of passes).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

from bench_bm25 import _Pyserini  # noqa: E402 - bench/, beside this script
from warmup import warm_until_steady  # noqa: E402

DATA = Path(os.environ.get("SEARCHENV_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def main() -> None:
    from searchenv.corpus import Corpus, DiskCorpus
    from searchenv.retrievers.bm25.retriever import BM25Retriever

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="native,bm25s")
    parser.add_argument("--batch-sizes", default="1,64,512")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-bm25-interleaved"))
    parser.add_argument("--corpus", type=Path, help="a corpus jsonl (default: the shared union.jsonl)")
    parser.add_argument("--questions", type=Path, default=DATA / "qa" / "nq_test_1000.jsonl")
    parser.add_argument("--warm-seconds", type=float, default=30.0, help="most warm-up time per engine and batch")
    args = parser.parse_args()
    corpus = DiskCorpus(args.corpus) if args.corpus else Corpus.from_jsonl(DATA / "corpus" / "union.jsonl")
    with args.questions.open(encoding="utf-8") as handle:
        queries = [json.loads(line)["question"] for line in itertools.islice(handle, 1000)]
    engines = {}
    for name in args.engines.split(","):
        if name == "pyserini":  # the peer, on the index the lucene engine built
            engines[name] = _Pyserini(args.work / "lucene" / "lucene", args.threads).batch
        else:  # the engine call, as bench_bm25.py times it
            options = {"index_dir": args.work / name, "threads": args.threads, "show_progress": False}
            engines[name] = BM25Retriever(corpus, engine=name, **options)._engine.search
    sizes = [int(b) for b in args.batch_sizes.split(",")]

    def one_pass(search, size: int, clock=time.perf_counter) -> float:
        start = clock()
        for at in range(0, len(queries), size):
            search(queries[at : at + size], 3)
        return clock() - start

    for search in engines.values():  # compile and warm
        for size in sizes:
            warm_until_steady(lambda: one_pass(search, size), max_seconds=args.warm_seconds)  # noqa: B023
    seconds: dict[tuple[str, int], list[float]] = {}
    cpu: dict[tuple[str, int], list[float]] = {}  # the calling thread's CPU time: the wrapper's work, not the engine's
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    for _ in range(args.rounds):
        for size in sizes:
            for name, search in engines.items():
                seconds.setdefault((name, size), []).append(one_pass(search, size))
            for name, search in engines.items():
                cpu.setdefault((name, size), []).append(one_pass(search, size, time.thread_time))
    load_after = " ".join(f"{x:.1f}" for x in os.getloadavg())
    names = list(engines)
    first, last = names[0], names[-1]
    print(f"load average before / after: {load_before} / {load_after}; best of {args.rounds} passes")
    print(
        "| batch | " + " | ".join(f"{n} q/s" for n in names) + f" | {first} ÷ {last}, best passes "
        "| per round: median (range) | " + " | ".join(f"{n}: calling thread's CPU µs/query" for n in names) + " |"
    )
    print("|---" * (2 * len(names) + 3) + "|")
    for size in sizes:
        best = {n: min(seconds[n, size]) for n in names}
        cells = " | ".join(f"{len(queries) / best[n]:,.0f}" for n in names)
        # a round's passes run back to back, so its ratio sees one load; the spread over rounds is the noise
        rounds = sorted(b / a for a, b in zip(seconds[first, size], seconds[last, size], strict=True))
        spread = f"{statistics.median(rounds):.2f} ({rounds[0]:.2f}–{rounds[-1]:.2f})"
        own = " | ".join(f"{min(cpu[n, size]) / len(queries) * 1e6:.0f}" for n in names)
        print(f"| {size} | {cells} | {best[last] / best[first]:.2f} | {spread} | {own} |")


if __name__ == "__main__":
    main()
