"""The levers tried beside the learning recipe on the GPU (issue 39, Part B): the recipe's own RL command with a
few options changed, trained from the same warm start for the same time, then evaluated greedily as agents on the
same held-out worlds. ``python levers.py train RUN MINUTES`` / ``python levers.py eval RUN``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from searchenv.adapters.learn.pipeline import plan, world_folders

#: name -> options appended to the recipe's ``rl`` command (argparse keeps the last of a repeated option).
LEVERS = {
    "grpo_pool": ["--algorithm", "grpo", "--lr", "3e-5", "--replay", "0"],
    "ei_uniform": ["--no-difficulty-pool", "--informative-groups", "0"],
}


def train(run: Path, minutes: float) -> None:
    stages = {s.name: s for s in plan(run, 0, threads=2, device="cuda", rl_minutes=minutes)}
    base = list(stages["rl"].commands[0])
    children = []
    for name, extra in LEVERS.items():
        command = [*base, *extra, "--output-dir", str(run / name), "--log", str(run / "logs" / f"{name}.jsonl")]
        out = (run / "logs" / f"{name}.out").open("w")
        children.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT))
    for child in children:
        child.wait()


def evaluate(run: Path) -> None:
    stages = {s.name: s for s in plan(run, 0, threads=2, device="cuda")}
    models = ",".join(f"{name}={run / name / 'best'}" for name in LEVERS)
    children = []
    for command, world in zip(stages["eval"].commands, world_folders(run)):
        words = list(command)
        words[words.index("--model") + 1] = models
        words[words.index("--baselines") + 1] = ""
        words[words.index("--output") + 1] = str(run / f"levers-{world}")
        out = (run / "logs" / f"levers-eval-{world}.out").open("w")
        children.append(subprocess.Popen(words, stdout=out, stderr=subprocess.STDOUT))
    for child in children:
        child.wait()


if __name__ == "__main__":
    if sys.argv[1] == "train":
        train(Path(sys.argv[2]), float(sys.argv[3]))
    else:
        evaluate(Path(sys.argv[2]))
