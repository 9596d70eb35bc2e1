"""What a checkpoint was trained on: ``searchenv_run.json``, written beside the weights by every trainer and read
by ``searchenv eval`` and ``searchenv demo`` to replay the checkpoint in the environment it learned in."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "RUN_FILE",
    "RUN_KEYS",
    "read_run_settings",
    "remove_partial_checkpoints",
    "save_checkpoint",
    "write_run_settings",
]

#: File written next to a checkpoint's weights by both trainers (``train-ppo``, ``train-trl``).
RUN_FILE = "searchenv_run.json"
#: Its keys: what ``eval``/``demo`` need to replay the checkpoint in the environment it was trained in.
#: ``model`` is the starting checkpoint or alias; ``config`` the trainer's full configuration.
RUN_KEYS = (
    "model",
    "protocol",
    "chat_template",
    "max_turns",
    "budget",
    "topk",
    "reward",
    "dataset",
    "split",
    "retriever",
    "retriever_options",
    "algorithm",
    "config",
)


def write_run_settings(directory: str | os.PathLike[str], settings: Mapping[str, Any], **extra: Any) -> Path:
    """Write ``searchenv_run.json`` into ``directory``: every key of :data:`RUN_KEYS` (a missing one is an error,
    so no checkpoint is saved that cannot be replayed), plus any other keys given (``max_information_words``,
    ``corpus``, ``step``)."""
    settings = {**settings, **extra}
    missing = [k for k in RUN_KEYS if k not in settings]
    if missing:
        raise ValueError(f"run settings lack {missing}; pass every key of RUN_KEYS ({', '.join(RUN_KEYS)})")
    path = Path(directory) / RUN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2, sort_keys=True, default=str) + "\n")
    return path


def save_checkpoint(
    directory: str | os.PathLike[str], model: Any, tokenizer: Any, settings: Mapping[str, Any], **extra: Any
) -> Path:
    """Save weights, tokenizer and ``searchenv_run.json`` into ``directory`` as one unit: everything is written to a
    sibling folder first and renamed into place, so a reader (``searchenv eval``, a resumed ``searchenv learn``) never
    sees half a checkpoint, and a kill mid-save leaves only a ``.partial-<pid>`` folder that
    :func:`remove_partial_checkpoints` clears. An existing checkpoint at ``directory`` is replaced."""
    import shutil

    target = Path(directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    model.save_pretrained(scratch)
    tokenizer.save_pretrained(scratch)
    write_run_settings(scratch, settings, **extra)
    if target.exists():
        shutil.rmtree(target)
    scratch.rename(target)
    return target


def remove_partial_checkpoints(folder: str | os.PathLike[str]) -> list[Path]:
    """Delete the ``*.partial-<pid>`` folders a killed :func:`save_checkpoint` left anywhere under ``folder``
    (their process is gone: a checkpoint is never renamed into place half-written). Returns what was removed."""
    import shutil

    removed = []
    for path in sorted(Path(folder).rglob("*.partial-*")):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def read_run_settings(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The settings a checkpoint directory was trained with (see :func:`write_run_settings`)."""
    path = Path(directory) / RUN_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: the checkpoint was not saved by searchenv's train-ppo/train-trl")
    settings = json.loads(path.read_text())
    missing = [k for k in RUN_KEYS if k not in settings]
    if missing:
        raise ValueError(f"{path} lacks {missing}; it was written by another version of searchenv")
    return settings
