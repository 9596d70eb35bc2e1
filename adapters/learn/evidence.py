"""What a learning run shows, read from its evaluation transcripts and training logs.

- :func:`per_question_rows`: one row per policy × mode × held-out question (``policy,mode,id,hops,em,searches``),
  the table every other number is computed from;
- :func:`summary_markdown`: EM, searches and answer rate per policy and mode; the paired comparisons the claim
  rests on (``rl`` against ``sft``, ``rl_random``, ``base`` and every RAG row), each with its 95% bootstrap
  interval (:func:`searchenv.evaluation.paired.paired_bootstrap`); EM by hop count;
- :func:`plot_training` and :func:`plot_hops`: the curves over RL steps (reward, held-out validation EM, searches
  per episode, answer rate) and EM by hop count.
"""

from __future__ import annotations

import csv
import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from searchenv.evaluation.paired import paired_bootstrap

__all__ = [
    "COLUMNS",
    "QuestionRow",
    "plot_hops",
    "plot_training",
    "per_question_rows",
    "read_rows",
    "summary_markdown",
    "write_rows",
]

#: The columns of ``per_question.csv``.
COLUMNS = ("policy", "mode", "id", "hops", "em", "searches")
QuestionRow = dict[str, Any]


def per_question_rows(records: Iterable[Mapping[str, Any]], hops: Mapping[str, int], dataset: str) -> list[QuestionRow]:
    """One row per evaluation record of one dataset: ``id`` is ``<dataset>/<question id>`` (two worlds share
    question ids), ``hops`` comes from the dataset's metadata (question id → hops), ``em`` and ``searches`` from the
    environment's own record."""
    rows = [
        {
            "policy": record["policy"],
            "mode": record["method"],
            "id": f"{dataset}/{record['id']}",
            "hops": hops[str(record["id"])],
            "em": float(record["em"]),
            "searches": int(record["num_searches"]),
        }
        for record in records
    ]
    rows.sort(key=lambda r: (r["policy"], r["mode"], r["id"]))
    return rows


def write_rows(rows: Sequence[QuestionRow], path: str | os.PathLike[str]) -> None:
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows({k: (int(v) if k == "em" else v) for k, v in row.items()} for row in rows)


def read_rows(path: str | os.PathLike[str]) -> list[QuestionRow]:
    with Path(path).open(newline="", encoding="utf-8") as handle:
        return [
            {**row, "hops": int(row["hops"]), "em": float(row["em"]), "searches": int(row["searches"])}
            for row in csv.DictReader(handle)
        ]


def _scores(rows: Sequence[QuestionRow]) -> dict[tuple[str, str], dict[str, float]]:
    table: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for row in rows:
        table[(row["policy"], row["mode"])][row["id"]] = row["em"]
    return table


def summary_markdown(rows: Sequence[QuestionRow], focus: str = "rl", seed: int = 0) -> str:
    """The run's summary: per-cell means, the paired comparisons of ``focus``'s agent row, EM by hop count."""
    scores = _scores(rows)
    cells = sorted(scores)
    lines = ["| policy | mode | n | EM | searches / episode |", "|---|---|---|---|---|"]
    for policy, mode in cells:
        cell = [r for r in rows if r["policy"] == policy and r["mode"] == mode]
        em = sum(r["em"] for r in cell) / len(cell)
        searches = sum(r["searches"] for r in cell) / len(cell)
        lines.append(f"| {policy} | {mode} | {len(cell)} | {em:.3f} | {searches:.2f} |")
    out = ["## EM per policy and mode (greedy, held-out questions)", "", *lines, ""]
    target = (focus, "agent")
    if target in scores:
        out += [
            f"## Paired differences of `{focus}` agent EM (95% bootstrap intervals over questions)",
            "",
            "| against | n | their EM | difference [95% CI] | excludes 0 |",
            "|---|---|---|---|---|",
        ]
        for other in cells:
            if other == target:
                continue
            d = paired_bootstrap(scores[target], scores[other], seed=seed)
            out.append(
                f"| {other[0]} {other[1]} | {d.n} | {d.b_mean:.3f} | {d} | {'yes' if d.excludes_zero else 'no'} |"
            )
        out.append("")
    hop_counts = sorted({r["hops"] for r in rows})
    out += [
        "## EM by hop count",
        "",
        "| policy | mode | " + " | ".join(f"{h} hop{'s' if h > 1 else ''} (n)" for h in hop_counts) + " |",
        "|---|---|" + "---|" * len(hop_counts),
    ]
    for policy, mode in cells:
        parts = []
        for h in hop_counts:
            cell = [r["em"] for r in rows if r["policy"] == policy and r["mode"] == mode and r["hops"] == h]
            parts.append(f"{sum(cell) / len(cell):.2f} ({len(cell)})" if cell else "–")
        out.append(f"| {policy} | {mode} | " + " | ".join(parts) + " |")
    return "\n".join(out) + "\n"


def _log(path: str | os.PathLike[str]) -> list[dict[str, float]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def plot_training(logs: Mapping[str, str | os.PathLike[str]], png: str | os.PathLike[str]) -> None:
    """Reward, validation EM, searches per episode and answer rate over RL steps, one line per run (label → log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("reward", "training reward (EM, sampled)"),
        ("val/em", "held-out validation EM (greedy)"),
        ("num_searches", "searches / episode (sampled)"),
        ("val/answer_rate", "validation answer rate"),
    )
    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.2))
    for label, path in logs.items():
        rows = _log(path)
        for axis, (key, title) in zip(axes, panels):
            points = [(r["step"], r[key]) for r in rows if key in r]
            if points:
                axis.plot(*zip(*points), marker=".", label=label)
            axis.set_title(title, fontsize=9)
            axis.set_xlabel("RL step")
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(png, dpi=110)
    plt.close(figure)


def plot_hops(rows: Sequence[QuestionRow], png: str | os.PathLike[str], mode: str = "agent") -> None:
    """EM by hop count, one bar per policy (``mode`` rows), with the number of questions under each group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = sorted({r["policy"] for r in rows if r["mode"] == mode})
    hop_counts = sorted({r["hops"] for r in rows})
    figure, axis = plt.subplots(figsize=(7, 3.4))
    width = 0.8 / max(len(policies), 1)
    for i, policy in enumerate(policies):
        means = []
        for h in hop_counts:
            cell = [r["em"] for r in rows if r["policy"] == policy and r["mode"] == mode and r["hops"] == h]
            means.append(sum(cell) / len(cell) if cell else 0.0)
        axis.bar([h + (i - (len(policies) - 1) / 2) * width for h in hop_counts], means, width, label=policy)
    counts = {h: len({r["id"] for r in rows if r["hops"] == h}) for h in hop_counts}
    axis.set_xticks(hop_counts, [f"{h} hop{'s' if h > 1 else ''}\n(n={counts[h]})" for h in hop_counts])
    axis.set_ylabel(f"EM ({mode}, greedy)")
    axis.set_ylim(0, 1)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(png, dpi=110)
    plt.close(figure)
