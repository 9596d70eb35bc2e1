"""What a learning run shows, read from its evaluation transcripts and training logs.

- :func:`per_question_rows`: one row per policy × mode × held-out question (``policy,mode,id,hops,em,searches``),
  the table every other number is computed from;
- :func:`pass_at_k_rows`: per policy and question, how many of its samples at T = 1 were right (pass@k and
  mean EM at T = 1 come from them: sharpening raises the second, not the first);
- :func:`summary_markdown`: EM, searches and answer rate per policy and mode; the paired comparisons the claim
  rests on (``rl`` against ``sft``, ``placebo``, ``base`` and every RAG row, and the second seed against ``sft``),
  each with its 95% bootstrap interval (:func:`searchenv.evaluation.paired.paired_bootstrap`); EM and pass@k by
  hop count;
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
    "SAMPLE_COLUMNS",
    "QuestionRow",
    "pass_at_k_rows",
    "read_transcripts",
    "plot_hops",
    "plot_training",
    "per_question_rows",
    "read_rows",
    "summary_markdown",
    "write_rows",
]

#: The columns of ``per_question.csv``.
COLUMNS = ("policy", "mode", "id", "hops", "em", "searches")
#: The columns of ``pass_at_4.csv``: samples played at T = 1 and how many were right, per policy and question.
SAMPLE_COLUMNS = ("policy", "id", "hops", "samples", "correct")
QuestionRow = dict[str, Any]


def read_transcripts(folder: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of one ``searchenv eval`` output folder (``transcripts.jsonl``)."""
    path = Path(folder) / "transcripts.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def pass_at_k_rows(records: Iterable[Mapping[str, Any]], hops: Mapping[str, int], dataset: str) -> list[QuestionRow]:
    """Per policy and question of one dataset: the number of sampled episodes and how many scored EM 1."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for record in records:
        cell = counts[(record["policy"], str(record["id"]))]
        cell[0] += 1
        cell[1] += int(float(record["em"]) >= 1.0)
    rows = [
        {"policy": policy, "id": f"{dataset}/{qid}", "hops": hops[qid], "samples": n, "correct": k}
        for (policy, qid), (n, k) in counts.items()
    ]
    rows.sort(key=lambda r: (r["policy"], r["id"]))
    return rows


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
    """Write ``per_question.csv`` rows (or ``pass_at_4.csv`` rows: the columns follow the first row)."""
    columns = SAMPLE_COLUMNS if rows and "samples" in rows[0] else COLUMNS
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
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


def summary_markdown(
    rows: Sequence[QuestionRow], samples: Sequence[QuestionRow] = (), focus: str = "rl", seed: int = 0
) -> str:
    """The run's summary: per-cell means, the paired comparisons of ``focus``'s agent row (and of every other
    ``<focus>_seed*`` agent row against ``sft``), EM by hop count, and pass@k by hop count from ``samples``."""
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
    for other_seed in (c for c in cells if c[0].startswith(f"{focus}_seed") and c[1] == "agent"):
        if ("sft", "agent") in scores:
            d = paired_bootstrap(scores[other_seed], scores[("sft", "agent")], seed=seed)
            out += [
                f"`{other_seed[0]}` agent against `sft` agent: {d} ({'excludes' if d.excludes_zero else 'holds'} 0, "
                f"n = {d.n})",
                "",
            ]
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
    if samples:
        k = max(r["samples"] for r in samples)
        out += [
            "",
            f"## pass@{k} and mean EM at T = 1, agent (pass@{k} / mean EM)",
            "",
            "| policy | all | " + " | ".join(f"{h} hop{'s' if h > 1 else ''}" for h in hop_counts) + " |",
            "|---|---|" + "---|" * len(hop_counts),
        ]
        for policy in sorted({r["policy"] for r in samples}):
            mine = [r for r in samples if r["policy"] == policy]
            parts = []
            for h in (None, *hop_counts):
                cell = [r for r in mine if h is None or r["hops"] == h]
                if not cell:
                    parts.append("–")
                    continue
                passed = sum(r["correct"] > 0 for r in cell) / len(cell)
                mean = sum(r["correct"] / r["samples"] for r in cell) / len(cell)
                parts.append(f"{passed:.2f} / {mean:.2f}")
            out.append(f"| {policy} | " + " | ".join(parts) + " |")
    return "\n".join(out) + "\n"


def _log(path: str | os.PathLike[str]) -> list[dict[str, float]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def plot_training(logs: Mapping[str, str | os.PathLike[str]], png: str | os.PathLike[str]) -> None:
    """Pass rate, informative-group fraction, validation EM and its three-hop part over RL steps, one line per run
    (label → log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("pool/pass_rate", "pass rate at T = 1 (sampled)"),
        ("pool/informative_fraction", "groups with differing rewards"),
        ("val/em", "validation EM (greedy, held-out train)"),
        ("val/em_3hop", "validation EM, 3 hops"),
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
