"""Where searchenv keeps what it builds once and reuses: embeddings, indexes, downloads.

One user-level root, ``$SEARCHENV_CACHE_DIR`` (or the older spelling ``$SEARCHENV_CACHE``), else
``~/.cache/searchenv``; every cache-using call also takes an explicit directory, which wins.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CACHE_ENV", "cache_root"]

#: The environment variable naming the cache root.
CACHE_ENV = "SEARCHENV_CACHE_DIR"


def cache_root(override: str | os.PathLike[str] | None = None) -> Path:
    """``override`` if given, else ``$SEARCHENV_CACHE_DIR``, ``$SEARCHENV_CACHE``, or ``~/.cache/searchenv``."""
    if override is not None:
        return Path(override).expanduser()
    for name in (CACHE_ENV, "SEARCHENV_CACHE"):
        if os.environ.get(name):
            return Path(os.environ[name]).expanduser()
    return Path.home() / ".cache" / "searchenv"
