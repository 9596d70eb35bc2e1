"""Moved: the ``searchenv serve`` command line is :mod:`searchenv.cli.serve` (command-line code lives in
``searchenv/cli/``). The service's own names are re-exported here for old imports; the command-line names
(``add_serve_parser``, ``config_from_args``, ``run_serve``, ``main``) still resolve, with a
``DeprecationWarning``."""

from __future__ import annotations

from searchenv.imports import moved
from searchenv.retrievers.server.app import ServerConfig, create_app
from searchenv.retrievers.server.run import serve

__all__ = ["ServerConfig", "create_app", "serve"]

__getattr__ = moved(
    __name__,
    {name: f"searchenv.cli.serve:{name}" for name in ("add_serve_parser", "config_from_args", "main", "run_serve")},
)
