"""The verifiers taskset id ``searchqa``: verifiers' loader imports this module and takes the one ``Taskset`` subclass
in its ``__all__``. The code lives in :mod:`searchenv.adapters.verifiers` (``pip install 'searchenv[verifiers]'``)."""

from searchenv.adapters.verifiers.taskset import SearchQATaskset

__all__ = ["SearchQATaskset"]
