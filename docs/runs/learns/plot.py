"""Draw the two-stage run's curves (docs/img/learns.png) from its training log and the held-out evaluations.

Per training step (8 episodes on world train questions): reward, EM, answer rate and searches per episode, with
the stage boundary marked; over them, as points, the same measures on the world test split from ``searchenv eval``
(agent, greedy) before training, after stage 1 and after stage 2::

    python docs/runs/learns/plot.py docs/runs/learns/train.jsonl docs/img/learns.png \
        --stage1-steps 6 --eval 0=runs/learns/eval/transcripts.jsonl:base ...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

PANELS = (
    ("reward", "reward (train batch)", None),
    ("reward/em", "exact match", "em"),
    ("end_reason/answer", "answer rate", "answered"),
    ("num_searches", "searches / episode", "num_searches"),
)


def _eval_point(transcripts: Path, policy: str) -> dict[str, float]:
    rows = [json.loads(line) for line in transcripts.read_text().splitlines()]
    rows = [r for r in rows if r["policy"] == policy and r["method"] == "agent"]
    n = len(rows)
    return {
        "em": sum(r["em"] for r in rows) / n,
        "answered": sum(r["prediction"] is not None for r in rows) / n,
        "num_searches": sum(r["num_searches"] for r in rows) / n,
    }


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("log")
    parser.add_argument("png")
    parser.add_argument("--stage1-steps", type=int, default=0)
    parser.add_argument("--eval", action="append", default=[], help="STEP=TRANSCRIPTS:POLICY (agent rows)")
    args = parser.parse_args()
    rows = [json.loads(line) for line in Path(args.log).read_text().splitlines() if line.strip()]
    steps = [r["step"] for r in rows]
    points = []
    for item in args.eval:
        step, _, rest = item.partition("=")
        path, _, policy = rest.rpartition(":")
        points.append((int(step), _eval_point(Path(path), policy)))
    figure, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.3))
    for axis, (key, title, eval_key) in zip(axes, PANELS):
        values = [r.get(key, 0.0) for r in rows]
        axis.plot(steps, values, color="0.65", marker=".", linewidth=1, label="train batch")
        window = 4
        smooth = [
            sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
            for i in range(len(values))
        ]
        axis.plot(steps, smooth, color="C0", linewidth=2, label=f"mean of last {window}")
        if eval_key is not None and points:
            axis.plot(
                [s for s, _ in points],
                [p[eval_key] for _, p in points],
                "s--",
                color="C3",
                label="test split (eval, greedy)",
            )
        if args.stage1_steps:
            axis.axvline(args.stage1_steps + 0.5, color="0.3", linestyle=":", linewidth=1)
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("step")
        axis.legend(fontsize=6)
    figure.suptitle(
        "two-stage GRPO, SmolLM2-135M on the world (stage 1: search + format | stage 2: F1 + format)", fontsize=9
    )
    figure.tight_layout()
    Path(args.png).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.png, dpi=110)


if __name__ == "__main__":
    main()
