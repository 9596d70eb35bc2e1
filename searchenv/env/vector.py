"""``gym.make_vec("SearchQA-v0", num_envs=N)``: N episodes stepped together in one process.

Subprocess vectorisation would give each copy its own index and one engine call per episode. Here the N
episodes share one retriever and every step issues a single batched ``search`` for all of them
(:func:`searchenv.env.stepping.step_batch`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv
from gymnasium.vector.utils import batch_space
from gymnasium.vector.vector_env import AutoresetMode

from searchenv.env.search_qa import SearchQAEnv
from searchenv.env.stepping import step_batch

__all__ = ["SearchQAVectorEnv"]


class SearchQAVectorEnv(VectorEnv):
    """N :class:`SearchQAEnv` episodes sharing one dataset, retriever and reward spec.

    Observations, rewards and flags are numpy arrays of length N (observations as an object array of
    strings). Finished sub-environments reset on the following ``step`` (Gymnasium's ``NEXT_STEP``
    autoreset mode), whose action for them is ignored.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": ["ansi"]}

    def __init__(self, num_envs: int = 1, **env_kwargs: Any):
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
        first = SearchQAEnv(**env_kwargs)
        self.envs = [first] + [first.sibling() for _ in range(num_envs - 1)]
        self.num_envs = num_envs
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(first.observation_space, num_envs)
        self.action_space = batch_space(first.action_space, num_envs)
        self.render_mode = env_kwargs.get("render_mode")
        self._autoreset = np.zeros(num_envs, dtype=bool)

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        seeds = seed if isinstance(seed, list) else [None if seed is None else seed + i for i in range(self.num_envs)]
        if len(seeds) != self.num_envs:
            raise ValueError(f"reset got {len(seeds)} seeds for {self.num_envs} environments")
        observations = np.empty(self.num_envs, dtype=object)
        infos: dict[str, Any] = {}
        for i, (env, s) in enumerate(zip(self.envs, seeds)):
            observations[i], info = env.reset(seed=s, options=options)
            infos = self._add_info(infos, info, i)
        self._autoreset[:] = False
        return observations, infos

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if len(actions) != self.num_envs:
            raise ValueError(f"step got {len(actions)} actions for {self.num_envs} environments")
        observations = np.empty(self.num_envs, dtype=object)
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminations = np.zeros(self.num_envs, dtype=bool)
        truncations = np.zeros(self.num_envs, dtype=bool)
        infos: dict[str, Any] = {}
        active = [i for i in range(self.num_envs) if not self._autoreset[i]]
        for i in np.flatnonzero(self._autoreset):
            observations[i], info = self.envs[i].reset()
            infos = self._add_info(infos, info, int(i))
        results = step_batch([self.envs[i] for i in active], [actions[i] for i in active])
        for i, (obs, reward, terminated, truncated, info) in zip(active, results):
            observations[i], rewards[i], terminations[i], truncations[i] = obs, reward, terminated, truncated
            infos = self._add_info(infos, info, i)
        self._autoreset = terminations | truncations
        return observations, rewards, terminations, truncations, infos

    def render(self) -> tuple[str | None, ...]:
        return tuple(env.render() for env in self.envs)

    def close_extras(self, **kwargs: Any) -> None:
        """Close every sub-environment (``VectorEnv.close`` calls this once); the shared retriever is left to the
        composition root that built it (:func:`searchenv.components.close_shared`)."""
        for env in self.envs:
            env.close()
