"""Deprecation aliases for public names that moved to a new home: the old import keeps working, with a
``DeprecationWarning`` that names the new one (the CHANGELOG lists each move)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

from searchenv.imports import load_attr

__all__ = ["moved_names"]


def moved_names(old_module: str, new_homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old_module``: each old name in ``new_homes`` is served from its new home
    (``"package.module:attr"``), with a warning (once per use site, Python's default filter) that it moved."""

    def __getattr__(name: str) -> Any:
        home = new_homes.get(name)
        if home is None:
            raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
        warnings.warn(
            f"{old_module}.{name} moved to {home.replace(':', '.')}; import it from there "
            "(the old name will be removed in a later release)",
            DeprecationWarning,
            stacklevel=2,
        )
        return load_attr(home)

    return __getattr__
