"""The simulated engine's option check, shared by the check before anything loads
(:func:`searchenv.retrievers.check_retriever_options`) and the engine's constructor."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from searchenv.checks import choice, integer, number
from searchenv.retrievers.degraded.schedule import parse_schedule

__all__ = ["SIMULATED_OPTIONS", "check_simulated_options"]

#: option → type, as :data:`searchenv.retrievers.RETRIEVER_OPTIONS` lists them (``p_noisy``: a probability or a
#: schedule of ``(step, p)`` points).
SIMULATED_OPTIONS: dict[str, type] = {
    "url": str,
    "model": str,
    "p_noisy": object,
    "seed": int,
    "temperature": float,
    "words": int,
    "mode": str,
    "timeout": float,
    "retries": int,
    "concurrency": int,
    "device": str,
    "cache": str,
    "cache_mode": str,
    "check_on_start": bool,
}


def check_simulated_options(options: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the fix for a missing model, a bad URL, ``p_noisy`` or size."""
    from searchenv.answer_store import CACHE_MODES
    from searchenv.llm.local import check_model_source

    check_model_source(options.get("url"), options.get("model"), "retriever 'simulated'")
    if options.get("p_noisy") is not None:
        parse_schedule(options["p_noisy"], "simulated: p_noisy")
    for key, low in (("words", 1), ("concurrency", 1), ("retries", 0)):
        if options.get(key) is not None:
            integer(options[key], f"simulated: {key}", low)
    if options.get("temperature") is not None:
        number(options["temperature"], "simulated: temperature", 0, 2, fix="0 = greedy, reproducible")
    if options.get("mode") is not None:
        choice(options["mode"], "simulated: mode", ("chat", "completions"))
    if options.get("cache_mode") is not None:
        choice(options["cache_mode"], "simulated: cache_mode", CACHE_MODES)
