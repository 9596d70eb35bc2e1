"""Moved: the evaluation commands' parsers are :mod:`searchenv.cli.evaluation` (command-line code lives in
``searchenv/cli/``). ``add_evaluation_parsers`` still resolves here, with a ``DeprecationWarning``."""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    if name == "add_evaluation_parsers":
        warnings.warn(
            "searchenv.evaluation.cli.add_evaluation_parsers moved to searchenv.cli.evaluation.add_evaluation_parsers",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module("searchenv.cli.evaluation").add_evaluation_parsers
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
