"""One line on stderr while the native engine's numba kernels compile: the first run after installing.

The kernels are compiled on first use and kept in numba's on-disk cache (``cache=True``), so only the first run
after ``pip install`` pays for it — about 40 s on 2 cores, in silence, which looks like a hang. numba announces each
compilation it starts (the ``numba:compile`` event, fired only when its cache has no machine code for the call);
the first one of a kernel of ours prints the line below, once per process (and not again in the worker processes
it starts). Later runs load the cache and print nothing, so neither do test runs after the first.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

__all__ = ["NOTICE", "announce_compiles"]

#: What is printed.
NOTICE = (
    "searchenv: compiling the native BM25 engine's kernels (numba) — once after installing, seconds to a minute; "
    "later runs load them from numba's cache"
)
_KERNEL_MODULES = "searchenv.retrievers.bm25"
_ANNOUNCED = "SEARCHENV_KERNELS_ANNOUNCED"  # set once printed, so worker processes started later stay quiet
_lock = threading.Lock()
_installed = False


def announce_compiles() -> None:
    """Listen for numba compiling a kernel of ours (idempotent)."""
    global _installed
    from numba.core import event

    with _lock:
        if _installed:
            return
        _installed = True

    class Notice(event.Listener):
        def on_start(self, happening: Any) -> None:
            dispatcher = (happening.data or {}).get("dispatcher")
            module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
            if module.startswith(_KERNEL_MODULES) and not os.environ.get(_ANNOUNCED):
                os.environ[_ANNOUNCED] = "1"
                print(NOTICE, file=sys.stderr, flush=True)

        def on_end(self, happening: Any) -> None:
            pass

    event.register("numba:compile", Notice())
