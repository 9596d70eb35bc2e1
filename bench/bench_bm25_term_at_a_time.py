"""Term at a time against the MaxScore walk, per query, by how many postings a query reads: where the native
engine's ``TERM_AT_A_TIME_POSTINGS`` threshold comes from.

    python bench/bench_bm25_term_at_a_time.py                                   # union.jsonl, NQ questions
    python bench/bench_bm25_term_at_a_time.py --index WORLD/native --questions WORLD/train.jsonl

One thread, the kernels alone (analysis excluded): the questions are sorted by the postings their terms hold and
cut into ten bands; each band is searched by both kernels, best of three passes, and the time per query printed.
``--index`` is a built native index directory (``BM25Retriever(..., engine="native", index_dir=...)`` writes one);
without it union.jsonl's index is built into ``--work``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402

DATA = Path(os.environ.get("SEARCHENV_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def main() -> None:
    from searchenv.corpus import Corpus
    from searchenv.retrievers.bm25.native.engine import NativeEngine, _search_kernel
    from searchenv.retrievers.bm25.native.term_at_a_time import term_at_a_time_kernel
    from searchenv.retrievers.bm25.retriever import BM25Retriever

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, help="a native index directory (default: union.jsonl's, built)")
    parser.add_argument("--questions", type=Path, default=DATA / "qa" / "nq_test_1000.jsonl")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-bm25-interleaved"))
    parser.add_argument("--limit", type=int, default=1000, help="questions read from --questions")
    args = parser.parse_args()
    index = args.index
    if index is None:
        corpus = Corpus.from_jsonl(DATA / "corpus" / "union.jsonl")
        index = BM25Retriever(corpus, engine="native", index_dir=args.work / "native", show_progress=False).index_dir
    with args.questions.open(encoding="utf-8") as handle:
        questions = [json.loads(line)["question"] for line in itertools.islice(handle, args.limit)]
    engine = NativeEngine(index, threads=1)
    engine.term_at_a_time = True
    decoded = engine._decoded_postings()
    qptr, qterms, qweights = engine._query_terms(questions)
    starts = decoded[0]
    read = np.array([int((starts[qterms[a:b] + 1] - starts[qterms[a:b]]).sum()) for a, b in itertools.pairwise(qptr)])
    k = 3
    print(f"{index}: {engine.num_docs:,} passages, {len(decoded[1]):,} postings; {len(questions)} questions, top-{k}")
    print("| postings read (band median) | walk µs / query | term at a time µs / query | walk ÷ term at a time |")
    print("|---|---|---|---|")
    for band in np.array_split(np.argsort(read, kind="stable"), 10):
        band = np.sort(band)
        sub_ptr = np.concatenate([[0], np.cumsum(qptr[band + 1] - qptr[band])]).astype(np.int64)
        sub_terms = np.concatenate([qterms[qptr[i] : qptr[i + 1]] for i in band]).astype(np.int64)
        sub_weights = np.concatenate([qweights[qptr[i] : qptr[i + 1]] for i in band])
        m = len(band)
        out = (np.full((m, k), -1, np.int64), np.zeros((m, k), np.float32), np.zeros(m, np.int64))
        kernels = {
            "walk": lambda: _search_kernel(
                *engine._arrays, sub_ptr, sub_terms, sub_weights, k, engine.seed_from_blocks, 0, m, *out
            ),
            "taat": lambda: term_at_a_time_kernel(
                *decoded, engine.num_docs, sub_ptr, sub_terms, sub_weights, k, 0, m, *out
            ),
        }
        best: dict[str, float] = {}
        for _ in range(3):
            for name, run in kernels.items():
                start = time.perf_counter()
                run()
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
        walk, taat = (best[name] * 1e6 / m for name in ("walk", "taat"))
        print(f"| {int(np.median(read[band])):,} | {walk:.1f} | {taat:.1f} | {walk / taat:.2f} |")


if __name__ == "__main__":
    main()
