"""Benchmark the BM25 engines against Lucene (pyserini's engine) in one run.

    python bench/bench_bm25.py --scale union        # 19,637 real passages, 1,000 NQ questions
    python bench/bench_bm25.py --scale 200k         # generated world (searchenv.world), its first 1,000 questions
    python bench/bench_bm25.py --scale 1m

Each engine runs in a child process of its own, so that its peak RSS is its own, and reports: index build time,
index size on disk, reload time, peak RSS, batched QPS (one ``search(queries, k=3)`` call), single-query QPS
(``search([q], k=3)`` in a loop) and tie-tolerant top-3 agreement with Lucene
(:func:`searchenv.retrievers.bm25.tie_tolerant_agreement`: a returned passage agrees if Lucene's score for it is
at least Lucene's 3rd-best score for that query, minus 1e-4; Lucene's scores come from its top-1000).
Slow engines are timed on a prefix of the queries sized to fit a time budget, which the table states.
rank-bm25 is built on a subsample above 20,000 passages; its QPS is scaled by subsample/N (it scans every
passage for every query term, so its cost is linear in N) and marked as extrapolated.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SCALES = {"union": None, "200k": 200_000, "1m": 1_000_000}
ENGINES = ("lucene", "native", "bm25s", "rank-bm25")
RANK_BM25_SUBSAMPLE = 20_000
NUM_QUERIES = 1000
DEPTH = 3


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _peak_rss_mb() -> float:
    """This process's peak RSS. Linux's ``ru_maxrss`` survives ``exec`` (a child starts at its parent's peak),
    so the kernel's per-address-space high-water mark ``VmHWM`` is read instead where it exists."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _timed_prefix(search, queries: list[str], budget_s: float):
    """Run ``search`` on the largest prefix of ``queries`` a budget allows; return (count, seconds, results)."""
    probe = queries[: min(20, len(queries))]
    start = time.perf_counter()
    search(probe)
    per_query = (time.perf_counter() - start) / len(probe)
    count = len(queries) if per_query * len(queries) <= budget_s else max(len(probe), int(budget_s / per_query))
    start = time.perf_counter()
    results = search(queries[:count])
    return count, time.perf_counter() - start, results


def child(args: argparse.Namespace) -> None:
    """Measure one engine; print one JSON line."""
    from searchenv.retrievers.bm25 import BM25Retriever
    from searchenv.types import Corpus

    corpus = Corpus.from_jsonl(args.corpus)
    queries = json.loads(Path(args.queries).read_text())
    full_size = len(corpus)
    subsample = args.engine == "rank-bm25" and len(corpus) > RANK_BM25_SUBSAMPLE
    if subsample:
        corpus = Corpus(
            corpus.ids[:RANK_BM25_SUBSAMPLE],
            corpus.titles[:RANK_BM25_SUBSAMPLE],
            corpus.texts[:RANK_BM25_SUBSAMPLE],
            source=f"{corpus.source}[:{RANK_BM25_SUBSAMPLE}]",
        )
    corpus.checksum  # noqa: B018 - hashing the corpus is not part of any engine's build time
    rss_corpus = _peak_rss_mb()
    index_dir = Path(args.workdir) / f"index-{args.engine}"
    shutil.rmtree(index_dir, ignore_errors=True)
    options = {"engine": args.engine, "index_dir": index_dir, "threads": args.threads, "show_progress": False}
    start = time.perf_counter()
    BM25Retriever(corpus, **options)
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    retriever = BM25Retriever(corpus, **options)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    retriever.search(queries[:20], DEPTH)  # warm up: JIT (numba, the JVM), page cache
    if time.perf_counter() - start < 1.0:  # fast engines: give the JVM's JIT more to chew on
        retriever.search(queries[20:200], DEPTH)
    budget = args.budget
    n_batch, batch_s, batch = _timed_prefix(lambda qs: retriever.search(qs, DEPTH), queries, budget)
    n_single, single_s, _ = _timed_prefix(lambda qs: [retriever.search([q], DEPTH) for q in qs], queries, budget / 2)
    position = {pid: i for i, pid in enumerate(corpus.ids)}
    top = [[position[p.id] for p in hits] for hits in batch]
    record = {
        "engine": args.engine,
        "passages": len(corpus),
        "extrapolated_from": len(corpus) if subsample else None,
        "build_s": build_s * (full_size / len(corpus)),
        "load_s": load_s,
        "index_mb": _du(index_dir) / 2**20 * (full_size / len(corpus)),
        "rss_corpus_mb": rss_corpus,
        "peak_rss_mb": _peak_rss_mb(),
        "batch_queries": n_batch,
        "batch_qps": n_batch / batch_s * (len(corpus) / full_size),
        "single_queries": n_single,
        "single_qps": n_single / single_s * (len(corpus) / full_size),
        "top": top,
    }
    if args.engine == "lucene":
        deep = retriever.search(queries, 1000)
        record["deep_ids"] = [[position[p.id] for p in hits] for hits in deep]
        record["deep_scores"] = [[p.score for p in hits] for hits in deep]
    shutil.rmtree(index_dir, ignore_errors=True)
    print(json.dumps(record))


def prepare(scale: str, workdir: Path) -> tuple[Path, Path, str]:
    """Write the corpus and the queries the children share; return their paths and a description."""
    queries_path = workdir / "queries.json"
    if SCALES[scale] is None:
        with (DATA / "qa" / "nq_test_1000.jsonl").open(encoding="utf-8") as handle:
            queries = [json.loads(line)["question"] for line in handle][:NUM_QUERIES]
        queries_path.write_text(json.dumps(queries))
        return DATA / "corpus" / "union.jsonl", queries_path, "union.jsonl (19,637 passages), 1,000 NQ test questions"
    from searchenv.world import generate_world

    world = generate_world(SCALES[scale], seed=0, progress=True)
    corpus_path = workdir / "corpus.jsonl"
    world.corpus.to_jsonl(corpus_path)
    queries_path.write_text(json.dumps([q.question for q in world.questions[:NUM_QUERIES]]))
    return corpus_path, queries_path, f"generate_world({SCALES[scale]:,}, seed=0), its first 1,000 questions"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=sorted(SCALES), default="union")
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated; lucene is always run")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--budget", type=float, default=30.0, help="seconds allowed per timed search loop")
    parser.add_argument("--json", type=Path, help="also write all figures here")
    parser.add_argument("--child", dest="engine", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--queries", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine:
        child(args)
        return
    from searchenv.retrievers.bm25 import tie_tolerant_agreement

    engines = ["lucene"] + [e for e in args.engines.split(",") if e and e != "lucene"]
    with tempfile.TemporaryDirectory(prefix="bench-bm25-") as tmp:
        workdir = Path(tmp)
        corpus_path, queries_path, described = prepare(args.scale, workdir)
        records, failed = {}, {}
        for engine in engines:
            print(f"[bench_bm25] {args.scale}: {engine} ...", file=sys.stderr, flush=True)
            command = [
                sys.executable,
                __file__,
                "--child",
                engine,
                "--corpus",
                str(corpus_path),
                "--queries",
                str(queries_path),
                "--workdir",
                str(workdir),
                "--threads",
                str(args.threads),
                "--budget",
                str(args.budget),
            ]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode == 0:
                records[engine] = json.loads(done.stdout.strip().splitlines()[-1])
            elif engine == "lucene":
                sys.exit(f"lucene failed, nothing to compare with:\n{done.stderr[-3000:]}")
            else:  # e.g. killed for memory: report it and measure the others
                failed[engine] = f"exit {done.returncode}: {(done.stderr.strip().splitlines() or ['?'])[-1][:200]}"
                print(f"[bench_bm25] {engine} failed ({failed[engine]})", file=sys.stderr, flush=True)
    lucene = records["lucene"]
    for engine, record in records.items():
        n = record["batch_queries"]
        record["agreement"] = None
        if record["extrapolated_from"] is None:
            record["agreement"] = tie_tolerant_agreement(
                record["top"], lucene["deep_ids"][:n], lucene["deep_scores"][:n], depth=DEPTH
            )
    print(f"\n{args.scale}: {described}; top-{DEPTH}, threads={args.threads}\n")
    print(
        "| engine | build s | index MB | reload s | peak RSS MB (corpus alone) | batched QPS | × Lucene | "
        "single QPS | × Lucene | top-3 agreement |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for engine, r in records.items():
        note = f" (extrapolated from {r['extrapolated_from']:,})" if r["extrapolated_from"] else ""
        queries = "" if r["batch_queries"] == NUM_QUERIES else f" ({r['batch_queries']} q)"
        agreement = "n/a" if r["agreement"] is None else f"{r['agreement']:.3f}"
        print(
            f"| {engine}{note} | {r['build_s']:.1f} | {r['index_mb']:.0f} | {r['load_s']:.2f} | "
            f"{r['peak_rss_mb']:.0f} ({r['rss_corpus_mb']:.0f}) | {r['batch_qps']:,.1f}{queries} | "
            f"{r['batch_qps'] / lucene['batch_qps']:.2f} | {r['single_qps']:,.1f} | "
            f"{r['single_qps'] / lucene['single_qps']:.2f} | {agreement} |"
        )
    for engine, reason in failed.items():
        print(f"| {engine} | failed: {reason} |||||||||")
    if args.json:
        slim = {
            e: {k: v for k, v in r.items() if k not in ("top", "deep_ids", "deep_scores")} for e, r in records.items()
        }
        summary = {"scale": args.scale, "threads": args.threads, "engines": slim, "failed": failed}
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
