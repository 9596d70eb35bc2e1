"""Train a causal LM on SearchQA-v0 with TRL's ``GRPOTrainer`` (multi-turn rollouts via ``rollout_func``).

Example (CPU smoke run)::

    python -m searchenv.adapters.train_trl --model smollm2-135m --max-steps 2 --num-generations 2 \\
        --per-device-train-batch-size 2 --max-completion-length 128 --output-dir runs/trl

On a GPU add ``--use-vllm`` (colocated vLLM engine, ``pip install 'searchenv[trl,vllm]'``) and raise the sizes
to Search-R1's (``--num-generations 5 --learning-rate 5e-7 --beta 0.001 --max-completion-length 4096``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any

__all__ = ["add_parser", "build_parser", "main", "run"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    env = parser.add_argument_group("environment")
    env.add_argument("--dataset", default="world")
    env.add_argument("--split", default="train")
    env.add_argument("--corpus", default=None)
    env.add_argument("--retriever", default="bm25")
    env.add_argument("--reward", default="format", help="reward spec the environment scores episodes with")
    env.add_argument("--topk", type=int, default=3)
    env.add_argument("--max-turns", type=int, default=4)
    env.add_argument("--protocol", default="search-r1")
    env.add_argument("--train-limit", type=int, default=None, help="use only the first N questions")

    model = parser.add_argument_group("model and trainer (GRPOConfig)")
    model.add_argument("--model", default="smollm2-135m", help="local checkpoint dir or alias ('smollm2-135m')")
    model.add_argument("--output-dir", default="runs/trl")
    model.add_argument("--learning-rate", type=float, default=5e-7)
    model.add_argument("--beta", type=float, default=0.001, help="KL coefficient")
    model.add_argument("--num-generations", type=int, default=5, help="GRPO group size")
    model.add_argument("--per-device-train-batch-size", type=int, default=5)
    model.add_argument("--gradient-accumulation-steps", type=int, default=1)
    model.add_argument("--max-completion-length", type=int, default=1024, help="response cap (model + env tokens)")
    model.add_argument("--max-new-tokens", type=int, default=500, help="per-turn generation cap")
    model.add_argument("--temperature", type=float, default=1.0)
    model.add_argument("--top-p", type=float, default=1.0)
    model.add_argument("--max-steps", type=int, default=2)
    model.add_argument("--logging-steps", type=int, default=1)
    model.add_argument("--save-steps", type=int, default=100)
    model.add_argument("--seed", type=int, default=0)
    model.add_argument("--use-vllm", action="store_true", help="colocated vLLM rollouts (GPU)")
    model.add_argument("--threads", type=int, default=1, help="torch CPU threads")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m searchenv.adapters.train_trl", description=__doc__.split("\n")[0])
    _add_arguments(parser)
    return parser


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv train-trl`` on the CLI's subparsers."""
    parser = subparsers.add_parser("train-trl", help="train with TRL's GRPOTrainer")
    _add_arguments(parser)
    parser.set_defaults(handler=_handle)
    return parser


def make_config(args: argparse.Namespace) -> Any:
    """The ``GRPOConfig`` for parsed arguments (CPU unless a GPU is visible)."""
    import torch
    from trl import GRPOConfig

    gpu = torch.cuda.is_available()
    return GRPOConfig(
        output_dir=args.output_dir,
        learning_rate=args.learning_rate,
        beta=args.beta,
        num_generations=args.num_generations,
        per_device_train_batch_size=args.per_device_train_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        max_completion_length=args.max_completion_length,
        temperature=args.temperature,
        top_p=args.top_p,
        max_steps=args.max_steps,
        logging_steps=args.logging_steps,
        save_steps=args.save_steps,
        seed=args.seed,
        use_vllm=args.use_vllm,
        vllm_mode="colocate",
        use_cpu=not gpu,
        bf16=gpu,
        report_to="none",
    )


def run(args: argparse.Namespace) -> Any:
    """Build the trainer from parsed arguments and train; returns the trainer."""
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    import torch

    from searchenv.adapters.generation import load_policy
    from searchenv.adapters.trl import make_grpo_trainer

    torch.set_num_threads(args.threads)
    model, tokenizer = load_policy(args.model)
    env_kwargs = {
        "dataset": args.dataset,
        "split": args.split,
        "corpus": args.corpus,
        "retriever": args.retriever,
        "reward": args.reward,
        "topk": args.topk,
        "max_turns": args.max_turns,
        "protocol": args.protocol,
    }
    trainer = make_grpo_trainer(
        model,
        tokenizer,
        make_config(args),
        env_kwargs,
        max_new_tokens=args.max_new_tokens,
        train_limit=args.train_limit,
    )
    trainer.train()
    return trainer


def _handle(args: argparse.Namespace) -> int:
    run(args)
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
