"""The checks of the wrappers' own options, in one place: the option check (before anything loads) and the
constructors both call :func:`check_wrapper_options`. The base engine's options are checked by
:func:`searchenv.retrievers.check_retriever_options`, which knows every engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from searchenv.checks import integer, positive_int
from searchenv.retrievers.degraded.schedule import parse_schedule

__all__ = ["check_wrapper_options"]


def check_wrapper_options(name: str, options: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the fix for a missing ``p`` (``noisy`` has no default) or a bad value."""
    if name == "noisy" and options.get("p") is None:
        raise ValueError("retriever 'noisy' needs p, the probability of replacing each passage (e.g. 'p': 0.5)")
    if options.get("p") is not None:
        parse_schedule(options["p"], f"{name}: p")
    if options.get("seed") is not None:
        integer(options["seed"], f"{name}: seed")
    if options.get("fetch") is not None:
        positive_int(options["fetch"], f"{name}: fetch", fix="the passages asked of the base")
    answers = options.get("answers")
    if answers is not None and (
        isinstance(answers, str)
        or not isinstance(answers, (list, tuple))
        or not all(isinstance(a, str) for a in answers)
    ):
        raise ValueError(f"{name}: answers must be a list of strings (the golds to drop), got {answers!r}")
