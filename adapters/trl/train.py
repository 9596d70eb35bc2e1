"""Train a causal LM on SearchQA-v0 with TRL's ``GRPOTrainer`` (multi-turn rollouts via ``rollout_func``).

Run with no options, it trains SmolLM2-135M on the generated world with the same CPU recipe as ``train-ppo``
(one worked example, plain-text prompt, R1-Searcher stage-1 reward, 1-hop questions first, short turns;
:data:`TRL_CPU_RECIPE`)::

    python -m searchenv.adapters.trl.train --output-dir runs/train-trl

``--model PATH --paper`` is the GPU recipe: Search-R1's environment (:data:`~searchenv.adapters.ppo.train.PAPER_ENV`)
and GRPO sizes, written for ``accelerate launch --num_processes 8`` (16 episodes × 10 accumulation steps per
device = 256 prompts × 5 per optimizer step; 2 optimizer steps per generation = 512 prompts × 5); add
``--use-vllm`` for vLLM rollouts through TRL's own wrapper. Multi-GPU: ``accelerate launch --config_file
adapters/trl/accelerate/multi_gpu.yaml -m searchenv.adapters.trl.train ...`` (see docs/adapters.md).

The environment and prompt options are those of ``train-ppo`` (:func:`searchenv.adapters.ppo.train.add_env_arguments`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from searchenv.adapters.ppo.train import add_env_arguments, apply_recipe, env_kwargs, run_settings
from searchenv.cli.arguments import positive_int
from searchenv.cli.options import add_sampling_arguments, chat_template
from searchenv.cli.parsers import CommandParser

_DESCRIPTION = __doc__.split("\n")[0]

__all__ = ["TRL_CPU_RECIPE", "TRL_PAPER", "add_parser", "build_parser", "main", "make_config", "run"]

#: The CPU recipe (the defaults): train-ppo's environment recipe with the matching GRPOConfig sizes.
TRL_CPU_RECIPE: dict[str, Any] = {
    "num_generations": 4,
    "per_device_train_batch_size": 8,  # 2 questions × 4 episodes per step
    "max_completion_length": 256,
    "max_new_tokens": 32,
    "learning_rate": 3e-5,
    "beta": 0.0,  # no reference model, as train-ppo's CPU recipe
    "curriculum": True,
    "max_steps": 12,
}
#: Search-R1's GRPO sizes for 8 processes (see the module doc).
TRL_PAPER: dict[str, Any] = {
    "num_generations": 5,
    "per_device_train_batch_size": 16,
    "gradient_accumulation_steps": 10,
    "steps_per_generation": 20,
    "max_completion_length": 3584,  # 4096 total minus a ~512-token prompt
    "max_new_tokens": 500,
    "learning_rate": 5e-7,
    "beta": 0.001,
    "curriculum": False,
    "max_steps": 500,
    "save_steps": 100,
    "bf16": True,
}


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_env_arguments(parser)
    env = parser.add_argument_group("questions")
    env.add_argument("--train-limit", type=int, default=None, help="use only the first N questions")
    env.add_argument(
        "--curriculum",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="1-hop questions first (orders the dataset by hops, turns TRL's shuffling off)",
    )

    add_sampling_arguments(
        parser.add_argument_group("sampling (of the rollouts)"),
        flags=("temperature", "top_p", "max_new_tokens", "chat_template"),
        temperature=1.0,
        max_new_tokens=500,
        notes={"max_new_tokens": "the per-episode cap is --max-completion-length"},
    )
    model = parser.add_argument_group("model and trainer (GRPOConfig)")
    model.add_argument("--model", default="smollm2-135m", help="local checkpoint dir or alias ('smollm2-135m')")
    model.add_argument("--output-dir", default="runs/train-trl", help="checkpoints (checkpoint-N, final)")
    model.add_argument(
        "--paper", action="store_true", help="Search-R1's settings for every option not given (the GPU recipe)"
    )
    model.add_argument("--learning-rate", type=float, default=5e-7, help="policy learning rate")
    model.add_argument("--beta", type=float, default=0.001, help="KL coefficient")
    model.add_argument("--num-generations", type=int, default=5, help="GRPO group size")
    model.add_argument(
        "--per-device-train-batch-size", type=int, default=5, help="episodes per device per optimizer micro-step"
    )
    model.add_argument(
        "--gradient-accumulation-steps", type=int, default=1, help="micro-steps summed into one optimizer step"
    )
    model.add_argument(
        "--steps-per-generation",
        type=int,
        default=None,
        help="optimizer micro-steps served by one round of rollouts (default: TRL's, = --gradient-accumulation-steps)",
    )
    model.add_argument("--max-completion-length", type=int, default=1024, help="response cap (model + env tokens)")
    model.add_argument("--max-steps", type=positive_int, default=2, help="optimizer steps to train")
    model.add_argument("--logging-steps", type=int, default=1, help="log metrics every N steps")
    model.add_argument("--save-steps", type=int, default=0, help="0: save only at the end")
    model.add_argument("--seed", type=int, default=0, help="seed of TRL's shuffling and sampling")
    model.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=False, help="bf16 autocast")
    model.add_argument("--use-vllm", action="store_true", help="vLLM rollouts through TRL's wrapper (GPU)")
    model.add_argument(
        "--vllm-mode",
        default="colocate",
        choices=["colocate", "server"],
        help="with --use-vllm: vLLM inside the training process, or a separate `trl vllm-serve`",
    )
    model.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    out = parser.add_argument_group("output")
    out.add_argument("--log", default=None, help="append every logged step (JSON lines) to this file")
    out.add_argument("--plot", default=None, help="write a PNG of the training curves here after every step")


def _recipe(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> None:
    parser.set_defaults(**TRL_CPU_RECIPE)
    apply_recipe(parser, argv, lambda _: TRL_PAPER)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m searchenv.adapters.trl.train``: the CPU recipe, or with ``--paper`` Search-R1's."""
    parser = CommandParser(prog="searchenv train-trl", description=_DESCRIPTION, defaults_from_argv=_recipe)
    _add_arguments(parser)
    _recipe(parser, [])  # the defaults --help and docs/cli.md show before any words are parsed
    return parser


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv train-trl`` on the CLI's subparsers (whose parser class is :class:`CommandParser`)."""
    parser = subparsers.add_parser("train-trl", description=_DESCRIPTION, defaults_from_argv=_recipe)
    _add_arguments(parser)
    _recipe(parser, [])  # the defaults --help and docs/cli.md show before any words are parsed
    parser.set_defaults(handler=_train)
    return parser


def make_config(args: argparse.Namespace) -> Any:
    """The ``GRPOConfig`` for parsed arguments (CPU unless a GPU is visible)."""
    import torch
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=args.output_dir,
        learning_rate=args.learning_rate,
        beta=args.beta,
        num_generations=args.num_generations,
        per_device_train_batch_size=args.per_device_train_batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        steps_per_generation=args.steps_per_generation,
        max_completion_length=args.max_completion_length,
        temperature=args.temperature,
        top_p=args.top_p,
        max_steps=args.max_steps,
        logging_steps=args.logging_steps,
        save_strategy="steps" if args.save_steps else "no",
        save_steps=args.save_steps or 500,
        seed=args.seed,
        shuffle_dataset=not args.curriculum,
        use_vllm=args.use_vllm,
        vllm_mode=args.vllm_mode,
        use_cpu=not torch.cuda.is_available(),
        bf16=args.bf16,
        report_to="none",
    )


def run(args: argparse.Namespace) -> Any:
    """Build the trainer from parsed arguments, train, and save ``final`` with ``searchenv_run.json``."""
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    import dataclasses

    import torch

    from searchenv.adapters.ppo.train import plot_log
    from searchenv.adapters.trl.grpo import JsonlLogCallback, make_grpo_trainer
    from searchenv.rollout import load_policy, write_run_settings

    if args.plot and not args.log:
        raise SystemExit("--plot needs --log (the curves are drawn from the log file)")
    env_settings = env_kwargs(args)  # every option checked before the model loads
    title = f"TRL GRPO on {args.dataset}, {args.model}, reward {args.reward}"
    callbacks = (
        [JsonlLogCallback(args.log, lambda: args.plot and plot_log(args.log, args.plot, title))] if args.log else []
    )
    torch.set_num_threads(args.threads)
    model, tokenizer = load_policy(args.model)  # float32 master weights; --bf16 adds autocast
    config = make_config(args)
    trl_config = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}
    settings = run_settings(args, "grpo", trl_config)
    trainer = make_grpo_trainer(
        model,
        tokenizer,
        config,
        env_settings,
        max_new_tokens=args.max_new_tokens,
        train_limit=args.train_limit,
        chat_template=chat_template(args.chat_template),
        curriculum=args.curriculum,
        run_settings=settings,
        callbacks=callbacks,
    )
    trainer.train()
    final = Path(args.output_dir) / "final"
    trainer.save_model(str(final))
    if trainer.accelerator.is_main_process:
        tokenizer.save_pretrained(final)
        write_run_settings(final, settings, step=trainer.state.global_step)
    return trainer


def _train(args: argparse.Namespace) -> int:
    run(args)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, check every environment option before the model loads, then train; errors in searchenv's form."""
    from searchenv.cli.arguments import run_handler

    return run_handler(_train, build_parser().parse_args(argv), "searchenv train-trl")


if __name__ == "__main__":
    raise SystemExit(main())
