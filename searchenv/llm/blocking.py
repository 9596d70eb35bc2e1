"""Running a coroutine to its end from synchronous code — the bridge a synchronous API (``Prompter.ask``, a
reward's ``__call__``) needs over an asynchronous client.

Outside an event loop it is ``asyncio.run``. Inside one (a synchronous call made from a coroutine: veRL's agent
loop calling a reward, ``env.step`` inside ``async def``) the coroutine runs on a thread of its own with its own
loop, and the calling thread waits for it: that keeps the answer correct but blocks the caller's loop for as long
as it takes. Asynchronous callers should await the async API instead (``Prompter.aask``, a reward's
``ascore_batch``: what ``SearchQAEnv.step_async`` does).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["run_coroutine"]

T = TypeVar("T")


def run_coroutine(make: Callable[[], Awaitable[T]]) -> T:
    """Run ``make()`` to the end and return its result (see the module docstring)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())  # type: ignore[arg-type]
    box: list[Any] = []

    def work() -> None:
        try:
            box.append(asyncio.run(make()))  # type: ignore[arg-type]
        except BaseException as exc:  # handed to the caller's thread
            box.append(exc)

    thread = threading.Thread(target=work, name="searchenv-run-coroutine")
    thread.start()
    thread.join()
    if isinstance(box[0], BaseException):
        raise box[0]
    return box[0]
