"""The one reader of ``"package.module:attr"`` references (custom retrievers, reward answerers, CLI commands).

A reference names a Python object by where it lives, as Gymnasium's ``entry_point`` does, so a user plugs in
a factory or a callable without registering it anywhere. :func:`check_reference` finds the module without
importing it (for "check first, load later" validation), :func:`load_attr` imports it; both give one error
that says which part is wrong and what a valid reference looks like.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

__all__ = ["check_reference", "is_reference", "load_attr", "split_reference"]


def is_reference(text: str) -> bool:
    """Whether ``text`` is written as a ``"module:attr"`` reference (a URL such as ``http://host:80`` is not)."""
    return ":" in text and "://" not in text


def split_reference(text: str, what: str = "reference") -> tuple[str, str]:
    """``"package.module:attr"`` → ``("package.module", "attr")``; ``ValueError`` naming the fix otherwise."""
    module_name, sep, attr = text.partition(":")
    if not sep or not module_name.strip() or not attr.strip() or ":" in attr:
        raise ValueError(f"{what} must be 'package.module:attr' (e.g. 'mypackage.engines:make_engine'), got {text!r}")
    return module_name.strip(), attr.strip()


def check_reference(text: str, what: str = "reference") -> None:
    """Raise ``ValueError`` unless ``text`` is well formed and its module can be found; nothing is imported.

    The attribute itself is only looked up by :func:`load_attr` (finding it would need the import).
    """
    module_name, _ = split_reference(text, what)
    try:
        found = importlib.util.find_spec(module_name)
    except ModuleNotFoundError:  # a parent package is missing
        found = None
    if found is None:
        raise ValueError(f"{what} {text!r}: no module {module_name!r} is importable; install it or fix the name")


def load_attr(text: str, what: str = "reference") -> Any:
    """Import ``module`` and return its ``attr`` for ``"module:attr"`` (dotted ``attr`` such as ``Class.method`` too).

    Raises ``ValueError`` for a malformed reference and ``ImportError`` naming the module or the missing attribute.
    """
    module_name, attr = split_reference(text, what)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"{what} {text!r}: cannot import module {module_name!r} ({exc})") from exc
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ImportError(f"{what} {text!r}: module {module_name!r} has no attribute {attr!r}") from None
    return target
