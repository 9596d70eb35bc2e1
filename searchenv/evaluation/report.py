"""Turn transcript records into the papers' tables: per-dataset metrics, Table-4-shaped EM with averages, the
train-engine x test-engine matrix (the study's Table 5), a CSV and plots.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "GENERAL_QA",
    "METRICS",
    "MULTI_HOP",
    "canonical_dataset",
    "dataset_group",
    "engine_matrix",
    "format_value",
    "markdown_report",
    "plot_health",
    "plot_summary",
    "series_colors",
    "shown_metrics",
    "summarize",
    "write_csv",
]

GENERAL_QA = ("nq", "triviaqa", "popqa")
MULTI_HOP = ("hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
_ALIASES = {"2wiki": "2wikimultihopqa", "trivia": "triviaqa"}

#: Summary columns: (key, header, how many decimals).
METRICS = (
    ("n", "n", 0),
    ("failed", "failed searches (not counted)", 0),
    ("em", "EM", 3),
    ("f1", "F1", 3),
    ("cem", "cover-EM", 3),
    ("recall", "retrieval recall", 3),
    ("searches", "valid searches", 2),
    ("invalid", "invalid actions", 2),
    ("tokens", "response tokens", 1),
    ("answer_rate", "answer rate", 3),
    ("search_rate", "search rate", 3),
    ("think_words", "think words", 1),
    ("think_repetition", "think repetition", 3),
    ("duplicate_searches", "duplicate searches", 3),
    ("judge", "ACC_L", 3),
    ("samples", "samples / question", 0),
    ("pass_at_k", "pass@k (any sample right)", 3),
)
#: Columns shown only when some row has them: an LLM judge ran, or several samples were drawn per question.
_OPTIONAL = ("judge", "samples", "pass_at_k")


def canonical_dataset(dataset: str) -> str | None:
    """The paper dataset a name or file stem refers to (``nq_test_1000`` -> ``nq``), or None."""
    name = dataset.lower()
    for alias, full in _ALIASES.items():
        if name.startswith(alias) and not name.startswith(full):
            name = full + name[len(alias) :]
    return next((n for n in GENERAL_QA + MULTI_HOP if name == n or name.startswith((n + "_", n + "-"))), None)


def dataset_group(dataset: str) -> str | None:
    """``"general"`` or ``"multihop"`` for the papers' seven sets (names, or file stems such as nq_test_1000)."""
    name = canonical_dataset(dataset)
    return None if name is None else "general" if name in GENERAL_QA else "multihop"


def _mean(values: Iterable[float | None]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return sum(present) / len(present) if present else None


def search_failed(record: Mapping[str, Any]) -> bool:
    """Whether a search of this episode could not be served: such an episode measures the service, not the model,
    so it is no result (the runner plays it again on resume)."""
    return bool(record.get("num_failed_searches"))


def _pass_at_k(records: Sequence[Mapping[str, Any]]) -> tuple[int | None, float | None]:
    """``(k, pass@k)``: the most samples drawn for one question and the share of questions with some sample
    right (EM 1); ``(None, None)`` when each question was played once (pass@1 is the EM column)."""
    if not any(r.get("sample") for r in records):  # one sample a question (records older than samples included)
        return None, None
    by_question: dict[str, list[float]] = defaultdict(list)
    for r in records:
        by_question[r["id"]].append(float(r["em"]))
    k = max((len(ems) for ems in by_question.values()), default=0)
    if k < 2:
        return None, None
    return k, sum(max(ems) == 1.0 for ems in by_question.values()) / len(by_question)


def summarize(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (policy, method, retriever, dataset), in first-seen order; every metric is a mean over
    episodes (over every sample, when several were drawn per question), pass@k over questions."""
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = defaultdict(list)
    for r in records:
        groups[(r["policy"], r["method"], r["retriever"], r["dataset"])].append(r)
    rows = []
    for (policy, method, retriever, dataset), cell in groups.items():
        rs = [r for r in cell if not search_failed(r)]
        samples, pass_at_k = _pass_at_k(rs)
        rows.append(
            {
                "policy": policy,
                "method": method,
                "retriever": retriever,
                "dataset": dataset,
                "train_retriever": cell[0].get("train_retriever"),
                "n": len(rs),
                "failed": len(cell) - len(rs),
                "em": _mean(r["em"] for r in rs),
                "f1": _mean(r["f1"] for r in rs),
                "cem": _mean(r["cem"] for r in rs),
                "recall": _mean(r["retrieval_hit"] for r in rs),
                "searches": _mean(r["num_searches"] for r in rs),
                "invalid": _mean(r["num_invalid"] for r in rs),
                "tokens": _mean(r["response_tokens"] for r in rs),
                # records written before 0.2.0 say "answered" instead of naming the end reason
                "answer_rate": _mean(
                    float(r.get("end_reason", "answer" if r.get("answered") else None) == "answer") for r in rs
                ),
                # reasoning health (records written before these metrics existed leave them empty)
                "search_rate": _mean(float(r["num_searches"] > 0) for r in rs),
                "think_words": _mean(r.get("think_words") for r in rs),
                "think_repetition": _mean(r.get("think_repetition") for r in rs),
                "duplicate_searches": _mean(r.get("duplicate_search_rate") for r in rs),
                "judge": _mean(r.get("judge") for r in rs),
                "samples": samples,
                "pass_at_k": pass_at_k,
            }
        )
    return rows


def format_value(value: Any, digits: int) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def write_csv(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = ["policy", "method", "retriever", "train_retriever", "dataset", *(k for k, _, _ in METRICS)]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def _datasets_in_order(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The papers' order (general QA, then multi-hop), other datasets after them in first-seen order."""
    seen = list(dict.fromkeys(r["dataset"] for r in rows))
    order = GENERAL_QA + MULTI_HOP

    def rank(d: str) -> tuple[int, int]:
        name = canonical_dataset(d)
        return (order.index(name) if name else len(order), seen.index(d))

    return sorted(seen, key=rank)


def _table4(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """EM (and retrieval recall) per dataset, one line per (policy, method, retriever), with group averages."""
    datasets = _datasets_in_order(rows)
    cells: dict[tuple[str, str, str], dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for r in rows:
        cells[(r["policy"], r["method"], r["retriever"])][r["dataset"]] = r
    groups = [("general-QA avg", "general"), ("multi-hop avg", "multihop")]
    present = [(label, g) for label, g in groups if any(dataset_group(d) == g for d in datasets)]
    header = ["policy", "method", "retriever", *datasets, *(label for label, _ in present), "avg"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (policy, method, retriever), by_dataset in cells.items():

        def pair(rs: Sequence[Mapping[str, Any]]) -> str:
            recall, em = _mean(r["recall"] for r in rs), _mean(r["em"] for r in rs)
            return f"{format_value(recall, 3)} / {format_value(em, 3)}" if rs else "—"

        values = [pair([by_dataset[d]]) if d in by_dataset else "—" for d in datasets]
        for _, g in present:
            values.append(pair([by_dataset[d] for d in datasets if d in by_dataset and dataset_group(d) == g]))
        values.append(pair(list(by_dataset.values())))
        lines.append("| " + " | ".join([policy, method, retriever, *values]) + " |")
    return lines


def engine_matrix(rows: Sequence[Mapping[str, Any]], method: str = "agent") -> list[str]:
    """Mean EM over datasets: rows = policy (its training engine), columns = test engine (study Table 5)."""
    chosen = [r for r in rows if r["method"] == method]
    engines = list(dict.fromkeys(r["retriever"] for r in chosen))
    policies = list(dict.fromkeys(r["policy"] for r in chosen))
    if len(engines) < 2:
        return []
    lines = ["| policy (train engine) | " + " | ".join(engines) + " |", "|" + "---|" * (len(engines) + 1)]
    for policy in policies:
        mine = [r for r in chosen if r["policy"] == policy]
        trained = mine[0].get("train_retriever") or "?"
        values = [format_value(_mean(r["em"] for r in mine if r["retriever"] == e), 3) for e in engines]
        lines.append(f"| {policy} ({trained}) | " + " | ".join(values) + " |")
    return lines


def shown_metrics(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, int]]:
    """The :data:`METRICS` columns a table of ``rows`` shows: every one, but ACC_L, samples and pass@k only when some
    row has them (a judge ran, several samples were drawn)."""
    return [(k, h, d) for k, h, d in METRICS if k not in _OPTIONAL or any(r[k] is not None for r in rows)]


def markdown_report(rows: Sequence[Mapping[str, Any]], notes: Sequence[str] = ()) -> str:
    """The report: Table-4-shaped recall / EM, the engine matrix when there is one, and every metric per dataset."""
    out = ["# Evaluation report", ""]
    out += [f"- {n}" for n in notes]
    out += ["", "## Retrieval recall / EM per dataset (study Table 4 layout)", "", *_table4(rows), ""]
    matrix = engine_matrix(rows)
    if matrix:
        out += ["## Train engine x test engine: mean EM (study Table 5 layout)", "", *matrix, ""]
    shown = shown_metrics(rows)
    header = ["policy", "method", "retriever", "dataset", *(h for _, h, _ in shown)]
    out += ["## All metrics", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        values = [format_value(r[k], d) for k, _, d in shown]
        out.append("| " + " | ".join([r["policy"], r["method"], r["retriever"], r["dataset"], *values]) + " |")
    return "\n".join(out) + "\n"


def series_colors(n: int) -> list[tuple[float, ...]]:
    """``n`` distinct bar colours: matplotlib's default cycle repeats after 10, and a policy x method x retriever
    plot easily has 12 series (two models, three methods, two engines) that must not share a colour."""
    from matplotlib import colormaps

    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    return [colormaps["turbo"](i / (n - 1)) for i in range(n)]


def plot_summary(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Bars of EM, retrieval recall and valid searches per dataset for every (policy, method, retriever)."""
    panels = (("em", "EM"), ("recall", "retrieval recall"), ("searches", "valid searches / episode"))
    return _plot_bars(rows, panels, path)


def plot_health(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Reasoning health per dataset for every (policy, method, retriever): the share of episodes that searched,
    think words, repeated 4-grams in the think text, and the share of searches repeating an earlier query."""
    panels = (
        ("search_rate", "episodes that searched"),
        ("think_words", "think words / episode"),
        ("think_repetition", "repeated 4-grams in think"),
        ("duplicate_searches", "duplicate searches (share)"),
    )
    return _plot_bars(rows, panels, path)


def _plot_bars(rows: Sequence[Mapping[str, Any]], panels: Sequence[tuple[str, str]], path: str | Path) -> Path:
    """One panel of bars per (key, title): per dataset, one bar per (policy, method, retriever)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = _datasets_in_order(rows)
    series = list(dict.fromkeys((r["policy"], r["method"], r["retriever"]) for r in rows))
    figure, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.6))
    width = 0.8 / max(1, len(series))
    colors = series_colors(len(series))
    for axis, (key, title) in zip(axes, panels):
        for s, name in enumerate(series):
            mine = {r["dataset"]: r[key] for r in rows if (r["policy"], r["method"], r["retriever"]) == name}
            values = [mine.get(d) or 0.0 for d in datasets]
            positions = [i + s * width - 0.4 + width / 2 for i in range(len(datasets))]
            axis.bar(positions, values, width, label=" / ".join(name), color=colors[s])
        axis.set_xticks(range(len(datasets)))
        axis.set_xticklabels(datasets, rotation=20, fontsize=7)
        axis.set_title(title, fontsize=9)
    axes[0].legend(fontsize=6)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
