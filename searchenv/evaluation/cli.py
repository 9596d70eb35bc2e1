"""Moved: the evaluation commands' parsers are :mod:`searchenv.cli.evaluation` (command-line code lives in
``searchenv/cli/``). ``add_evaluation_parsers`` still resolves here, with a ``DeprecationWarning``."""

from __future__ import annotations

from searchenv.imports import moved

__getattr__ = moved(__name__, {"add_evaluation_parsers": "searchenv.cli.evaluation:add_evaluation_parsers"})
