"""When the native BM25 engine's seeded cut-off pays: single-query time by query size, seeded or not.

The MaxScore walk can start from a cut-off seeded with the exact scores of a few passages (``_seed_cutoff``);
queries of at most ``NativeEngine.seed_from_blocks`` posting blocks skip it. This script searches the same
questions one at a time with the threshold at 0 (every query seeded), at its default, and at infinity (none
seeded), and prints the mean time per query for each bucket of query size (blocks over the query's terms), the
best of ``--repeats`` calls per question. Every variant must return the same passages; the script says so.

    python bench/bench_bm25_seed.py --index /tmp/service-bench/searchenv-bm25 \\
        --questions ../shared/data/qa/nq_test_1000.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402

from searchenv.retrievers.bm25.native.engine import SEED_FROM_BLOCKS, NativeEngine  # noqa: E402

EDGES = (0, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536, 2**62)


def native_dir(path: Path) -> Path:
    """The directory holding ``native.json`` (an index directory written by ``BM25Retriever`` nests it)."""
    if (path / "native.json").is_file():
        return path
    found = sorted(path.rglob("native.json"))
    if not found:
        raise SystemExit(f"{path} holds no native BM25 index (no native.json); build one with BM25Retriever")
    return found[0].parent


def query_blocks(engine: NativeEngine, question: str) -> int:
    """Posting blocks over the question's distinct known terms (what the seed threshold is compared with)."""
    term_blocks = engine._arrays[1]
    ids = {t for t in engine.terms.ids(engine.analyzer.analyze_many([question])[0]) if t >= 0}
    return int(sum(term_blocks[t + 1] - term_blocks[t] for t in ids))


def timed(engine: NativeEngine, questions: list[str], k: int, repeats: int) -> tuple[list[float], list[object]]:
    """Best-of-``repeats`` seconds per question (after one untimed call), and each question's hits."""
    seconds, hits = [], []
    for question in questions:
        found = engine.search([question], k)[0]
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            engine.search([question], k)
            best = min(best, time.perf_counter() - started)
        seconds.append(best)
        hits.append((found[0].tolist(), found[1].tolist()))
    return seconds, hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, required=True, help="a native BM25 index directory")
    parser.add_argument("--questions", type=Path, required=True, help="jsonl with a 'question' field")
    parser.add_argument("--n", type=int, default=1000, help="questions to search")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    engine = NativeEngine(native_dir(args.index), threads=1)
    with args.questions.open(encoding="utf-8") as handle:
        questions = [json.loads(line)["question"] for _, line in zip(range(args.n), handle, strict=False)]
    blocks = np.array([query_blocks(engine, q) for q in questions])
    variants = {"always seeded": 0, f"default ({SEED_FROM_BLOCKS})": SEED_FROM_BLOCKS, "never seeded": 2**62}
    times, answers = {}, {}
    for name, threshold in variants.items():
        engine.seed_from_blocks = threshold
        seconds, hits = timed(engine, questions, args.k, args.repeats)
        times[name], answers[name] = np.array(seconds) * 1e6, hits
    reference = answers["always seeded"]
    same_ids = {name: sum(a[0] == b[0] for a, b in zip(hits, reference, strict=True)) for name, hits in answers.items()}
    print(f"{engine.num_docs:,} passages, {len(questions)} questions, top-{args.k}, best of {args.repeats}, µs/query")
    print("| blocks per query | questions | " + " | ".join(variants) + " |")
    print("|---|---|" + "---|" * len(variants))
    for low, high in zip(EDGES, EDGES[1:], strict=False):
        mask = (blocks > low) & (blocks <= high)
        if mask.any():
            cells = " | ".join(f"{times[name][mask].mean():,.1f}" for name in variants)
            print(f"| ({low:,}, {high:,}] | {int(mask.sum())} | {cells} |")
    print("| all | " + str(len(questions)) + " | " + " | ".join(f"{times[n].mean():,.1f}" for n in variants) + " |")
    print("same top-k ids as 'always seeded': " + ", ".join(f"{n} {c}/{len(questions)}" for n, c in same_ids.items()))


if __name__ == "__main__":
    main()
