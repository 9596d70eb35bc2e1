"""SkyRL-gym adapter: ``SearchQA`` as a ``skyrl_gym`` ``BaseTextEnv``.

SkyRL's generator builds one environment per trajectory with
``skyrl_gym.make(env_class, env_config=..., extras=row_columns)``, calls ``init(prompt)`` once and then
``step(model_text)`` per turn, tokenizing the observations it gets back. This class is a thin shell around
:class:`~searchenv.env.SearchQAEnv`: parsing, retrieval, the action budget and the reward all happen there,
so a SkyRL run and a Gymnasium run of the same config behave identically. Unlike SkyRL's own ``search``
environment, the reward reads the answer from the model's text only, so a retrieved passage that contains
``<answer>GOLD</answer>`` cannot pay out.

Configuration (``environment.skyrl_gym.searchenv`` in SkyRL's config) takes SearchQAEnv keyword arguments
(``retriever``, ``corpus``, ``reward``, ``topk``, ``protocol``, ``budget``, ``retriever_options``, …) plus
``prompt``: ``"auto"`` (default), ``"dataset"`` or ``"env"`` — which conversation the model starts from
(:func:`searchenv.adapters.rows.choose_conversation`). ``max_turns`` comes from SkyRL's
``generator.max_turns`` (through ``extras``) and is the action budget B, every turn counting. The SkyRL trainer
only hands a ``searchenv`` section over when its config class has one: use the config and entry point in
:mod:`searchenv.adapters.skyrl.train`. An environment built without a ``retriever`` is an error, never a silent
BM25 search over the built-in world.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType

from searchenv.adapters.rows import (
    PROMPT_MODES,
    SKYRL_ENV_CLASS,
    choose_conversation,
    episode_env,
    plain,
    row_example,
)
from searchenv.data.datasets import example_from_row
from searchenv.types import QAExample

if TYPE_CHECKING:
    from searchenv.env.search_qa import SearchQAEnv

__all__ = ["ENV_ID", "SearchQASkyRLEnv", "register_skyrl_env"]

ENV_ID = SKYRL_ENV_CLASS


def register_skyrl_env() -> None:
    """Register ``searchenv`` in skyrl-gym's registry (safe to call more than once, e.g. in every Ray worker)."""
    from skyrl_gym.envs.registration import register, registry

    if ENV_ID not in registry:
        register(id=ENV_ID, entry_point="searchenv.adapters.skyrl.env:SearchQASkyRLEnv")


def _example(extras: Mapping[str, Any], prompt: Any) -> QAExample:
    """The row's question and gold answers: SkyRL's ``reward_spec``, veRL's ``reward_model``, or a FlashRAG row."""
    for key in ("reward_spec", "reward_model"):
        if key in extras:
            spec = extras[key] or {}
            if "ground_truth" not in spec:
                raise ValueError(
                    f"extras[{key!r}] has no 'ground_truth'; expected {{'ground_truth': {{'target': [...]}}}}"
                )
            return row_example(
                spec["ground_truth"], extras.get("extra_info"), prompt or None, extras.get("data_source")
            )
    try:
        return example_from_row(extras)
    except ValueError as exc:
        raise ValueError(
            f"SkyRL extras must carry reward_spec={{'ground_truth': {{'target': [...]}}}} (SkyRL's dataset layout) or "
            f"'question' and 'golden_answers' (a searchenv row); {exc}"
        ) from None


class SearchQASkyRLEnv(BaseTextEnv):
    """One SearchQA episode behind SkyRL-gym's text-environment interface.

    Args:
        env_config: SearchQAEnv options (see the module docstring); an OmegaConf ``DictConfig`` or a dict.
        extras: the row's non-prompt columns; ``reward_spec.ground_truth`` (``{"target": [...]}`` or a string)
            and ``extra_info.question`` as SkyRL's Search-R1 dataset has them, plus ``max_turns``.
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None):
        super().__init__()
        options = {k: v for k, v in (plain(env_config) or {}).items() if v is not None}
        if not options.get("retriever"):
            raise ValueError(
                "searchenv got no retriever in its env_config (SkyRL passes {} when its config has no "
                "environment.skyrl_gym.searchenv section): train with python -m searchenv.adapters.skyrl.train and "
                "set environment.skyrl_gym.searchenv.retriever (a `searchenv serve` URL, or bm25 with .corpus)"
            )
        self.extras = dict(plain(extras) or {})
        self.prompt_mode = options.pop("prompt", "auto")
        if self.prompt_mode not in PROMPT_MODES:
            raise ValueError(f"env_config.prompt must be one of {PROMPT_MODES}, got {self.prompt_mode!r}")
        self.max_turns = int(self.extras.get("max_turns", options.pop("max_turns", 4)))
        self.options = {**options, "max_turns": self.max_turns}
        self.env: SearchQAEnv | None = None  # built in init(), once the prompt is known

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """Start the episode; returns the conversation the model sees and the reset info."""
        example = _example(self.extras, prompt)
        self.env, info = episode_env(example, self.options)
        return choose_conversation(prompt, self.env.episode.prompt, self.env.protocol, self.prompt_mode), info

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Apply one model turn; observations are ``[]`` once the episode is over.

        ``postprocessed_action`` is never set: SkyRL would re-encode that text while keeping the logprobs of the
        tokens it sampled, so ids and logprobs would disagree. Text after the first closing tag (which the
        environment ignores) stays in the context as sampled; the recipe's stop strings keep it from being
        generated at all.
        """
        if self.env is None:
            raise RuntimeError("call init(prompt) before step()")
        self.turns += 1
        observation, reward, terminated, truncated, info = self.env.step(action)
        done = bool(terminated or truncated)
        return BaseTextEnvStepOutput(
            observations=[] if done or not observation else [{"role": "user", "content": observation}],
            reward=float(reward),
            done=done,
            metadata=info,
        )

    def get_metrics(self) -> dict[str, Any]:
        """Per-episode numbers (reward and its parts, searches, invalid actions, response length)."""
        return self.env.episode.metrics() if self.env is not None else {}
