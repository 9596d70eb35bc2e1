"""Exact (IndexFlatIP) vs HNSW64 at 200k and 1M vectors: recall, build time, memory, QPS, and the GEMM floor.

Vectors:
* ``--source synthetic`` (default): a clustered Gaussian mixture on the unit sphere — ``N/200`` cluster
  centres, each point = centre + isotropic noise, renormalised; queries are fresh draws from the same
  mixture. Pure random vectors are never used: they have no neighbourhoods and make HNSW look broken.
* ``--source e5-like``: the same mixture drawn with the mean and covariance of the 1,000 real e5-base-v2
  passage vectors of FlashRAG's sample index (``--e5-index``): real E5 geometry — a strong shared direction
  (mean norm 0.84, pairwise cosine ≈ 0.7) and an anisotropic spread — that isotropic noise lacks.
* ``--source DIR``: real passage vectors from an embedding cache directory (``vectors-*.npy`` written by
  ``dense.embedding_cache``); queries are the MiniLM embeddings of ``--questions`` (real NQ questions).

The GEMM floor is the time numpy takes for the same inner products (``queries @ vectors.T``, in blocks)
without any top-k selection: no exact search on this CPU can beat it.

HNSW graphs are built in 50k-row steps and saved under ``--cache`` after at most ``--build-budget-s`` of
building, so every invocation stays under 10 minutes on a 2-core machine: repeat ``--phase build`` until the
graph is complete (the reported build time is the sum over runs), then measure. Figures go to stdout and,
as one JSON line, to ``--json``.

    python bench/bench_dense.py --n 200000
    python bench/bench_dense.py --n 1000000 --phase build   # repeat until "graph saved" without "run again"
    python bench/bench_dense.py --n 1000000 --phase search  # exact + GEMM floor + HNSW sweep on the saved graph
    python bench/bench_dense.py --n 1000000 --source e5-like --phase exact --ivfpq 1024 --single 10
        # + IVF-PQ re-ranked from a memory-mapped fp16 file (searchenv's e5-ivfpq), nprobe x candidates sweep
"""

from __future__ import annotations

import argparse
import json
import os
import time
from functools import partial
from pathlib import Path

import faiss
import numpy as np
import psutil


def rss_gb() -> float:
    return psutil.Process().memory_info().rss / 2**30


def clustered_vectors(n: int, dim: int, seed: int, *, per_cluster: int = 200, noise: float = 1.0) -> np.ndarray:
    """Unit vectors from a Gaussian mixture with ``n // per_cluster`` centres (generated in blocks)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(n // per_cluster, 1), dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, 100_000):
        stop = min(start + 100_000, n)
        block = centres[rng.integers(0, len(centres), stop - start)]
        block += rng.standard_normal((stop - start, dim), dtype=np.float32) * (noise / np.sqrt(dim))
        out[start:stop] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def e5_like_vectors(n: int, index_path: Path, seed: int, *, per_cluster: int = 200, spread: float = 0.5) -> np.ndarray:
    """Unit vectors from a Gaussian mixture with the mean and covariance of real e5 passage vectors.

    Centres ~ N(mean, (1 - spread)·C), points = centre + N(0, spread·C), renormalised, where ``mean`` and ``C``
    are estimated from the real vectors in ``index_path`` (a flat faiss index).
    """
    real = faiss.read_index(str(index_path))
    sample = real.reconstruct_n(0, real.ntotal)
    mean = sample.mean(axis=0)
    values, vecs = np.linalg.eigh(np.cov((sample - mean).T))
    root = (vecs * np.sqrt(np.clip(values, 0, None))).astype(np.float32)  # C = root @ root.T
    rng = np.random.default_rng(seed)
    dim = len(mean)
    centres = (
        mean + np.sqrt(1 - spread) * rng.standard_normal((max(n // per_cluster, 1), dim), dtype=np.float32) @ root.T
    )
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, 100_000):
        stop = min(start + 100_000, n)
        block = centres[rng.integers(0, len(centres), stop - start)]
        block += np.sqrt(spread) * rng.standard_normal((stop - start, dim), dtype=np.float32) @ root.T
        out[start:stop] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def real_vectors(directory: Path, questions: Path, n_queries: int) -> tuple[np.ndarray, np.ndarray]:
    from searchenv.retrievers.dense.encoders import load_encoder

    files = sorted(directory.glob("vectors-*.npy"))
    if not files:
        raise SystemExit(f"no vectors-*.npy in {directory}")
    vectors = np.concatenate([np.load(f) for f in files])
    rows = [json.loads(line) for line in questions.open()][:n_queries]
    queries = load_encoder("minilm").encode_queries([r["question"] for r in rows])
    return vectors, queries


def timed(fn, *args):
    started = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - started


def gemm_floor(queries: np.ndarray, vectors: np.ndarray, block: int = 128) -> float:
    """Seconds for ``queries @ vectors.T`` alone, in query blocks (the output of 1M columns would not fit)."""
    started = time.perf_counter()
    for start in range(0, len(queries), block):
        queries[start : start + block] @ vectors.T
    return time.perf_counter() - started


def single_qps(index, queries: np.ndarray, k: int, n: int) -> float:
    started = time.perf_counter()
    for q in queries[:n]:
        index.search(q[None, :], k)
    return n / (time.perf_counter() - started)


def recall_at(approx: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(t)) / truth.shape[1] for a, t in zip(approx, truth, strict=True)]))


def measure_factory(spec: str, vectors: np.ndarray, queries: np.ndarray, truth: np.ndarray, args) -> dict:
    """Build a faiss ``index_factory`` index (fp16 flat, IVF-PQ, ...) and measure it like the others."""
    index = faiss.index_factory(vectors.shape[1], spec, faiss.METRIC_INNER_PRODUCT)
    if hasattr(index, "do_polysemous_training"):
        index.do_polysemous_training = False  # minutes of simulated annealing for a Hamming filter we do not use
    rng = np.random.default_rng(args.seed)
    sample = vectors[np.sort(rng.choice(len(vectors), min(len(vectors), args.train_size), replace=False))]
    _, train_s = timed(index.train, sample)
    _, add_s = timed(index.add, vectors)
    if "IVF" in spec:
        faiss.extract_index_ivf(index).nprobe = args.nprobe
    (_, approx), batched_s = timed(index.search, queries, args.k)
    row = {
        "index": spec,
        "train_s": train_s,
        "add_s": add_s,
        "code_bytes_per_vector": index.sa_code_size(),
        "memory_gb": len(vectors) * index.sa_code_size() / 2**30,
        "recall": recall_at(approx, truth),
        "batched_qps": len(queries) / batched_s,
        "single_qps": single_qps(index, queries, args.k, args.single),
        "nprobe": args.nprobe if "IVF" in spec else None,
    }
    print(
        f"{spec}: train {train_s:.1f} s, add {add_s:.1f} s, {row['code_bytes_per_vector']} B/vector "
        f"({row['memory_gb']:.2f} GB), recall@{args.k} {row['recall']:.3f}, batched {row['batched_qps']:.1f} q/s, "
        f"single {row['single_qps']:.1f} q/s"
    )
    return row


def measure_reranked(vectors: np.ndarray, queries: np.ndarray, truth: np.ndarray, args) -> list[dict]:
    """searchenv's e5-ivfpq path: IVF-PQ candidates re-ranked exactly from a memory-mapped fp16 vector file."""
    from searchenv.retrievers.dense.ivfpq import RerankedIVFPQ, default_pq_m, train_ivfpq, write_fp16_vectors

    n, dim = vectors.shape
    nlist, pq_m = args.ivfpq, default_pq_m(dim)
    stem = f"ivfpq{nlist}-m{pq_m}-t{args.train_size}-s{args.seed}-{args.source.replace('/', '_')}-{n}-{dim}"
    ivf_file, fp16_file = Path(args.cache) / f"{stem}.faiss", Path(args.cache) / f"fp16-{stem}.npy"
    times_file = ivf_file.with_suffix(".json")
    if ivf_file.exists() and fp16_file.exists() and times_file.exists():  # built by an earlier run: sweep only
        ivf, fp16 = faiss.read_index(str(ivf_file)), np.load(fp16_file, mmap_mode="r")
        train_s, add_s, fp16_s = json.loads(times_file.read_text())
        print(f"IVF-PQ index and fp16 file loaded from {ivf_file.parent} (built by an earlier run)")
    else:
        rng = np.random.default_rng(args.seed)
        sample = vectors[np.sort(rng.choice(n, min(n, args.train_size), replace=False))]
        ivf, train_s = timed(partial(train_ivfpq, nlist=nlist, pq_m=pq_m, seed=args.seed), sample)
        del sample
        _, add_s = timed(lambda: [ivf.add(vectors[s : s + 100_000]) for s in range(0, n, 100_000)])
        fp16_file.parent.mkdir(parents=True, exist_ok=True)
        blocks = (vectors[s : s + 100_000] for s in range(0, n, 100_000))
        fp16, fp16_s = timed(partial(write_fp16_vectors, count=n, dim=dim, progress=False), blocks, fp16_file)
        faiss.write_index(ivf, str(ivf_file))
        times_file.write_text(json.dumps([train_s, add_s, fp16_s]))
    index = RerankedIVFPQ(ivf, fp16)
    print(
        f"IVF{nlist},PQ{pq_m} + fp16 re-rank: train {train_s:.1f} s ({args.train_size:,} vectors), add {add_s:.1f} s, "
        f"fp16 file {fp16_s:.1f} s ({fp16_file.stat().st_size / 2**30:.2f} GiB on disk); codes "
        f"{ivf.code_size} B + 8 B id per vector = {n * (ivf.code_size + 8) / 2**30:.2f} GiB in RAM"
    )
    rows = []
    for nprobe in [int(x) for x in args.nprobes.split(",")]:
        for candidates in [int(x) for x in args.candidates.split(",")]:
            index.nprobe, index.candidates = nprobe, candidates
            (_, approx), batched_s = timed(index.search, queries, args.k)
            row = {
                "index": f"IVF{nlist},PQ{pq_m}+rerank",
                "nprobe": nprobe,
                "candidates": candidates,
                "train_s": train_s,
                "add_s": add_s,
                "recall": recall_at(approx, truth),
                "batched_qps": len(queries) / batched_s,
                "single_qps": single_qps(index, queries, args.k, min(len(queries), 200)),
            }
            rows.append(row)
            print(
                f"  nprobe {nprobe:>3}, candidates {candidates:>4}: recall@{args.k} {row['recall']:.3f}, "
                f"batched {row['batched_qps']:.0f} q/s, single {row['single_qps']:.0f} q/s",
                flush=True,
            )
    return rows


def hnsw_graph(vectors: np.ndarray, graph: Path, args) -> tuple[object | None, dict]:
    """The finished graph's path, or the graph after adding up to ``--build-budget-s`` of 50k-row steps (saved).

    Returns ``(None, progress)`` when the graph is still incomplete or only building was asked for.
    """
    n, dim = vectors.shape
    done_file = graph.with_suffix(".json")
    built = json.loads(done_file.read_text()) if graph.exists() and done_file.exists() else {"rows": 0, "build_s": 0.0}
    if built["rows"] == n:
        return (None if args.phase == "build" else graph), built  # loaded later, once the flat index is freed
    if args.phase == "search":
        raise SystemExit(f"{graph} holds {built['rows']:,} of {n:,} rows; run --phase build first")
    if built["rows"]:
        hnsw = faiss.read_index(str(graph))
    else:
        hnsw = faiss.IndexHNSWFlat(dim, args.m, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = args.ef_construction
    started = time.perf_counter()
    while built["rows"] < n and time.perf_counter() - started < args.build_budget_s:
        stop = min(built["rows"] + 50_000, n)
        _, seconds = timed(hnsw.add, vectors[built["rows"] : stop])
        built = {"rows": stop, "build_s": built["build_s"] + seconds}
        print(f"HNSW{args.m}: {stop:,}/{n:,} rows, {built['build_s']:.0f} s of graph building so far", flush=True)
    graph.parent.mkdir(parents=True, exist_ok=True)
    faiss.write_index(hnsw, str(graph))
    done_file.write_text(json.dumps(built))
    if built["rows"] < n:
        print(f"graph saved to {graph} ({built['rows']:,}/{n:,} rows); run --phase build again to continue")
        return None, built
    return (None if args.phase == "build" else hnsw), built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200_000, help="vectors (synthetic source)")
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--single", type=int, default=30, help="queries timed one by one for exact search")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--m", type=int, default=64)
    parser.add_argument("--ef-construction", type=int, default=40)
    parser.add_argument("--ef-search", default="16,64,128,256")
    parser.add_argument("--source", default="synthetic")
    parser.add_argument("--questions", default="../shared/data/qa/nq_test_1000.jsonl")
    parser.add_argument(
        "--phase",
        choices=["all", "build", "search", "exact"],
        default="all",
        help="build: HNSW graph only; search: needs a finished graph; exact: no HNSW at all",
    )
    parser.add_argument("--build-budget-s", type=float, default=420, help="stop adding to the graph after this")
    parser.add_argument("--cache", default=os.environ.get("SEARCHENV_BENCH_CACHE", "/tmp/searchenv-bench"))
    parser.add_argument(
        "--extra",
        action="append",
        default=[],
        help="also measure a faiss index_factory string, e.g. SQfp16 or IVF1024,PQ64 (repeatable)",
    )
    parser.add_argument("--nprobe", type=int, default=32, help="IVF lists probed per query for --extra IVF indexes")
    parser.add_argument("--train-size", type=int, default=100_000, help="training sample for --extra indexes")
    parser.add_argument(
        "--ivfpq", type=int, default=0, help="also measure e5-ivfpq (IVF-PQ + fp16 re-rank) with this nlist"
    )
    parser.add_argument("--nprobes", default="16,32,64", help="nprobe sweep for --ivfpq")
    parser.add_argument(
        "--candidates", default="3,100,300,1000", help="re-rank depth sweep for --ivfpq (3 = no re-rank)"
    )
    parser.add_argument("--e5-index", default="../shared/data/corpus/flashrag_sample_e5_flat.index")
    parser.add_argument("--json", default=None, help="append results as one JSON line to this file")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    base = rss_gb()
    if args.source == "synthetic":
        data = clustered_vectors(args.n + args.queries, args.dim, args.seed)
        vectors, queries = data[: args.n], np.ascontiguousarray(data[args.n :])
        label = f"synthetic clustered {args.n:,} × {args.dim}"
    elif args.source == "e5-like":
        data = e5_like_vectors(args.n + args.queries, Path(args.e5_index), args.seed)
        vectors, queries = data[: args.n], np.ascontiguousarray(data[args.n :])
        label = f"e5-like clustered {args.n:,} × {data.shape[1]} (mean/covariance of real e5 vectors)"
    else:
        vectors, queries = real_vectors(Path(args.source), Path(args.questions), args.queries)
        label = f"real vectors {len(vectors):,} × {vectors.shape[1]} from {args.source}"
    n, dim = vectors.shape
    print(f"# {label}; {len(queries)} queries; faiss {faiss.__version__}, {faiss.omp_get_max_threads()} threads")
    result: dict = {"label": label, "n": n, "dim": dim, "queries": len(queries), "threads": faiss.omp_get_max_threads()}
    graph = Path(args.cache) / f"hnsw{args.m}-efc{args.ef_construction}-{args.source.replace('/', '_')}-{n}-{dim}.faiss"

    hnsw = None
    if args.phase != "exact":
        hnsw, built = hnsw_graph(vectors, graph, args)
        if hnsw is None:
            return
        result["hnsw_build_s"], result["hnsw_index_gb"] = built["build_s"], graph.stat().st_size / 2**30
        print(
            f"HNSW{args.m} efConstruction {args.ef_construction}: build {built['build_s']:.1f} s (sum over runs), "
            f"index file {result['hnsw_index_gb']:.2f} GB"
        )

    before = rss_gb()
    flat = faiss.IndexFlatIP(dim)
    _, result["flat_build_s"] = timed(flat.add, vectors)
    result["flat_memory_gb"] = rss_gb() - before
    (_, truth), result["flat_batched_s"] = timed(flat.search, queries, args.k)
    result["flat_batched_qps"] = len(queries) / result["flat_batched_s"]
    result["flat_single_qps"] = single_qps(flat, queries, args.k, args.single)
    result["gemm_s"] = gemm_floor(queries, vectors)
    result["gemm_qps"] = len(queries) / result["gemm_s"]
    print(
        f"Flat: add {result['flat_build_s']:.1f} s, +{result['flat_memory_gb']:.2f} GB, batched "
        f"{result['flat_batched_qps']:.1f} q/s, single {result['flat_single_qps']:.2f} q/s; "
        f"GEMM floor {result['gemm_qps']:.1f} q/s"
    )

    del flat  # peak memory: the data, then one index at a time
    if isinstance(hnsw, Path):
        hnsw = faiss.read_index(str(hnsw))
        print(f"HNSW graph ({n:,} rows) loaded from {graph}")
    result["hnsw"] = []
    for ef in [int(e) for e in args.ef_search.split(",")] if hnsw is not None else []:
        hnsw.hnsw.efSearch = ef
        (_, approx), batched_s = timed(hnsw.search, queries, args.k)
        row = {
            "ef_search": ef,
            "recall": recall_at(approx, truth),
            "batched_qps": len(queries) / batched_s,
            "single_qps": single_qps(hnsw, queries, args.k, min(len(queries), 300)),
        }
        result["hnsw"].append(row)
        print(
            f"HNSW efSearch {ef:>3}: recall@{args.k} {row['recall']:.3f}, batched {row['batched_qps']:.0f} q/s, "
            f"single {row['single_qps']:.0f} q/s"
        )
    result["reranked"] = measure_reranked(vectors, queries, truth, args) if args.ivfpq else []
    result["extra"] = [measure_factory(spec, vectors, queries, truth, args) for spec in args.extra]
    result["process_rss_gb"] = rss_gb() - base
    if args.json:
        with open(args.json, "a") as handle:
            handle.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
