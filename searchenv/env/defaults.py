"""The environment's defaults, read from :class:`~searchenv.env.SearchQAEnv`'s own signature.

The CLI options (:func:`searchenv.cli.arguments.add_env_arguments`) and the trainer adapters (veRL/SkyRL rows,
the PPO and TRL recipes, SkyRL's typed config) all start from these values, so changing a default in
``SearchQAEnv.__init__`` changes it everywhere; before, four places repeated ``topk=3``, ``max_turns=4``,
``"search-r1"`` and drifted one at a time.
"""

from __future__ import annotations

import inspect
from functools import cache
from types import MappingProxyType
from typing import Any

from searchenv.env.search_qa import SearchQAEnv

__all__ = ["env_default", "env_defaults"]


@cache
def env_defaults() -> MappingProxyType[str, Any]:
    """Every ``SearchQAEnv`` keyword argument with a default → that default (read-only)."""
    parameters = inspect.signature(SearchQAEnv).parameters.values()
    return MappingProxyType({p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty})


def env_default(name: str) -> Any:
    """One default; ``KeyError`` naming the arguments that exist if ``name`` is not one of them."""
    defaults = env_defaults()
    if name not in defaults:
        raise KeyError(f"SearchQAEnv has no argument {name!r}; its arguments are {sorted(defaults)}")
    return defaults[name]
