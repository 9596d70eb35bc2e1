"""The simulated engine's option check, shared by the check before anything loads
(:func:`searchenv.retrievers.check_retriever_options`) and the engine's constructor."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
}


def check_simulated_options(options: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the fix for a missing model, a bad URL, ``p_noisy`` or size."""
    from searchenv.evaluation.prompter import check_model_source

    check_model_source(options.get("url"), options.get("model"), "retriever 'simulated'")
    if options.get("p_noisy") is not None:
        parse_schedule(options["p_noisy"], "simulated: p_noisy")
    for key, low in (("words", 1), ("concurrency", 1), ("retries", 0)):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise ValueError(f"simulated: {key} must be an integer >= {low}, got {value!r}")
    temperature = options.get("temperature")
    if temperature is not None and (isinstance(temperature, bool) or not 0 <= temperature <= 2):
        raise ValueError(f"simulated: temperature must be in [0, 2] (0 = greedy, reproducible), got {temperature!r}")
    if options.get("mode") not in (None, "chat", "completions"):
        raise ValueError(f"simulated: mode must be 'chat' or 'completions', got {options['mode']!r}")
