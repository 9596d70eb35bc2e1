"""SkyRL trainer entry point and config for the ``searchenv`` environment (the ``skyrl`` package, 0.3.x).

SkyRL's config is a tree of dataclasses: it rejects ``+key=value`` overrides and unknown keys, and its generator
passes ``getattr(cfg.environment.skyrl_gym, env_class, {})`` to the environment. :class:`SearchEnvSkyRLConfig`
adds the ``environment.skyrl_gym.searchenv`` section (:class:`SearchEnvOptions`), so the options reach every
environment; :func:`main` is SkyRL's own ``main_base`` flow with that config and the environment registered
inside the Ray entry point::

    python -m searchenv.adapters.skyrl.train \\
        data.train_data="['data/skyrl/train.parquet']" data.val_data="['data/skyrl/test.parquet']" \\
        trainer.policy.model.path=Qwen/Qwen2.5-3B-Instruct \\
        environment.skyrl_gym.searchenv.retriever=http://127.0.0.1:8000

or through SkyRL's own launcher: ``python -m skyrl.train.entrypoints.main_base
trainer.override_entrypoint=searchenv.adapters.skyrl.train ...``. :data:`RECIPE` holds the defaults the search task
needs (applied first, so later overrides win): ``environment.env_class=searchenv``, SearchQAEnv's default number of
turns, stop strings at the closing tags, console logging (``trainer.logger=wandb`` to opt in), and
``generator.max_input_length=4096`` as SkyRL's own Search-R1 recipe (SkyRL's default is
``trainer.max_prompt_length``, 512: one search already overflows it and every episode ends
unanswered).

SkyRL 0.3.0 cannot build its config on Python 3.11 (``skyrl/tinker/types.py`` declares a ``typing.TypedDict``
inside a pydantic model, which pydantic rejects before Python 3.12): run it on Python 3.12+.
"""

# No ``from __future__ import annotations``: SkyRL builds nested config sections from the real field types.
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from skyrl.train.config import BaseConfig, EnvironmentConfig, SkyRLGymConfig, SkyRLTrainConfig

from searchenv.adapters.rows import SKYRL_ENV_CLASS
from searchenv.env.defaults import env_default

__all__ = ["RECIPE", "SearchEnvOptions", "SearchEnvSkyRLConfig", "compose", "main"]

#: Overrides applied before the user's: what a multi-turn search run needs on top of SkyRL's defaults.
RECIPE: tuple[str, ...] = (
    f"environment.env_class={SKYRL_ENV_CLASS}",
    f"generator.max_turns={env_default('max_turns')}",
    "generator.max_input_length=4096",
    "generator.use_conversation_multi_turn=false",
    "generator.sampling_params.stop=['</search>','</answer>']",
    "generator.eval_sampling_params.stop=['</search>','</answer>']",
    "trainer.logger=console",  # SkyRL's default is wandb, which fails without WANDB_API_KEY
)
_OVERRIDE_ENTRYPOINT = "trainer.override_entrypoint="


@dataclass
class SearchEnvOptions(BaseConfig):
    """``environment.skyrl_gym.searchenv``: SearchQAEnv options for every episode (see searchenv.adapters.skyrl.env).

    ``retriever`` has no default on purpose: without one the environment raises instead of searching the
    built-in world."""

    retriever: Optional[str] = None
    corpus: Optional[str] = None
    reward: str = env_default("reward")
    topk: int = env_default("topk")
    protocol: str = env_default("protocol")
    prompt: str = "auto"
    retriever_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class SearchEnvSkyRLGymConfig(SkyRLGymConfig):
    searchenv: SearchEnvOptions = field(default_factory=SearchEnvOptions)


@dataclass
class SearchEnvEnvironmentConfig(EnvironmentConfig):
    skyrl_gym: SearchEnvSkyRLGymConfig = field(default_factory=SearchEnvSkyRLGymConfig)


@dataclass
class SearchEnvSkyRLConfig(SkyRLTrainConfig):
    """SkyRL's training config with the ``environment.skyrl_gym.searchenv`` section."""

    environment: SearchEnvEnvironmentConfig = field(default_factory=SearchEnvEnvironmentConfig)


def compose(overrides: Sequence[str] = ()) -> SearchEnvSkyRLConfig:
    """The typed config for ``overrides`` on top of :data:`RECIPE`, parsed by SkyRL's own ``from_cli_overrides``."""
    args = [*RECIPE, *(a for a in overrides if not a.startswith(_OVERRIDE_ENTRYPOINT))]
    return SearchEnvSkyRLConfig.from_cli_overrides(args)


def main(argv: Optional[Sequence[str]] = None) -> None:
    """SkyRL's ``main_base.main`` with :class:`SearchEnvSkyRLConfig` and the environment registered in Ray."""
    import ray
    from skyrl.train.entrypoints.main_base import BasePPOExp
    from skyrl.train.utils import validate_cfg
    from skyrl.train.utils.utils import initialize_ray

    cfg = compose(sys.argv[1:] if argv is None else argv)
    if not cfg.environment.skyrl_gym.searchenv.retriever:
        raise SystemExit("set environment.skyrl_gym.searchenv.retriever (a `searchenv serve` URL, or bm25 + .corpus)")
    validate_cfg(cfg)
    initialize_ray(cfg)

    @ray.remote(num_cpus=1)
    def entrypoint(config: SearchEnvSkyRLConfig) -> None:
        from searchenv.adapters.skyrl.env import register_skyrl_env

        register_skyrl_env()
        BasePPOExp(config).run()

    ray.get(entrypoint.remote(cfg))


if __name__ == "__main__":
    main()
