"""Moved: the ``searchenv serve`` command line is :mod:`searchenv.cli.serve` (command-line code lives in
``searchenv/cli/``). The service's own names are re-exported here for old imports; the command-line names
(``add_serve_parser``, ``config_from_args``, ``run_serve``, ``main``) still resolve, with a
``DeprecationWarning``."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from searchenv.retrievers.server.app import ServerConfig, create_app
from searchenv.retrievers.server.run import serve

__all__ = ["ServerConfig", "create_app", "serve"]

_MOVED = ("add_serve_parser", "config_from_args", "main", "run_serve")


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        warnings.warn(
            f"searchenv.retrievers.server.command.{name} moved to searchenv.cli.serve.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module("searchenv.cli.serve"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
