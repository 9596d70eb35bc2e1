"""Playing SearchQA episodes with a causal LM, token in and token out: the one rollout loop that training,
evaluation, the demo and the reward audit share.

* :mod:`~searchenv.rollout.driver` — :class:`EpisodeDriver` (start → sample → apply) and :func:`rollout`;
* :mod:`~searchenv.rollout.turn_generator` — the :class:`TurnGenerator` interface an inference engine implements
  (how to sample: :class:`SamplingConfig`, from :mod:`searchenv.sampling`);
* :mod:`~searchenv.rollout.engines` — inference engines: ``transformers`` (:class:`HFGenerator`) and vLLM;
* :mod:`~searchenv.rollout.models` — :func:`load_policy` (a checkpoint folder or a packaged alias);
* :mod:`~searchenv.rollout.run_file` — ``searchenv_run.json``, what a checkpoint was trained on.

Importing this package does not import torch or transformers; the engines load them when built.
"""

from __future__ import annotations

from searchenv.rollout.driver import EpisodeDriver, EpisodeResult, TurnRequest, make_envs, rollout
from searchenv.rollout.engines import HFGenerator, VLLMEngineGenerator, VLLMGenerator
from searchenv.rollout.models import MODEL_ALIASES, gguf_tokenizer, load_policy
from searchenv.rollout.run_file import (
    RUN_FILE,
    RUN_KEYS,
    read_run_settings,
    remove_partial_checkpoints,
    save_checkpoint,
    write_run_settings,
)
from searchenv.rollout.turn_generator import GeneratedTurn, TurnGenerator
from searchenv.sampling import SamplingConfig

__all__ = [
    "MODEL_ALIASES",
    "RUN_FILE",
    "RUN_KEYS",
    "EpisodeDriver",
    "EpisodeResult",
    "GeneratedTurn",
    "HFGenerator",
    "SamplingConfig",
    "TurnGenerator",
    "TurnRequest",
    "VLLMEngineGenerator",
    "VLLMGenerator",
    "gguf_tokenizer",
    "load_policy",
    "make_envs",
    "read_run_settings",
    "remove_partial_checkpoints",
    "rollout",
    "save_checkpoint",
    "write_run_settings",
]
