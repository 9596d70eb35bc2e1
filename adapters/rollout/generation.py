"""Deprecated home of the rollout loop: it moved to :mod:`searchenv.rollout` (it is not an adapter; training,
evaluation, the demo and the reward audit share it). These names stay importable from here until 0.4."""

from __future__ import annotations

from searchenv.rollout import (
    MODEL_ALIASES,
    RUN_FILE,
    RUN_KEYS,
    EpisodeResult,
    GeneratedTurn,
    HFGenerator,
    SamplingConfig,
    TurnGenerator,
    VLLMGenerator,
    gguf_tokenizer,
    load_policy,
    make_envs,
    read_run_settings,
    rollout,
    write_run_settings,
)

__all__ = [
    "MODEL_ALIASES",
    "RUN_FILE",
    "RUN_KEYS",
    "EpisodeResult",
    "GeneratedTurn",
    "HFGenerator",
    "SamplingConfig",
    "TurnGenerator",
    "VLLMGenerator",
    "gguf_tokenizer",
    "load_policy",
    "make_envs",
    "read_run_settings",
    "rollout",
    "write_run_settings",
]
