"""Training throughput on CPU: one GRPO step of the built-in loop vs TRL's GRPOTrainer, same rollouts and sizes.

Both trainers play their episodes with :func:`searchenv.rollout.rollout` (TRL through
``rollout_func``), so the comparison isolates the update path: log-probability passes, the loss and the optimizer.
Each trainer runs in its own subprocess (``--child``) so neither inherits the other's memory or thread state.

    python bench/bench_training.py --steps 3 --json /tmp/bench_training.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ENV_KWARGS = {
    "dataset": "world",
    "retriever": "bm25",
    "reward": "format",
    "max_turns": 2,
    "topk": 2,
    "max_information_words": 40,
}


def _child(kind: str, steps: int, prompts: int, group: int, max_new_tokens: int, threads: int) -> dict:
    import torch

    from searchenv.rollout import load_policy, make_envs

    torch.set_num_threads(threads)
    model, tok = load_policy("smollm2-135m")
    per_step = prompts * group
    times, tokens = [], []
    if kind == "searchenv":
        from searchenv.adapters.ppo.trainer import PPOConfig, Trainer

        config = PPOConfig(
            algorithm="grpo",
            lr=1e-6,
            prompts_per_step=prompts,
            group_size=group,
            mini_batch_size=per_step,
            micro_batch_size=per_step,
            max_new_tokens=max_new_tokens,
            max_total_tokens=1024,
            steps=steps,
        )
        trainer = Trainer(model, tok, make_envs(per_step, **ENV_KWARGS), config)
        for _ in range(steps):
            started = time.perf_counter()
            metrics = trainer.step()
            times.append(time.perf_counter() - started)
            tokens.append(metrics["rollout/model_tokens"] * per_step)
    else:
        import trl
        from transformers import TrainerCallback

        from searchenv.adapters.trl.grpo import make_grpo_trainer

        args = trl.GRPOConfig(
            output_dir="/tmp/bench_training_trl",
            use_cpu=True,
            bf16=False,
            per_device_train_batch_size=per_step,
            num_generations=group,
            max_completion_length=1024 - 200,
            max_steps=steps,
            learning_rate=1e-6,
            beta=0.001,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            seed=0,
        )
        trainer = make_grpo_trainer(model, tok, args, ENV_KWARGS, max_new_tokens=max_new_tokens)
        stamps = []

        class Clock(TrainerCallback):
            def on_step_begin(self, *_, **__):
                stamps.append(time.perf_counter())

            def on_step_end(self, *_, **__):
                times.append(time.perf_counter() - stamps[-1])

        trainer.add_callback(Clock())
        trainer.train()
        tokens = [row["completions/mean_length"] * per_step for row in trainer.state.log_history if "loss" in row]
    return {"trainer": kind, "seconds_per_step": times, "model_tokens_per_step": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", choices=["searchenv", "trl"], default=None)
    args = parser.parse_args()
    sizes = (args.steps, args.prompts, args.group, args.max_new_tokens, args.threads)
    if args.child:
        print(json.dumps(_child(args.child, *sizes)))
        return
    env = {**os.environ, "OMP_WAIT_POLICY": "passive", "TRL_EXPERIMENTAL_SILENCE": "1"}
    results = []
    for kind in ("searchenv", "trl"):
        command = [
            sys.executable,
            __file__,
            "--child",
            kind,
            "--steps",
            str(args.steps),
            "--prompts",
            str(args.prompts),
            "--group",
            str(args.group),
            "--max-new-tokens",
            str(args.max_new_tokens),
            "--threads",
            str(args.threads),
        ]
        out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    for row in results:
        # the first step includes one-time costs (lazy allocations, the BM25 index); report the rest
        steady = row["seconds_per_step"][1:] or row["seconds_per_step"]
        row["median_seconds_per_step"] = statistics.median(steady)
        row["model_tokens_per_second"] = sum(row["model_tokens_per_step"]) / sum(row["seconds_per_step"])
        print(
            f"{row['trainer']:>9}: {row['median_seconds_per_step']:.1f} s/step, "
            f"{row['model_tokens_per_second']:.1f} model tokens/s"
        )
    ratio = results[1]["median_seconds_per_step"] / results[0]["median_seconds_per_step"]
    print(f"TRL / searchenv step time: {ratio:.2f}x")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"sizes": vars(args), "results": results, "trl_over_searchenv": ratio}, handle, indent=2)


if __name__ == "__main__":
    main()
