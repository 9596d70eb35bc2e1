"""searchenv on verifiers: the ``searchqa`` v1 taskset (tasks, toolset, rewards) over any searchenv dataset and engine.

``pip install 'searchenv[verifiers]'`` installs the top-level module ``searchqa`` that verifiers' loader imports for
the id ``searchqa``; see ``docs/hubs.md``. The names load on first use: verifiers starts the toolset's server as
``python -m searchenv.adapters.verifiers.toolset``, which must not be imported by this package first.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "SearchQAData",
    "SearchQAOptions",
    "SearchQATask",
    "SearchQATaskConfig",
    "SearchQATaskset",
    "SearchQATasksetConfig",
    "SearchQAToolset",
    "SearchQAToolsetConfig",
]

_HOMES = {
    "SearchQAOptions": "options",
    "SearchQAToolset": "toolset",
    "SearchQAToolsetConfig": "toolset",
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_HOMES.get(name, 'taskset')}")
    return getattr(module, name)
