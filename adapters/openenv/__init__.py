"""searchenv on OpenEnv: SearchQA as an OpenEnv environment, its server, and TRL's environment path through it.

``pip install 'searchenv[openenv]'``; serve with ``searchenv openenv-serve`` (loopback by default) and connect any
OpenEnv client, e.g. ``GenericEnvClient(base_url="http://127.0.0.1:8000").sync()``. See ``docs/hubs.md``.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> the module that defines it. They load on first use, so ``searchenv openenv-serve``'s flags (and
#: the whole CLI) build without OpenEnv installed; using any of them needs ``searchenv[openenv]``.
_EXPORTS = {
    "SearchAction": "models",
    "SearchObservation": "models",
    "SearchState": "models",
    "SearchQAEnvironment": "environment",
    "SearchQATasks": "environment",
    "dataset_splits": "environment",
    "create_app": "app",
}

__all__ = [
    "SearchAction",
    "SearchObservation",
    "SearchQAEnvironment",
    "SearchQATasks",
    "SearchState",
    "create_app",
    "dataset_splits",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
