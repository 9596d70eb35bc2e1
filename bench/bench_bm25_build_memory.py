"""Peak build memory of the native BM25 index, summed over the build's processes, for a few segment sizes, beside
Lucene's (Anserini's ``IndexCollection``, as pyserini builds) on the same corpus in the same run.

    python bench/bench_bm25_build_memory.py --corpus CORPUS.jsonl --segment-docs 25000,10000 --lucene

Each build runs in a child process (a ``DiskCorpus``, 2 worker processes or Lucene threads, as ``BM25Retriever``
builds it); the parent samples the RSS and PSS of the child's whole process tree every 50 ms
(``bench_bm25._run_sampling_build_memory``) and reports the highest sums (RSS counts a page the forked workers
share with their parent once per process; PSS splits it between them), the build time, the CPU time of the
child and its workers, and the index size. Builds alternate (each segment size, then Lucene, round after round)
so that a change of machine load falls on all of them; CPU time is the steadier figure on a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

from bench_bm25 import _du, _run_sampling_build_memory  # noqa: E402 - bench/bench_bm25.py, beside this script


def child(corpus_path: str, directory: str, segment_docs: int, workers: int) -> None:
    """One build (``segment_docs`` 0: Lucene's); prints its wall and CPU seconds as one JSON line."""
    from searchenv.corpus import DiskCorpus
    from searchenv.retrievers.bm25.lucene import build_lucene_index
    from searchenv.retrievers.bm25.native.builder import build_native_index
    from searchenv.retrievers.bm25.retriever import PYSERINI_B, PYSERINI_K1

    corpus = DiskCorpus(corpus_path)
    start, cpu = time.perf_counter(), os.times()
    if segment_docs:
        build_native_index(
            corpus, directory, PYSERINI_K1, PYSERINI_B, workers=workers, segment_docs=segment_docs, show_progress=False
        )
    else:
        build_lucene_index(corpus, Path(directory), workers, show_progress=False)
    used = [after - before for after, before in zip(os.times(), cpu)]  # user, system, children's user and system
    print(json.dumps({"build_s": time.perf_counter() - start, "cpu_s": sum(used[:4])}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True, help="a corpus jsonl (searchenv world --output writes one)")
    parser.add_argument("--segment-docs", default="100000,50000", help="comma-separated segment sizes to compare")
    parser.add_argument("--workers", type=int, default=2, help="native build workers, Lucene's threads")
    parser.add_argument("--lucene", action="store_true", help="also build Lucene's index each round")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.corpus, args.child[0], int(args.child[1]), args.workers)
        return
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    print("| build | build s | CPU s | peak RSS MB, summed (most processes) | peak PSS MB, summed | index MB |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench-bm25-mem-") as tmp:
        for _ in range(args.rounds):
            sizes = [int(s) for s in args.segment_docs.split(",") if s] + ([0] if args.lucene else [])
            for size in sizes:
                target = Path(tmp) / f"index-{size}"
                shutil.rmtree(target, ignore_errors=True)
                command = [sys.executable, __file__, "--corpus", args.corpus, "--workers", str(args.workers)]
                command += ["--child", str(target), str(size)]
                done, peak, peak_pss, processes = _run_sampling_build_memory(command, Path(tmp) / "never")
                if done.returncode != 0:
                    sys.exit(done.stderr[-3000:])
                timing = json.loads(done.stdout.strip().splitlines()[-1])
                name = f"native, segments of {size:,}" if size else f"Lucene, {args.workers} threads"
                print(
                    f"| {name} | {timing['build_s']:.1f} | {timing['cpu_s']:.1f} | {peak:,.0f} ({processes}) "
                    f"| {peak_pss:,.0f} | {_du(target) / 2**20:.1f} |",
                    flush=True,
                )
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
