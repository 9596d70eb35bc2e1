"""Search behaviour per training step under each retriever, from ``train-ppo --log`` files: a table and a plot.

Issue 25's short CPU study trains the default CPU recipe once per retriever (``bm25``, ``noisy`` with ``p=1`` —
every passage a random one — and ``empty``), same seed, and asks whether the retriever changes how much the
policy searches. This reads each run's log and prints, per step, searches per episode, invalid actions per
episode and the reward, then draws searches per episode over the steps::

    python docs/runs/degraded/summarize.py docs/runs/degraded/{bm25,noisy,empty}.jsonl \
        --plot docs/img/degraded_study.png > docs/runs/degraded/table.md
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

COLUMNS = (
    ("num_searches", "searches / episode"),
    ("num_invalid", "invalid / episode"),
    ("reward/retrieval_hit", "gold retrieved"),
    ("reward", "reward"),
)


def read_log(path: Path) -> list[dict]:
    """The step records of one run, in step order."""
    with path.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return sorted((row for row in rows if "step" in row), key=lambda row: row["step"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", type=Path, help="one train-ppo --log file per retriever (named ARM.jsonl)")
    parser.add_argument("--plot", type=Path, help="write searches per episode over the steps here")
    args = parser.parse_args()
    runs = {path.stem: read_log(path) for path in args.logs}
    steps = min(len(rows) for rows in runs.values())  # compare the steps every run reached
    print(f"Steps 1–{steps} of each run (the default CPU recipe, seed 0).\n")
    print("| step | " + " | ".join(f"{arm}: {label}" for arm in runs for _, label in COLUMNS[:2]) + " |")
    print("|---" * (1 + 2 * len(runs)) + "|")
    for i in range(steps):
        cells = [f"{runs[arm][i].get(key, float('nan')):.2f}" for arm in runs for key, _ in COLUMNS[:2]]
        print(f"| {i + 1} | " + " | ".join(cells) + " |")
    print("\nMeans over those steps:\n")
    print("| retriever | " + " | ".join(label for _, label in COLUMNS) + " |")
    print("|---" * (1 + len(COLUMNS)) + "|")
    for arm, rows in runs.items():
        means = [sum(row.get(key, 0.0) for row in rows[:steps]) / steps for key, _ in COLUMNS]
        print(f"| {arm} | " + " | ".join(f"{m:.3f}" for m in means) + " |")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axis = plt.subplots(figsize=(6, 3.5))
        styles = itertools.cycle(("o-", "s--", "^:"))  # runs that overlap stay visible
        for arm, rows in runs.items():
            steps_x = [row["step"] for row in rows[:steps]]
            axis.plot(steps_x, [row["num_searches"] for row in rows[:steps]], next(styles), label=arm, alpha=0.8)
        axis.set_xlabel("GRPO step")
        axis.set_ylabel("searches per episode")
        axis.set_title("SmolLM2-135M, default CPU recipe, by retriever")
        axis.legend()
        figure.tight_layout()
        figure.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    main()
