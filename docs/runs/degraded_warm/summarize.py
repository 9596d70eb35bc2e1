"""How the retriever shapes search behaviour under RL from the warm-started policy: a table and one plot.

Issue 33's re-run of issue 25's study. Each run is ``searchenv train-ppo`` from the same warm start (``searchenv
learn``'s ``sft/final``) with the learning recipe's GRPO settings and one retriever: ``bm25`` and ``random`` are
``searchenv learn``'s own ``rl`` and ``rl_random`` runs; ``empty`` (every search finds nothing) and ``noisy`` with
``p=1`` (every passage a random one) were run beside them. Validation (``val/...``) is the 64 held-out train
questions, played greedily every 10 steps with the retriever the run trained with. "Steps with an update" counts the
steps that had a group whose rewards were not all equal (GRPO leaves all-equal groups out)::

    python docs/runs/degraded_warm/summarize.py bm25=docs/runs/learns_issue33/rl.jsonl \\
        random=docs/runs/learns_issue33/rl_random.jsonl empty=docs/runs/degraded_warm/empty.jsonl \\
        noisy=docs/runs/degraded_warm/noisy.jsonl \\
        --plot docs/img/degraded_warm_study.png > docs/runs/degraded_warm/table.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def read_log(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return sorted((json.loads(line) for line in handle if line.strip()), key=lambda row: row["step"])


def _mean(rows: list[dict], key: str) -> float:
    values = [row[key] for row in rows if key in row]
    return sum(values) / len(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="NAME=train-ppo log (jsonl)")
    parser.add_argument("--plot", type=Path, help="write searches per episode and EM over the steps here")
    args = parser.parse_args()
    runs = {name: read_log(Path(path)) for name, path in (item.split("=", 1) for item in args.runs)}
    steps = min(max(row["step"] for row in rows) for rows in runs.values())
    print(f"Steps 1–{steps} of each run; sampled episodes (T = 1) in training, greedy ones in validation.\n")
    print("| retriever | searches / episode, steps 1–5 | last 5 | training EM, first 5 | last 5 |", end=" ")
    print("steps with an update |")
    print("|---|---|---|---|---|---|")
    for name, rows in runs.items():
        trained = [row for row in rows if "num_searches" in row and 1 <= row["step"] <= steps]
        first, last = trained[:5], trained[-5:]
        print(
            f"| {name} | {_mean(first, 'num_searches'):.2f} | {_mean(last, 'num_searches'):.2f} | "
            f"{_mean(first, 'reward/em'):.2f} | {_mean(last, 'reward/em'):.2f} | "
            f"{sum(row.get('ppo/trained_episodes', 0) > 0 for row in trained)} of {len(trained)} |"
        )
    print("\nValidation (64 held-out train questions, greedy, the run's own retriever):\n")
    print("| retriever | step | EM | searches / episode | answer rate |")
    print("|---|---|---|---|---|")
    for name, rows in runs.items():
        for row in rows:
            if "val/em" in row and row["step"] <= steps:
                print(
                    f"| {name} | {row['step']} | {row['val/em']:.3f} | {row['val/num_searches']:.2f} | "
                    f"{row['val/answer_rate']:.2f} |"
                )
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots(1, 3, figsize=(13, 3.4))
        for name, rows in runs.items():
            trained = [row for row in rows if "num_searches" in row and row["step"] <= steps]
            validated = [row for row in rows if "val/em" in row and row["step"] <= steps]
            axes[0].plot([r["step"] for r in trained], [r["num_searches"] for r in trained], ".-", label=name)
            axes[1].plot([r["step"] for r in validated], [r["val/num_searches"] for r in validated], "o-", label=name)
            axes[2].plot([r["step"] for r in validated], [r["val/em"] for r in validated], "o-", label=name)
        for axis, title in zip(
            axes, ("searches / episode (training, sampled)", "searches / episode (validation)", "validation EM")
        ):
            axis.set_title(title, fontsize=9)
            axis.set_xlabel("GRPO step")
        axes[0].legend(fontsize=8)
        figure.suptitle("SmolLM2-135M after the warm start: GRPO by retriever", fontsize=9)
        figure.tight_layout()
        figure.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
