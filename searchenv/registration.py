"""Registers ``SearchQA-v0`` with Gymnasium (on ``import searchenv`` and through the plugin entry point)."""

from __future__ import annotations

import gymnasium as gym

__all__ = ["ENV_ID", "register_envs"]

ENV_ID = "SearchQA-v0"


def register_envs() -> None:
    """Register the environment and its vector entry point; safe to call more than once."""
    if ENV_ID in gym.registry:
        return
    gym.register(
        id=ENV_ID,
        entry_point="searchenv.env.search_qa:SearchQAEnv",
        vector_entry_point="searchenv.env.vector:SearchQAVectorEnv",
        disable_env_checker=False,
    )
