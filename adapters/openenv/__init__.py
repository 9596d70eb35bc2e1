"""searchenv on OpenEnv: SearchQA as an OpenEnv environment, its server, and TRL's environment path through it.

``pip install 'searchenv[openenv]'``; serve with ``searchenv openenv-serve`` (loopback by default) and connect any
OpenEnv client, e.g. ``GenericEnvClient(base_url="http://127.0.0.1:8000").sync()``. See ``docs/hubs.md``.
"""

from searchenv.adapters.openenv.app import create_app
from searchenv.adapters.openenv.environment import SearchQAEnvironment, SearchQATasks, dataset_splits
from searchenv.adapters.openenv.models import SearchAction, SearchObservation, SearchState

__all__ = [
    "SearchAction",
    "SearchObservation",
    "SearchQAEnvironment",
    "SearchQATasks",
    "SearchState",
    "create_app",
    "dataset_splits",
]
