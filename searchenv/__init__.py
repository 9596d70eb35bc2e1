"""searchenv: the Gymnasium environment in which LLMs learn, by reinforcement learning, to reason and search.

``import searchenv`` registers ``SearchQA-v0`` and stays light: engines, trainers and models are imported
only when used. The names below are loaded on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from searchenv.registration import ENV_ID, register_envs

__version__ = "0.2.0"  # the one source of the version (pyproject.toml reads it)

#: Each public name and the module it lives in, imported on first access.
_EXPORTS = {
    "Corpus": "searchenv.corpus",
    "Passage": "searchenv.types",
    "QAExample": "searchenv.types",
    "Retriever": "searchenv.types",
    "Protocol": "searchenv.protocol",
    "PROTOCOLS": "searchenv.protocol",
    "parse_action": "searchenv.protocol",
    "Episode": "searchenv.episode.episode",
    "Segment": "searchenv.episode.episode",
    "SearchQAEnv": "searchenv.env.search_qa",
    "StepResult": "searchenv.env.step_rules",
    "step_batch": "searchenv.env.stepping",
    "step_batch_async": "searchenv.env.stepping",
    "SearchQAVectorEnv": "searchenv.env.vector",
    "EpisodeTokens": "searchenv.tokenization",
    "TokenizedEpisode": "searchenv.tokenization",
    "encode_prompt": "searchenv.tokenization",
    "tokenize_episode": "searchenv.tokenization",
    "tokenize_segments": "searchenv.tokenization",
    "load_dataset": "searchenv.data.datasets",
    "make_retriever": "searchenv.retrievers",
    "load_reward": "searchenv.reward_specs",
    "generate_world": "searchenv.data.world.generator",
}

#: The public names, listed once (``_EXPORTS``); the block below repeats them only for type checkers (``X as X``:
#: a re-export).
__all__ = ["ENV_ID", "__version__", *_EXPORTS]

if TYPE_CHECKING:
    from searchenv.corpus import Corpus as Corpus
    from searchenv.data.datasets import load_dataset as load_dataset
    from searchenv.data.world.generator import generate_world as generate_world
    from searchenv.env.search_qa import SearchQAEnv as SearchQAEnv
    from searchenv.env.step_rules import StepResult as StepResult
    from searchenv.env.stepping import step_batch as step_batch
    from searchenv.env.stepping import step_batch_async as step_batch_async
    from searchenv.env.vector import SearchQAVectorEnv as SearchQAVectorEnv
    from searchenv.episode.episode import Episode as Episode
    from searchenv.episode.episode import Segment as Segment
    from searchenv.protocol import PROTOCOLS as PROTOCOLS
    from searchenv.protocol import Protocol as Protocol
    from searchenv.protocol import parse_action as parse_action
    from searchenv.retrievers import make_retriever as make_retriever
    from searchenv.reward_specs import load_reward as load_reward
    from searchenv.tokenization import (
        EpisodeTokens as EpisodeTokens,
    )
    from searchenv.tokenization import (
        TokenizedEpisode as TokenizedEpisode,
    )
    from searchenv.tokenization import (
        encode_prompt as encode_prompt,
    )
    from searchenv.tokenization import (
        tokenize_episode as tokenize_episode,
    )
    from searchenv.tokenization import (
        tokenize_segments as tokenize_segments,
    )
    from searchenv.types import Passage as Passage
    from searchenv.types import QAExample as QAExample
    from searchenv.types import Retriever as Retriever


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'searchenv' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


register_envs()
