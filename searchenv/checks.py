"""The value checks every option table and constructor shares: integers, numbers, probabilities and choices.

One rule each, so that ``True`` is never taken for ``1`` (``bool`` is a subclass of ``int`` in Python: an
``isinstance(value, int)`` check alone lets ``k=True`` through), NumPy integers count as integers, and every
refusal reads alike: ``<name> must be <what>, got <value>`` plus, for a choice, the nearest valid spelling
(``did you mean 'bm25'?``). Each check returns the value as the plain Python type, so a caller can write
``self.k = positive_int(k, "k")``. Nothing here imports more than the standard library.
"""

from __future__ import annotations

import difflib
import numbers
import os
from collections.abc import Iterable
from typing import Any, TypeVar

__all__ = [
    "choice",
    "did_you_mean",
    "integer",
    "is_int",
    "is_number",
    "matches_type",
    "non_negative_int",
    "number",
    "positive_int",
    "probability",
]

T = TypeVar("T")


def is_int(value: Any) -> bool:
    """An integer (Python or NumPy), and not a ``bool``."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A real number (integer or float, Python or NumPy), and not a ``bool``."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _refuse(error: type[Exception], message: str, fix: str) -> Exception:
    return error(f"{message}; {fix}" if fix else message)


def integer(
    value: Any,
    name: str,
    low: int | None = None,
    high: int | None = None,
    *,
    fix: str = "",
    error: type[Exception] = ValueError,
) -> int:
    """``value`` as an ``int`` when it is an integer in ``[low, high]`` (either bound may be open); else ``error``.

    The message names ``name``, what it must be and what it got, then ``fix`` when given.
    """
    if low == 1 and high is None:
        kind = "a positive integer"
    elif low == 0 and high is None:
        kind = "a non-negative integer"
    elif low is not None and high is None:
        kind = f"an integer >= {low}"
    elif high is not None and low is None:
        kind = f"an integer <= {high}"
    else:
        kind = "an integer"
    if not is_int(value):
        raise _refuse(error, f"{name} must be {kind}, got {value!r}", fix)
    if low is not None and high is not None and not low <= value <= high:
        raise _refuse(error, f"{name} must be between {low:,} and {high:,}, got {value:,}", fix)
    if (low is not None and value < low) or (high is not None and value > high):
        raise _refuse(error, f"{name} must be {kind}, got {value!r}", fix)
    return int(value)


def positive_int(value: Any, name: str, *, fix: str = "", error: type[Exception] = ValueError) -> int:
    """``value`` when it is an integer of at least 1 (``True`` is not one)."""
    return integer(value, name, 1, fix=fix, error=error)


def non_negative_int(value: Any, name: str, *, fix: str = "", error: type[Exception] = ValueError) -> int:
    """``value`` when it is an integer of at least 0."""
    return integer(value, name, 0, fix=fix, error=error)


def number(
    value: Any,
    name: str,
    low: float | None = None,
    high: float | None = None,
    *,
    high_open: bool = False,
    fix: str = "",
    error: type[Exception] = ValueError,
) -> float:
    """``value`` as a ``float`` when it is a number in ``[low, high]`` (``[low, high)`` with ``high_open``).

    NaN is refused whenever a bound is given (it compares false with everything).
    """
    if not is_number(value):
        raise _refuse(error, f"{name} must be a number, got {value!r}", fix)
    inside = (low is None or value >= low) and (high is None or (value < high if high_open else value <= high))
    if not inside:
        lower = "-inf" if low is None else f"{low:g}"
        upper = "inf" if high is None else f"{high:g}"
        closing = ")" if high_open or high is None else "]"
        raise _refuse(error, f"{name} must be in [{lower}, {upper}{closing}, got {value!r}", fix)
    return float(value)


def probability(value: Any, name: str, *, fix: str = "", error: type[Exception] = ValueError) -> float:
    """``value`` as a ``float`` when it is a number in ``[0, 1]``."""
    if not is_number(value) or not 0.0 <= value <= 1.0:
        raise _refuse(error, f"{name} must be a probability in [0, 1], got {value!r}", fix)
    return float(value)


def did_you_mean(word: Any, options: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the option nearest to ``word``, or ``""`` when none is near."""
    close = difflib.get_close_matches(str(word), list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def choice(value: Any, name: str, choices: Iterable[T], *, fix: str = "", error: type[Exception] = ValueError) -> T:
    """``value`` when it is one of ``choices``; else ``error`` listing them, with the nearest spelling."""
    options = list(choices)
    if value not in options:
        hint = did_you_mean(value, [str(c) for c in options]) if isinstance(value, str) else ""
        raise _refuse(error, f"{name} must be one of {options}, got {value!r}{hint}", fix)
    return value


def matches_type(value: Any, kind: type) -> bool:
    """The option tables' type rule: ``None`` always fits (the engine's default); ``object`` takes anything;
    ``bool`` only a bool; ``int`` an integer that is not a bool; ``float`` any number but a bool; ``str`` a
    string or a path."""
    if value is None or kind is object:
        return True
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return is_int(value)
    if kind is float:
        return is_number(value)
    return isinstance(value, (str, os.PathLike))
