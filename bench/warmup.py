"""Warm an engine the way its users' long-running processes are warm, before anything is timed.

A JVM compiles its hot loops in tiers, long after the first few calls: on union.jsonl, pyserini's
``batch_search`` ran 3,489 q/s after 3 full passes over 1,000 questions, 5,082 after 15 and 8,298 after 30
(same machine, minutes apart). A fixed small number of warm-up passes therefore times a peer that is still
compiling. :func:`warm_until_steady` keeps passing over the questions until the fastest pass stops improving;
every engine of a benchmark goes through it, ours included.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["warm_until_steady"]


def warm_until_steady(
    one_pass: Callable[[], object],
    *,
    min_passes: int = 3,
    patience: int = 8,
    tolerance: float = 0.02,
    max_seconds: float = 180.0,
) -> int:
    """Run ``one_pass`` until ``patience`` passes in a row are no more than ``tolerance`` faster than the best
    so far (and at least ``min_passes`` ran), or ``max_seconds`` have gone by; return how many passes ran."""
    best, stale, passes = float("inf"), 0, 0
    deadline = time.perf_counter() + max_seconds
    while passes < min_passes or (stale < patience and time.perf_counter() < deadline):
        start = time.perf_counter()
        one_pass()
        seconds = time.perf_counter() - start
        passes += 1
        if seconds < best * (1 - tolerance):
            best, stale = seconds, 0
        else:
            stale += 1
    return passes
