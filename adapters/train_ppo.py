"""Train a causal LM on SearchQA-v0 with the built-in PPO / GRPO / REINFORCE++ loop.

Example (CPU, the embedded generated world, SmolLM2-135M)::

    python -m searchenv.adapters.train_ppo --algorithm grpo --model smollm2-135m --reward format \\
        --steps 30 --log runs/grpo.jsonl --plot docs/img/grpo_world.png

Metrics go to stdout and to ``--log`` (one JSON object per step); ``--plot`` redraws reward, valid searches
per episode and response length against steps after every step, so a long run can be watched.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "build_parser", "main", "plot_log"]

#: Columns drawn by :func:`plot_log`: (metric key, panel title).
PLOTTED = (
    ("reward", "reward (mean per episode)"),
    ("valid_searches", "valid searches / episode"),
    ("model_tokens", "response length (model tokens)"),
)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    from searchenv.adapters.ppo import PPOConfig

    env = parser.add_argument_group("environment")
    env.add_argument("--dataset", default="world", help="'world', a dataset name or a jsonl/parquet path")
    env.add_argument("--split", default="train")
    env.add_argument("--corpus", default=None, help="passage jsonl (default: the world's corpus)")
    env.add_argument("--retriever", default="bm25", help="'bm25', 'random', 'e5-exact', or http://host:port")
    env.add_argument("--reward", default="format", help="reward spec name or file (em, f1, format, ...)")
    env.add_argument("--topk", type=int, default=3)
    env.add_argument("--max-turns", type=int, default=4, help="action budget B")
    env.add_argument("--protocol", default="search-r1")
    env.add_argument(
        "--demonstration",
        action="store_true",
        help="prepend one worked example to the prompt (helps very small models discover the tags)",
    )
    env.add_argument("--max-information-words", type=int, default=400, help="passage words per information block")

    model = parser.add_argument_group("model")
    model.add_argument("--model", default="smollm2-135m", help="local checkpoint dir or alias ('smollm2-135m')")
    model.add_argument("--output-dir", default=None, help="save checkpoints here")
    model.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    model.add_argument("--device", default=None, help="'cpu', 'cuda', ... (default: cuda when available)")

    algo = parser.add_argument_group("algorithm (defaults: CPU-sized; see PPOConfig.paper() for Search-R1's)")
    defaults = PPOConfig()
    for f in fields(PPOConfig):
        flag = "--" + f.name.replace("_", "-")
        value = getattr(defaults, f.name)
        if f.name == "algorithm":
            algo.add_argument(flag, default=value, choices=["ppo", "grpo", "reinforce++"])
        elif f.name == "chat_template":
            algo.add_argument(
                flag,
                default="auto",
                choices=["auto", "on", "off"],
                type=str,
                help="wrap the prompt in the tokenizer's chat template ('off': plain text continuation)",
            )
        else:
            algo.add_argument(flag, type=type(value), default=value)

    out = parser.add_argument_group("output")
    out.add_argument("--log", default=None, help="append per-step metrics (JSON lines) to this file")
    out.add_argument("--plot", default=None, help="write a PNG of the training curves here after every step")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m searchenv.adapters.train_ppo", description=__doc__.split("\n")[0])
    _add_arguments(parser)
    return parser


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv train-ppo`` on the CLI's subparsers.

    The options are parsed by :func:`build_parser` when the command runs, so building the CLI never imports torch.
    """
    parser = subparsers.add_parser(
        "train-ppo",
        add_help=False,
        prefix_chars="\0",  # no option syntax here: every word, "--help" included, goes to build_parser()
        help="train with the built-in PPO/GRPO/REINFORCE++ loop (--help for options)",
    )
    parser.add_argument("options", nargs="*")
    parser.set_defaults(handler=lambda args: main(args.options) or 0)
    return parser


def _protocol(args: argparse.Namespace) -> str:
    """``--demonstration`` selects the one-example prompt of the search-r1 tags (``search-r1-fewshot``)."""
    if not args.demonstration:
        return args.protocol
    if args.protocol != "search-r1":
        raise ValueError(f"--demonstration is written for the search-r1 tags, not {args.protocol!r}")
    return "search-r1-fewshot"


def plot_log(log_path: str | Path, png_path: str | Path, title: str | None = None) -> None:
    """Draw reward, valid searches per episode and response length against training steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{log_path} has no logged steps yet")
    steps = [r["step"] for r in rows]
    figure, axes = plt.subplots(1, len(PLOTTED), figsize=(4.2 * len(PLOTTED), 3.2))
    for axis, (key, label) in zip(axes, PLOTTED):
        values = [r[key] for r in rows]
        window = max(1, len(values) // 8)
        axis.plot(steps, values, color="0.7" if window > 1 else "C0", linewidth=1, marker=".", label="per step")
        if window > 1:
            smooth = [
                sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
                for i in range(len(values))
            ]
            axis.plot(steps, smooth, color="C0", linewidth=2, label=f"mean of last {window}")
            axis.legend(fontsize=7)
        axis.set_title(label, fontsize=9)
        axis.set_xlabel("step")
    if title:
        figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    Path(png_path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png_path, dpi=110)
    plt.close(figure)


def run(args: argparse.Namespace) -> list[dict[str, float]]:
    """Build the environments, the model and the trainer from parsed arguments, and train."""
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    import torch

    from searchenv.adapters.generation import load_policy, make_envs
    from searchenv.adapters.ppo import PPOConfig, Trainer

    torch.set_num_threads(args.threads)
    values = {f.name: getattr(args, f.name) for f in fields(PPOConfig)}
    values["chat_template"] = {"auto": None, "on": True, "off": False}[values["chat_template"]]
    config = PPOConfig(**values)
    model, tokenizer = load_policy(args.model)
    model.to(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    envs = make_envs(
        config.episodes_per_step,
        dataset=args.dataset,
        split=args.split,
        corpus=args.corpus,
        retriever=args.retriever,
        reward=args.reward,
        topk=args.topk,
        max_turns=args.max_turns,
        protocol=_protocol(args),
        max_information_words=args.max_information_words,
    )
    if args.plot and not args.log:
        raise SystemExit("--plot needs --log (the curves are drawn from the log file)")
    trainer = Trainer(model, tokenizer, envs, config, log_path=args.log, output_dir=args.output_dir)
    title = f"{config.algorithm} on {args.dataset}, {args.model}, reward {args.reward}"

    def redraw(_: dict[str, float]) -> None:
        if args.plot:
            plot_log(args.log, args.plot, title=title)

    return trainer.train(callback=redraw)


def main(argv: Sequence[str] | None = None) -> None:
    run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
