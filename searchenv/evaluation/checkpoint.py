"""What a checkpoint was trained with, so evaluation replays exactly that prompt, protocol and budget.

Training scripts write ``searchenv_run.json`` next to the weights (see :data:`RUN_FILE`). Its shape::

    {
      "protocol": "search-r1-fewshot",   # a name in searchenv.PROTOCOLS
      "chat_template": false,            # true | false | null (null: the tokenizer's template when it has one)
      "max_turns": 4,                    # the action budget B
      "budget": "actions",               # "actions" | "extra-answer-turn"
      "topk": 3,
      "max_information_words": 400,      # optional
      "max_new_tokens": 32,              # optional: tokens per turn (else the built-in loop's config.max_new_tokens)
      "reward": "format",                # optional: reward spec name or path (evaluation reports its own)
      "dataset": "world",                # optional: what it was trained on (reported)
      "retriever": "bm25"                # optional: the training engine (row label of the engine matrix)
    }

Only ``protocol``, ``chat_template``, ``max_turns``, ``budget``, ``topk``, ``max_information_words`` and the token
budget (``max_new_tokens`` per turn, ``max_total_tokens`` for prompt and response) shape the episode the policy
sees; they are replayed. The token budget is read from the top level or, for the built-in loop, from its
``config``; a model trained to fit 32 tokens per turn is not evaluated with 500. Settings the user sets explicitly
override the file and every difference is reported as a :class:`Mismatch`. Older checkpoints of the built-in loop
only have ``ppo_config.json``; its ``chat_template`` and token budget are read from there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CHAT_TEMPLATE_WORDS",
    "REPLAYED",
    "RUN_FILE",
    "TOKEN_BUDGET",
    "Mismatch",
    "read_run_settings",
    "replay_settings",
]

#: The file name training scripts write next to the weights.
RUN_FILE = "searchenv_run.json"
#: Settings that shape what the policy sees; replayed from the checkpoint unless overridden.
REPLAYED = (
    "protocol",
    "chat_template",
    "max_turns",
    "budget",
    "topk",
    "max_information_words",
    "max_new_tokens",
    "max_total_tokens",
)
#: The token budget, which the built-in loop records inside its ``config`` (``PPOConfig``'s field names).
TOKEN_BUDGET = ("max_new_tokens", "max_total_tokens")


@dataclass(frozen=True)
class Mismatch:
    """A replayed setting the user overrode."""

    key: str
    trained: Any
    evaluated: Any

    def __str__(self) -> str:
        return f"{self.key}: trained with {self.trained!r}, evaluated with {self.evaluated!r}"


def read_run_settings(checkpoint: str | Path) -> dict[str, Any]:
    """The training settings recorded in a checkpoint directory (``{}`` for a model without them)."""
    folder = Path(checkpoint)
    if not folder.is_dir():
        return {}
    run_file = folder / RUN_FILE
    if run_file.is_file():
        try:
            settings = json.loads(run_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{run_file}: not valid JSON ({exc.msg}); fix or delete it") from None
        if not isinstance(settings, dict):
            raise ValueError(f"{run_file}: expected a JSON object of settings")
        config = settings.get("config")
        if isinstance(config, dict):
            settings = {**{k: config[k] for k in TOKEN_BUDGET if k in config}, **settings}
        return settings
    ppo_config = folder / "ppo_config.json"
    if ppo_config.is_file():
        config = json.loads(ppo_config.read_text(encoding="utf-8"))
        return {k: config[k] for k in ("chat_template", *TOKEN_BUDGET) if k in config}
    return {}


#: The command line's words for a chat template, as the booleans a run file records (``None``: the tokenizer's own).
CHAT_TEMPLATE_WORDS = {"auto": None, "on": True, "off": False}


def _comparable(key: str, value: Any) -> Any:
    """``value`` in the run file's terms, so ``--chat-template off`` matches a run that recorded ``false``."""
    return CHAT_TEMPLATE_WORDS.get(value, value) if key == "chat_template" and isinstance(value, str) else value


def replay_settings(
    trained: Mapping[str, Any], requested: Mapping[str, Any], defaults: Mapping[str, Any]
) -> tuple[dict[str, Any], list[Mismatch]]:
    """Settings for evaluation: the user's explicit choice, else the checkpoint's, else the default.

    ``requested`` holds only what the user set explicitly (``None`` = not set). Returns the settings and the
    explicit choices that differ from the checkpoint's.
    """
    settings: dict[str, Any] = {}
    mismatches: list[Mismatch] = []
    for key in REPLAYED:
        asked = requested.get(key)
        if asked is not None:
            settings[key] = asked
            if key in trained and _comparable(key, trained[key]) != _comparable(key, asked):
                mismatches.append(Mismatch(key, trained[key], asked))
        elif key in trained:
            settings[key] = trained[key]
        else:
            settings[key] = defaults[key]
    return settings, mismatches
