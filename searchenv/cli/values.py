"""The ``argparse`` value types every command shares: counts, ``KEY=VALUE`` pairs and comma lists.

A malformed value is refused by argparse itself, before the command runs, as ``searchenv <command>: error:
argument --topk: expected a positive integer, got 'three'``. Nothing here imports more than the standard library.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "comma_list",
    "key_value",
    "merge_options",
    "non_negative_float",
    "non_negative_int",
    "positive_int",
    "positive_ints",
    "word_cap",
]


def _int_at_least(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    return _int_at_least(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    """An integer of at least 0."""
    return _int_at_least(text, 0, "an integer >= 0")


def non_negative_float(text: str) -> float:
    """A finite number of at least 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


def word_cap(text: str) -> int | None:
    """A number of words, or ``none`` for no cap."""
    return None if text.strip().lower() == "none" else non_negative_int(text)


def key_value(text: str) -> tuple[str, Any]:
    """``KEY=VALUE``; VALUE is read as JSON when it can be (``seed=1`` is the int 1, ``p=[[0,0],[9,1]]`` a list)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. seed=1 or index_dir=indexes/wiki), got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except json.JSONDecodeError:
        return key.strip(), value


def comma_list(cast: Callable[[str], Any] = str, what: str = "a name") -> Callable[[str], list[Any]]:
    """A type for ``a,b,c``: the non-empty items, each read by ``cast`` (``what`` says what an item must be)."""

    def parse(text: str) -> list[Any]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        try:
            return [cast(t) for t in items]
        except (ValueError, argparse.ArgumentTypeError):
            raise argparse.ArgumentTypeError(f"{text!r}: every item must be {what}") from None

    return parse


def positive_ints(text: str) -> list[int]:
    """``1,3,5``: distinct positive integers, sorted."""
    return sorted(set(comma_list(positive_int, "a positive integer")(text)))


def merge_options(pairs: Sequence[tuple[str, Any]], what: str) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as a dict; a key given twice with different values is refused, naming ``what``."""
    options: dict[str, Any] = {}
    for key, value in pairs:
        if key in options and options[key] != value:
            raise ValueError(f"{what} {key!r} given twice with different values ({options[key]!r}, {value!r})")
        options[key] = value
    return options
