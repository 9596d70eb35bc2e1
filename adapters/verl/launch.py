"""``searchenv verl``: the veRL launch files that ship inside the package, written out or run.

The wheel carries ``adapters/verl/scripts/verl_train.sh`` (the launcher: data, retrieval server, agent-loop YAML, then
``python -m verl.trainer.main_ppo``) and ``adapters/verl/configs/agent_loop.yaml`` (the agent-loop registry entry
to edit by hand), so a pip install has them without a clone of this repository::

    searchenv verl files runs/launch              # copy verl_train.sh and agent_loop.yaml there
    searchenv verl train                          # = bash verl_train.sh: GRPO, smoke profile
    searchenv verl train ppo paper trainer.total_training_steps=600
    searchenv verl train --print-args grpo smoke  # the hydra overrides, one per line; nothing starts

Importing this module does not import veRL: the launcher runs veRL in its own process.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["LAUNCH_FILES", "add_parser", "check_training_machine", "launch_file", "run_launcher", "write_launch_files"]

#: Launch files inside the package (path relative to ``searchenv.adapters.verl``) by the name they are written under.
LAUNCH_FILES = {"verl_train.sh": "scripts/verl_train.sh", "agent_loop.yaml": "configs/agent_loop.yaml"}
_ALGOS = ("grpo", "ppo")
_PROFILES = ("smoke", "8xh100", "paper")


def launch_file(name: str) -> Path:
    """The packaged launch file ``name`` (a key of :data:`LAUNCH_FILES`) as a path on disk."""
    if name not in LAUNCH_FILES:
        raise ValueError(f"unknown launch file {name!r}; files: {', '.join(LAUNCH_FILES)}")
    path = Path(str(resources.files("searchenv.adapters.verl").joinpath(LAUNCH_FILES[name])))
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed package; reinstall searchenv")
    return path


def write_launch_files(output: str | os.PathLike[str]) -> list[Path]:
    """Copy every launch file into ``output`` (created if needed); the script stays executable."""
    folder = Path(output)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in LAUNCH_FILES:
        target = folder / name
        shutil.copyfile(launch_file(name), target)
        if name.endswith(".sh"):
            target.chmod(0o755)
        written.append(target)
    return written


def run_launcher(
    algo: str = "grpo",
    profile: str = "smoke",
    overrides: Sequence[str] = (),
    *,
    print_args: bool = False,
    wandb: bool = False,
) -> int:
    """Run the packaged ``verl_train.sh`` with this Python (its exit status is returned).

    ``wandb`` turns on Weights & Biases logging even without ``WANDB_API_KEY`` (the script adds it on its own when
    the key is set); ``print_args`` prints the trainer overrides instead of starting anything.
    """
    if algo not in _ALGOS:
        raise ValueError(f"algo must be one of {_ALGOS}, got {algo!r}")
    if profile not in _PROFILES:
        raise ValueError(f"profile must be one of {_PROFILES}, got {profile!r}")
    if not print_args:
        check_training_machine(profile)
    env = {**os.environ, "PYTHON": os.environ.get("PYTHON", sys.executable)}
    if print_args:
        env["PRINT_ARGS"] = "1"
    if wandb:
        env["WANDB"] = "1"
    command = ["bash", str(launch_file("verl_train.sh")), algo, profile, *overrides]
    return subprocess.run(command, env=env, check=False).returncode


_GPUS_NEEDED = {"smoke": 1, "8xh100": 8, "paper": 8}


def check_training_machine(profile: str) -> None:
    """Raise ``RuntimeError`` naming what is missing before veRL starts Ray and prints its whole config.

    veRL trains on CUDA GPUs with vLLM or SGLang rollouts; without them the launch fails only after Ray has started
    and about 900 lines of config have scrolled by.
    """
    import importlib.util

    missing = [name for name in ("verl", "torch") if importlib.util.find_spec(name) is None]
    if missing:
        raise RuntimeError(
            f"veRL training needs {' and '.join(missing)}: pip install 'searchenv[verl]' (see docs/adapters.md)"
        )
    import torch

    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    needed = _GPUS_NEEDED[profile]
    if found < needed:
        raise RuntimeError(
            f"the {profile!r} profile trains on {needed} CUDA GPU(s) and this machine has {found}; run it on a GPU "
            "machine (on CPU, `searchenv train-ppo` or `searchenv train-trl` run the same environment), or pass "
            "--print-args to see the trainer overrides without starting anything"
        )


def _split_words(words: Sequence[str]) -> tuple[str, str, list[str]]:
    """``[ALGO [PROFILE]] [OVERRIDE ...]`` into its three parts (ALGO and PROFILE are optional, in that order)."""
    rest = [w for w in words if w != "--"]
    algo = rest.pop(0) if rest and "=" not in rest[0] else "grpo"
    profile = rest.pop(0) if rest and "=" not in rest[0] else "smoke"
    return algo, profile, rest


def _run(args: argparse.Namespace) -> int:
    if args.verl_command == "files":
        for path in write_launch_files(args.output):
            print(f"wrote {path}")
        return 0
    algo, profile, overrides = _split_words(args.words)
    try:
        return run_launcher(algo, profile, overrides, print_args=args.print_args, wandb=args.wandb)
    except RuntimeError as error:
        print(f"searchenv verl train: {error}", file=sys.stderr)
        return 2


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv verl {files,train}`` on the CLI's subparsers."""
    parser = subparsers.add_parser(
        "verl", help="write or run the veRL launch files", description=__doc__.split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="verl_command", required=True, metavar="ACTION")
    files = commands.add_parser("files", help="write verl_train.sh and agent_loop.yaml into a folder")
    files.add_argument("output", help="folder to write them to")
    train = commands.add_parser(
        "train",
        help="run verl_train.sh (its header lists the environment variables it reads)",
        description="Run the packaged verl_train.sh. Options go before or after all the words, not between them.",
    )
    train.add_argument(
        "words",
        nargs="*",
        metavar="[ALGO [PROFILE]] [OVERRIDE ...]",
        help=f"ALGO {'|'.join(_ALGOS)} (default grpo), PROFILE {'|'.join(_PROFILES)} (default smoke), then hydra "
        "overrides for veRL such as trainer.total_training_steps=600",
    )
    train.add_argument("--print-args", action="store_true", help="print the trainer overrides and start nothing")
    train.add_argument(
        "--wandb", action="store_true", help="log to Weights & Biases (default: only with WANDB_API_KEY)"
    )
    parser.set_defaults(handler=_run)
    return parser
