"""Native BM25 against bm25s (numba, threaded) in one process, batch sizes interleaved: ratios that hold on a
loaded machine.

    python bench/bench_bm25_interleaved.py --rounds 5
    python bench/bench_bm25_interleaved.py --corpus WORLD/corpus.jsonl --questions WORLD/train.jsonl --work W

``bench_bm25.py`` runs each engine in a child of its own, one after another, so a change in the machine's load
between children moves their ratio. Here both engines search the same 1,000 NQ questions over ``union.jsonl`` in
the same process, in calls of each ``--batch-sizes``, alternating engine and batch size every pass; each figure
is the best of ``--rounds`` passes (the pass least disturbed by other work). Indexes are built once into
``--work`` and reused. ``--corpus``/``--questions`` run it on another corpus (opened from disk) and the first
1,000 questions of a jsonl file, e.g. a world written by ``searchenv world --passages N``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

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
    args = parser.parse_args()
    corpus = DiskCorpus(args.corpus) if args.corpus else Corpus.from_jsonl(DATA / "corpus" / "union.jsonl")
    with args.questions.open(encoding="utf-8") as handle:
        queries = [json.loads(line)["question"] for line in itertools.islice(handle, 1000)]
    engines = {
        name: BM25Retriever(
            corpus, engine=name, index_dir=args.work / name, threads=args.threads, show_progress=False
        )._engine  # the engine call, as bench_bm25.py times it
        for name in args.engines.split(",")
    }
    sizes = [int(b) for b in args.batch_sizes.split(",")]

    def one_pass(engine, size: int) -> float:
        start = time.perf_counter()
        for at in range(0, len(queries), size):
            engine.search(queries[at : at + size], 3)
        return time.perf_counter() - start

    for engine in engines.values():  # compile and warm
        for size in sizes:
            one_pass(engine, size)
    best: dict[tuple[str, int], float] = {}
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    for _ in range(args.rounds):
        for size in sizes:
            for name, engine in engines.items():
                best[name, size] = min(best.get((name, size), float("inf")), one_pass(engine, size))
    load_after = " ".join(f"{x:.1f}" for x in os.getloadavg())
    names = list(engines)
    print(f"load average before / after: {load_before} / {load_after}; best of {args.rounds} passes")
    print("| batch | " + " | ".join(f"{n} q/s" for n in names) + f" | {names[0]} ÷ {names[-1]} |")
    print("|---" * (len(names) + 2) + "|")
    for size in sizes:
        cells = " | ".join(f"{len(queries) / best[n, size]:,.0f}" for n in names)
        print(f"| {size} | {cells} | {best[names[-1], size] / best[names[0], size]:.2f} |")


if __name__ == "__main__":
    main()
