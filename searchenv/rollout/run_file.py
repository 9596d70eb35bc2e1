"""What a checkpoint was trained on: ``searchenv_run.json``, written beside the weights by every trainer and read
by ``searchenv eval`` and ``searchenv demo`` to replay the checkpoint in the environment it learned in."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["RUN_FILE", "RUN_KEYS", "read_run_settings", "write_run_settings"]

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
