"""A training step of the built-in GRPO loop, this checkout against an earlier commit, in the same run.

Each side trains SmolLM2-135M on the generated world at one recipe's sizes (:data:`SIZES`) in its own child
process, and the two sides alternate, so both meet the same machine load. The earlier commit is checked out into a
temporary git worktree and imported from there (its top-level folders are linked into a ``searchenv`` package the
way the install maps them), so nothing of this checkout runs on its side. Both sides update on every episode (this
checkout's GRPO would leave all-equal groups out, which is less work, not a faster loop). Reported per side: the
median step, its rollout and update parts (the first step of each child, which pays one-time costs, is left out),
and the ratio.

    OMP_WAIT_POLICY=passive python bench/bench_training_step.py --baseline ea36c0d --repeats 3 --steps 4 \
        --json runs/bench_training_step.json
    OMP_WAIT_POLICY=passive python bench/bench_training_step.py --baseline 26bfe1b --repeats 1 --steps 3 --bf16 \
        --sizes learn --model runs/learns/sft/final --json runs/bench_training_step_learn.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The sizes each side trains at. ``cpu``: the CPU recipe of the time (2 questions x 4 episodes, the worked-example
#: prompt, 2 passages of <= 40 words, 2 actions of <= 32 tokens). ``learn``: the RL stage of ``searchenv learn``
#: (3 questions x 8 episodes, EM, 2 passages sharing 70 words, 6 actions of <= 80 tokens, the top 16 layers trained;
#: give ``--model`` its warm start, ``runs/learns/sft/final``, so episodes look like the recipe's and not like an
#: untrained model's; a baseline before ``trainable_layers`` existed needs ``--sizes cpu``).
SIZES = {
    "cpu": {
        "env": {"dataset": "world", "retriever": "bm25", "reward": "r1-searcher-stage1"}
        | {"protocol": "search-r1-fewshot", "max_turns": 2, "topk": 2, "max_information_words": 40},
        "config": {"algorithm": "grpo", "lr": 3e-5, "prompts_per_step": 2, "group_size": 4, "mini_batch_size": 8}
        | {"micro_batch_size": 4, "max_new_tokens": 32, "max_total_tokens": 512, "kl_coef": 0.0}
        | {"chat_template": False},
    },
    "learn": {
        "env": {"dataset": "world", "retriever": "bm25", "reward": "em", "protocol": "search-r1"}
        | {"max_turns": 6, "topk": 2, "max_information_words": 70},
        "config": {"algorithm": "grpo", "lr": 3e-5, "prompts_per_step": 3, "group_size": 8, "mini_batch_size": 24}
        | {"micro_batch_size": 8, "max_new_tokens": 80, "max_total_tokens": 1536, "kl_coef": 0.0}
        | {"chat_template": False, "trainable_layers": 16},
    },
}


def _child(steps: int, threads: int, bf16: bool, sizes: dict, model_name: str) -> dict:
    import torch

    from searchenv.adapters.ppo.trainer import PPOConfig, Trainer
    from searchenv.rollout import load_policy, make_envs

    torch.set_num_threads(threads)
    model, tokenizer = load_policy(model_name)
    same_work = {"drop_uniform_groups": False} if "drop_uniform_groups" in PPOConfig.__dataclass_fields__ else {}
    config = PPOConfig(**sizes["config"], **same_work, bf16=bf16, steps=steps)  # every episode updated on both sides
    trainer = Trainer(model, tokenizer, make_envs(config.episodes_per_step, **sizes["env"]), config)
    rows = []
    for _ in range(steps):
        metrics = trainer.step()
        rows.append({k: metrics[k] for k in ("ppo/step_seconds", "ppo/rollout_seconds", "ppo/update_seconds")})
        rows[-1]["model_tokens"] = metrics["rollout/model_tokens"]
    return {"steps": rows}


def _checkout(revision: str, scratch: Path) -> Path:
    """A folder whose ``searchenv`` package is ``revision``'s code, laid out as the install maps it."""
    tree = scratch / "tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), revision], check=True)
    package = scratch / "path" / "searchenv"
    package.mkdir(parents=True)
    for entry in (tree / "searchenv").iterdir():
        (package / entry.name).symlink_to(entry)
    for folder in ("retrievers", "reward_specs", "adapters"):
        (package / folder).symlink_to(tree / folder)
    return scratch / "path"


def _run_side(path: Path | None, args: argparse.Namespace) -> dict:
    env = {**os.environ, "OMP_WAIT_POLICY": "passive", "TOKENIZERS_PARALLELISM": "false"}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    command = [sys.executable, __file__, "--child", "--steps", str(args.steps), "--threads", str(args.threads)]
    command += ["--sizes", args.sizes, "--model", args.model] + (["--bf16"] if args.bf16 else [])
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True, cwd=path or REPO).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default="ea36c0d", help="the earlier commit to compare with")
    parser.add_argument("--repeats", type=int, default=3, help="child processes per side, alternating")
    parser.add_argument("--steps", type=int, default=4, help="training steps per child (the first is left out)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--bf16", action="store_true", help="PPOConfig(bf16=True) on both sides")
    parser.add_argument(
        "--sizes", choices=sorted(SIZES), default="cpu", help="the recipe whose sizes both sides train at"
    )
    parser.add_argument("--model", default="smollm2-135m", help="the policy both sides start from (alias or folder)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.steps, args.threads, args.bf16, SIZES[args.sizes], args.model)))
        return
    sides: dict[str, list[dict]] = {args.baseline: [], "this checkout": []}
    with tempfile.TemporaryDirectory(prefix="bench-training-step-") as scratch:
        baseline = _checkout(args.baseline, Path(scratch))
        try:
            for repeat in range(args.repeats):
                for name, path in ((args.baseline, baseline), ("this checkout", None)):
                    steps = _run_side(path, args)["steps"][1:]
                    sides[name] += steps
                    print(f"repeat {repeat + 1} {name}: " + ", ".join(f"{s['ppo/step_seconds']:.1f}" for s in steps))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(Path(scratch) / "tree")])
    summary = {}
    for name, steps in sides.items():
        summary[name] = {
            key: statistics.median(s[key] for s in steps)
            for key in ("ppo/step_seconds", "ppo/rollout_seconds", "ppo/update_seconds", "model_tokens")
        }
        parts = summary[name]
        print(
            f"{name:>14}: step {parts['ppo/step_seconds']:.1f} s (rollout {parts['ppo/rollout_seconds']:.1f}, "
            f"update {parts['ppo/update_seconds']:.1f}), {parts['model_tokens']:.0f} model tokens / episode"
        )
    old, new = (summary[name]["ppo/step_seconds"] for name in sides)
    precision = "bf16" if args.bf16 else "float32"
    print(
        f"speed-up: {old / new:.2f}x (median step, same run, {args.sizes} sizes, {args.threads} thread(s), {precision})"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "sides": sides, "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
