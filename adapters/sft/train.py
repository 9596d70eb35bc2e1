"""``searchenv train-sft``: a supervised warm start from demonstrations, loss on the model's tokens only.

Run with no options, it plays the scripted demonstrator on the generated world's one- and two-hop **train**
questions (the environment's own searches and passages, every hop's answer shown) and fine-tunes SmolLM2-135M on
the transcripts for :data:`SFT_RECIPE`'s steps. ``--transcripts FILE`` adds (or with ``--no-world`` replaces) them
with ``searchenv eval`` transcripts of a stronger model, filtered by ``--min-reward``: distillation. The checkpoint
(``--output-dir``/final) carries ``searchenv_run.json``, so ``searchenv eval`` and ``searchenv train-ppo --model``
replay the environment it learned in::

    searchenv train-sft --output-dir runs/sft --log runs/sft.jsonl
    searchenv train-ppo --model runs/sft/final ...
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from searchenv.adapters.sft.recipe import LEARN_ENV, SFT_RECIPE
from searchenv.cli.options import add_sampling_arguments, chat_template
from searchenv.cli.parsers import CommandParser
from searchenv.cli.values import positive_int

__all__ = ["LEARN_ENV", "SFT_RECIPE", "add_parser", "build_parser", "main", "run"]

_DESCRIPTION = __doc__.split("\n")[0]
_EPILOG = (
    "Distillation: evaluate a teacher on training questions (searchenv eval --split train --output runs/teacher), "
    "then searchenv train-sft --no-world --transcripts runs/teacher/transcripts.jsonl, then searchenv eval the "
    "checkpoint. docs/evaluation.md ('Distillation') has the workflow, the record format and what is refused."
)

_SFT_HELP = {
    "lr": "peak learning rate (AdamW; linear warm-up, then a cosine to a tenth)",
    "steps": "optimizer steps",
    "batch_size": "demonstrations per optimizer step",
    "micro_batch_size": "demonstrations per forward/backward pass (a divisor of --batch-size)",
    "warmup_steps": "steps of linear warm-up",
    "max_grad_norm": "gradients are clipped to this global norm",
    "trainable_layers": "train only the top N decoder layers and the final norm (0: every weight)",
    "bf16": "bfloat16 autocast for forward passes (weights stay float32): GPUs, and CPUs with bf16 units (AMX or "
    "AVX-512 bf16); elsewhere --no-bf16",
    "seed": "seed of the demonstrations' order and of torch",
    "max_tokens": "refuse a demonstration of more tokens (prompt and transcript) than this, before the model loads",
}


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    from searchenv.adapters.ppo.train import add_env_arguments
    from searchenv.adapters.sft.trainer import SFTConfig

    add_env_arguments(parser)
    sources = parser.add_argument_group("demonstrations")
    sources.add_argument(
        "--world",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="play the scripted demonstrator on the world's train questions (--dataset must be the world)",
    )
    sources.add_argument(
        "--max-hops", type=positive_int, default=None, help="demonstrate questions of at most N hops (default: any)"
    )
    sources.add_argument(
        "--validation",
        type=int,
        default=0,
        help="leave the last N train questions out (the validation questions of train-ppo --validation N)",
    )
    sources.add_argument(
        "--transcripts",
        action="append",
        default=[],
        help="searchenv eval transcripts.jsonl of training questions to imitate (repeatable; see below); the "
        "checkpoint records their episode settings",
    )
    sources.add_argument(
        "--min-reward", type=float, default=1.0, help="keep transcript episodes of this reward or more"
    )
    sources.add_argument("--limit", type=int, default=None, help="use at most N demonstrations of the world")

    model = parser.add_argument_group("model")
    model.add_argument("--model", default="smollm2-135m", help="local checkpoint dir or alias ('smollm2-135m')")
    model.add_argument("--output-dir", default="runs/train-sft", help="the checkpoint goes to DIR/final")
    model.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    model.add_argument("--device", default=None, help="'cpu', 'cuda', ... (default: cuda when available)")
    add_sampling_arguments(
        parser.add_argument_group("sampling (recorded in the checkpoint for searchenv eval and the RL stage)"),
        flags=("max_new_tokens", "chat_template"),
        max_new_tokens=80,
    )

    training = parser.add_argument_group("training")
    defaults = SFTConfig()
    for f in fields(SFTConfig):
        if f.name == "chat_template":
            continue  # a prompt option (--chat-template)
        value, flag = getattr(defaults, f.name), "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            training.add_argument(flag, action=argparse.BooleanOptionalAction, default=value, help=_SFT_HELP[f.name])
            continue
        kind = int if f.name == "trainable_layers" else type(value)
        training.add_argument(flag, type=kind, default=value, help=_SFT_HELP[f.name])
    parser.set_defaults(**LEARN_ENV, **SFT_RECIPE)
    out = parser.add_argument_group("output")
    out.add_argument("--log", default=None, help="append per-step metrics (JSON lines) to this file")


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="searchenv train-sft", description=_DESCRIPTION, epilog=_EPILOG)
    _add_arguments(parser)
    return parser


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv train-sft`` (options are added when the command runs: no torch at ``--help`` time)."""
    parser = subparsers.add_parser("train-sft", description=_DESCRIPTION, epilog=_EPILOG)
    _add_arguments(parser)
    parser.set_defaults(handler=_train)
    return parser


#: The settings a transcript records that shape the episode train-sft's environment plays (run-file keys).
_EPISODE_KEYS = ("protocol", "chat_template", "max_turns", "budget", "topk", "max_information_words", "max_new_tokens")


def _adopt_transcript_settings(args: argparse.Namespace, theirs: dict[str, Any]) -> None:
    """Make ``args`` the environment the transcripts were played in, so the checkpoint records (and ``searchenv
    eval`` replays) theirs. With ``--world`` the world's demonstrations are played under ``args`` as well, so a
    difference is refused rather than mixing two environments in one warm start."""
    ours = {key: getattr(args, key) for key in _EPISODE_KEYS} | {"chat_template": chat_template(args.chat_template)}
    differ = {key: theirs[key] for key in _EPISODE_KEYS if key in theirs and theirs[key] != ours[key]}
    if not differ:
        return
    words = {None: "auto", True: "on", False: "off"}
    flags = " ".join(
        f"--{key.replace('_', '-')} {words[value] if key == 'chat_template' else value}"
        for key, value in differ.items()
    )
    if args.world:
        raise ValueError(
            f"the transcripts were played with {flags}, the world's demonstrations would be played with train-sft's "
            "own settings; give those options so both match, or --no-world to learn from the transcripts alone"
        )
    for key, value in differ.items():
        setattr(args, key, words[value] if key == "chat_template" else value)
    args.demonstration = False  # the protocol named by the transcripts already says whether it has an example
    print(f"searchenv train-sft: the transcripts' settings are recorded for eval to replay: {flags}", flush=True)


def _transcripts(args: argparse.Namespace) -> tuple[list[Any], dict[str, Any]]:
    """The transcripts' demonstrations and their settings, every record checked (no model loaded)."""
    from searchenv.adapters.sft.demonstrations import transcript_demonstrations

    if not args.transcripts:
        return [], {}
    found = transcript_demonstrations(args.transcripts, min_reward=args.min_reward)
    counts = found.counts
    print(
        f"searchenv train-sft: {counts['kept']} demonstrations of {counts['read']} transcript records "
        f"({counts['below_reward']} below --min-reward {args.min_reward:g})",
        flush=True,
    )
    if not found.demonstrations:
        raise ValueError(
            f"none of the {counts['read']} transcript records has a reward of --min-reward {args.min_reward:g} or "
            "more; lower --min-reward or pass a stronger teacher's transcripts"
        )
    _adopt_transcript_settings(args, found.settings)
    return found.demonstrations, found.settings


def run(args: argparse.Namespace) -> list[dict[str, float]]:
    """Gather the demonstrations and check them (every option and record first, then their token lengths with the
    tokenizer alone), load the model, and train."""
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    from searchenv.adapters.ppo.train import env_kwargs, run_settings
    from searchenv.adapters.sft.demonstrations import world_demonstrations
    from searchenv.adapters.sft.trainer import SFTConfig, SFTTrainer, tokenize_demonstrations
    from searchenv.protocol import get_protocol
    from searchenv.rollout.models import check_model, load_tokenizer

    check_model(args.model)
    env_kwargs(args)
    demonstrations, replayed = _transcripts(args)
    env = env_kwargs(args)
    values = {f.name: getattr(args, f.name) for f in fields(SFTConfig) if f.name != "chat_template"}
    values["trainable_layers"] = values["trainable_layers"] or None
    config = SFTConfig(**values, chat_template=chat_template(args.chat_template))
    if args.world:
        world, counts = world_demonstrations(env, max_hops=args.max_hops, limit=args.limit, held_out=args.validation)
        print(
            f"searchenv train-sft: {counts['kept']} demonstrations of {counts['played']} world questions played "
            f"({counts['hop_not_shown']} left out: a hop's answer was not shown)",
            flush=True,
        )
        demonstrations += world
    protocol = get_protocol(env["protocol"])
    episodes = tokenize_demonstrations(demonstrations, load_tokenizer(args.model), protocol, config)
    import torch

    from searchenv.rollout import load_policy
    from searchenv.rollout.models import place_policy

    torch.set_num_threads(args.threads)
    model, tokenizer = load_policy(args.model)
    place_policy(model, args.device)
    settings = run_settings(args, "sft", asdict(config))
    if not args.world:  # what the transcripts say of their environment, beyond the episode settings adopted above
        settings.update(
            {key: replayed[key] for key in ("reward", "retriever", "dataset", "max_total_tokens") if key in replayed}
        )
    trainer = SFTTrainer(
        model,
        tokenizer,
        demonstrations,
        protocol,
        config,
        log_path=args.log,
        output_dir=Path(args.output_dir) if args.output_dir else None,
        run_settings=settings,
        episodes=episodes,
    )
    return trainer.train()


def _train(args: argparse.Namespace) -> int:
    run(args)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from searchenv.cli.arguments import run_handler

    return run_handler(_train, build_parser().parse_args(argv), "searchenv train-sft")


if __name__ == "__main__":
    raise SystemExit(main())
