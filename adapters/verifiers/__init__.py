"""searchenv on verifiers: the ``searchqa`` v1 taskset (tasks, toolset, rewards) over any searchenv dataset and engine.

``pip install 'searchenv[verifiers]'`` installs the top-level module ``searchqa`` that verifiers' loader imports for
the id ``searchqa``; see ``docs/hubs.md``.
"""

from searchenv.adapters.verifiers.options import SearchQAOptions
from searchenv.adapters.verifiers.taskset import (
    SearchQAData,
    SearchQATask,
    SearchQATaskConfig,
    SearchQATaskset,
    SearchQATasksetConfig,
)
from searchenv.adapters.verifiers.toolset import SearchQAToolset, SearchQAToolsetConfig

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
