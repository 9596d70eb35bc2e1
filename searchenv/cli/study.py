"""``searchenv study``: the search-engine comparison of the Search-R1 study, without training a model.

For every dataset and engine it retrieves the top-``max(k)`` passages of each question and reports retrieval
recall@k — a normalised gold answer occurs, as whole tokens, in the top-``k`` passages (the "R" column of the
study's results table) — together with batched throughput (QPS) and single-query latency, measured after a
full untimed warm-up pass. The result is a CSV (one row per dataset × engine × k), a markdown table and a PNG
plot in ``--output``; the CSV and the table are rewritten as each engine finishes, so an engine that fails later
(an encoder that cannot load) costs only its own rows.

Indexes are built once and cached under ``--index-root`` (dense vectors are embedded in resumable shards),
so a killed run restarts where it stopped and a second run only searches. ``--index-path`` points the dense
engines at a prebuilt faiss file of the corpus instead (e.g. Search-R1's ``e5_Flat.index`` of wiki-18).
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

from searchenv.cache import cache_root
from searchenv.cli.options import add_dataset_arguments, add_retriever_arguments, retriever_options_by_engine
from searchenv.cli.values import comma_list, non_negative_int, positive_int, positive_ints
from searchenv.corpus import Corpus
from searchenv.extras import require_extra
from searchenv.types import QAExample, Retriever

__all__ = ["StudyRow", "add_study_parser", "evaluate_engine", "markdown_table", "run_study", "write_csv", "write_plot"]

DEFAULT_ENGINES = ["random", "bm25", "e5-hnsw", "e5-exact"]
#: The engine options the study has flags for (the others: --retriever-option).
STUDY_FLAGS = ("engine", "encoder", "index_path", "ef_search", "seed")


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


def add_study_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``study`` subcommand on an ``argparse`` subparsers object."""
    study = subparsers.add_parser(
        "study",
        help="compare search engines (random, bm25, e5-hnsw, e5-exact) by answer recall@k, QPS and latency",
        description="Compare search engines by answer recall@k, batched queries/s and single-query latency on QA "
        "datasets, without training a model (the retrieval side of the Search-R1 study). See docs/study.md.",
    )
    add_dataset_arguments(
        study,
        several_datasets=True,
        required=True,
        split_help="split of named datasets (files have none)",
        limit_help="first N questions of each dataset",
    )
    add_retriever_arguments(
        study,
        several=True,
        default=DEFAULT_ENGINES,
        corpus_help="corpus jsonl searched for every dataset except 'world' (which brings its own)",
        flags=STUDY_FLAGS,
        names=["--engines"],
    )
    study.add_argument("--k", type=positive_ints, default=[1, 3, 5], help="comma-separated cut-offs")
    study.add_argument("--output", required=True, help="directory for study.csv, study.md and study.png")
    study.add_argument(
        "--no-plot", action="store_true", help="write no study.png (plots need matplotlib: the 'plot' extra)"
    )
    study.add_argument(
        "--index-root",
        default=None,
        help="cache for vectors and indexes (default: $SEARCHENV_CACHE_DIR/indexes, else ~/.cache/searchenv/indexes)",
    )
    study.add_argument("--batch-size", type=positive_int, default=64, help="questions per search call (QPS)")
    study.add_argument(
        "--latency-queries", type=non_negative_int, default=50, help="questions searched one at a time (latency)"
    )
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
    """Search every question for ``max(ks)`` passages and score recall at each ``k``.

    The first full pass warms the engine (page cache, JIT, lazily loaded encoder) and gives the results that are
    scored; the second, identical pass is the one timed for QPS, then ``latency_queries`` questions are searched
    one at a time. Timing a cold first pass would report load time as search speed.
    """
    from searchenv.env.step_rules import search_options

    questions = [ex.question for ex in examples]
    golds = [ex.golden_answers for ex in examples]  # for the engines that ask (distractor, simulated)
    top = max(ks)

    def full_pass() -> list[list[Any]]:
        found: list[list[Any]] = []
        for start in range(0, len(questions), batch_size):
            end = start + batch_size
            found.extend(retriever.search(questions[start:end], top, **search_options(retriever, golds[start:end])))
        return found

    results = full_pass()
    started = time.perf_counter()
    full_pass()
    batched_s = time.perf_counter() - started
    single = questions[:latency_queries]
    started = time.perf_counter()
    for question, gold in zip(single, golds):
        retriever.search([question], top, **search_options(retriever, [gold]))
    latency_ms = 1000 * (time.perf_counter() - started) / len(single) if single else 0.0
    qps = len(questions) / batched_s if batched_s > 0 else float("inf")
    return [
        StudyRow(dataset, engine, k, len(examples), answer_recall(examples, results, k), qps, latency_ms, build_s)
        for k in ks
    ]


def _datasets(args: argparse.Namespace) -> list[str]:
    return [d for item in args.dataset for d in comma_list(what="a dataset name or file")(item)]


def check_study_arguments(args: argparse.Namespace) -> None:
    """Every check that needs no data, model or index: engine names and options, datasets, corpus, encoder, output."""
    from searchenv.components import check_dataset, check_retriever

    options = retriever_options_by_engine(args)
    for dataset in _datasets(args):
        check_dataset(dataset, args.split, args.data_dir)
        for engine in args.retrievers:
            check_retriever(engine, args.corpus, options[engine], dataset=dataset)
    if Path(args.output).exists() and not Path(args.output).is_dir():
        raise NotADirectoryError(f"--output {args.output!r} exists and is not a directory")
    if not getattr(args, "no_plot", False):  # checked now, not after every engine has run
        require_extra("plot", ("matplotlib",), "searchenv study's plot (study.png; or pass --no-plot)")


def _engine_options(engine: str, corpus: Corpus, args: argparse.Namespace) -> dict[str, Any]:
    """An engine's options from the command line, with a cache directory under ``--index-root`` for the engines
    that build an index (unless an ``index_dir`` option names one).

    With ``--index-path`` the dense engines search that prebuilt file (row i = passage i of the corpus) instead of
    embedding the corpus under ``--index-root``; a graph built from it goes to the dense engines' own cache.
    """
    from searchenv.retrievers.catalogue import ENGINES

    options = dict(retriever_options_by_engine(args)[engine])
    record = ENGINES.get(engine)
    if record is not None and record.dense:
        from searchenv.components import load_encoder
        from searchenv.retrievers.dense.embedding_cache import index_dir_for

        encoder = load_encoder(options.get("encoder"))  # one model for every dense engine (shared by name)
        options["encoder"] = encoder
        if options.get("index_path") is None:
            options.setdefault("index_dir", index_dir_for(args.index_root, corpus, encoder))
    elif engine == "bm25":
        name = f"{_stem(corpus)}-{len(corpus)}-bm25-{options.get('engine') or 'native'}-{corpus.checksum[:12]}"
        options.setdefault("index_dir", Path(args.index_root) / name)
    return options


def _stem(corpus: Corpus) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", Path(corpus.source).stem).strip("-") or "corpus"


def _study_one(
    args: argparse.Namespace, label: str, examples: list[QAExample], corpus: Corpus, engine: str
) -> list[StudyRow]:
    from searchenv.components import build_retriever

    started = time.perf_counter()
    # private instance: the study measures one engine at a time and lets each index go before the next
    retriever = build_retriever(engine, corpus, _engine_options(engine, corpus, args), shared=False)
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
    recalls = "  ".join(f"R@{r.k}={r.recall:.3f}" for r in found)
    print(
        f"  {engine:<9} {recalls}  {found[0].qps:9.1f} q/s  {found[0].mean_latency_ms:8.2f} ms/query "
        f"(index ready in {build_s:.1f} s)",
        flush=True,
    )
    return found


def run_study(args: argparse.Namespace) -> int:
    """Run the study described by parsed ``searchenv study`` arguments; print and save the table.

    Every argument is checked before anything loads. An engine (or dataset) that fails is reported and skipped;
    the others still run, their rows are saved as they finish, and the command then fails naming what broke.
    Nothing is left behind when nothing finished.
    """
    from searchenv.components import load_corpus, load_examples

    check_study_arguments(args)
    args.index_root = args.index_root or str(cache_root() / "indexes")
    out = Path(args.output)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    rows: list[StudyRow] = []
    failures: list[str] = []
    for dataset in _datasets(args):
        label = "world" if dataset == "world" else Path(dataset).stem
        try:
            examples = load_examples(dataset, args.split, data_dir=args.data_dir, limit=args.limit)
            corpus = load_corpus("world" if dataset == "world" else args.corpus)
        except Exception as exc:  # noqa: BLE001 - one broken dataset must not take the others down
            failures.append(f"dataset {label}: {type(exc).__name__}: {exc}")
            print(f"== {label}: FAILED ({failures[-1]})", flush=True)
            continue
        print(f"== {label}: {len(examples)} questions, {len(corpus)} passages ({corpus.source})", flush=True)
        for engine in args.retrievers:
            try:
                rows.extend(_study_one(args, label, examples, corpus, engine))
            except Exception as exc:  # noqa: BLE001 - as above, per engine
                failures.append(f"{engine} on {label}: {type(exc).__name__}: {exc}")
                print(f"  {engine:<9} FAILED: {type(exc).__name__}: {exc}", flush=True)
                continue
            write_csv(rows, out / "study.csv")
            (out / "study.md").write_text(markdown_table(rows))
    if not rows:
        if created and not any(out.iterdir()):
            out.rmdir()
        raise RuntimeError("no engine finished: " + "; ".join(failures))
    if not getattr(args, "no_plot", False):
        write_plot(rows, out / "study.png")
    print(markdown_table(rows))
    plot = "" if getattr(args, "no_plot", False) else f" and {out / 'study.png'}"
    print(f"wrote {out / 'study.csv'}, {out / 'study.md'}{plot}")
    if failures:
        raise RuntimeError(
            f"{len(failures)} of the runs failed ({'; '.join(failures)}); the finished engines' rows are in "
            f"{out / 'study.csv'}"
        )
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
