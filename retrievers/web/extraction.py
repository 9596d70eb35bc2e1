"""A page's main text, extracted under the page's deadline and a memory cap, in a worker process.

Extraction is the slow part of reading a page and its cost grows with the page's structure, not its bytes: a
4.9 MB page of tiny paragraphs took trafilatura over 20 s and close to 1 GB. Running it in the reader's own
threads would put it outside the page deadline and let one page take the memory of the whole run. So HTML is
handed to a worker process (``python -m searchenv.retrievers.web.extraction``: a plain subprocess, so nothing of
the caller's ``__main__`` is re-run) which extracts under an address-space limit (``RLIMIT_AS``, where the
platform has it): the caller waits at most until the page's deadline, then kills the worker (``timeout``); a
page that needs more than the memory cap is ``too_large``. Workers are shared by every reader of the process and
reused, so the import cost is paid once; a worker that was killed, died or kept much memory is replaced.

Plain text and Markdown are decoded in place: their cost is linear and small.
"""

from __future__ import annotations

import atexit
import codecs
import os
import pickle
import selectors
import struct
import subprocess
import sys
import threading
import time
from typing import Any, BinaryIO

__all__ = ["DEFAULT_MEMORY", "MIN_MEMORY", "ExtractionFailed", "extract_main_text", "extract_within"]

#: Address space one extraction may add to a worker (bytes).
DEFAULT_MEMORY = 512 * 1024 * 1024
#: Least memory cap: well above what a worker may keep from earlier pages (:data:`RETIRE_GROWTH`).
MIN_MEMORY = 128 * 1024 * 1024
#: A worker whose address space ever grew more than this past its start is replaced after its page.
RETIRE_GROWTH = 64 * 1024 * 1024
#: Idle workers kept for reuse.
IDLE_WORKERS = 4
_HEADER = struct.Struct(">I")


class ExtractionFailed(Exception):
    """Extraction gave no text; ``kind`` is a page-error kind (``no_text``, ``binary``, ``timeout``,
    ``too_large``, ``failed``) and ``detail`` says why."""

    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def extract_within(
    url: str, body: bytes, content_type: str, deadline: float, memory: int = DEFAULT_MEMORY
) -> dict[str, str]:
    """``{"title", "text"}`` of the page, or :class:`ExtractionFailed`: HTML in a worker process that is killed at
    ``deadline`` (a ``time.monotonic()`` value) and may add at most ``memory`` bytes of address space."""
    kind = content_type.split(";")[0].strip().lower()
    if not kind and b"\x00" in body[:4096]:
        raise ExtractionFailed("binary", f"{url}: no content type and the body holds NUL bytes")
    if kind in ("text/plain", "text/markdown"):
        return extract_main_text(url, body, content_type)
    left = deadline - time.monotonic()
    if left <= 0:
        raise ExtractionFailed("timeout", f"{url}: no time left for main-text extraction within the page deadline")
    worker = _POOL.take()
    try:
        reply = worker.ask((url, body, content_type, memory), left)
    except TimeoutError:
        worker.kill()
        raise ExtractionFailed(
            "timeout", f"{url}: main-text extraction of {len(body):,} bytes ran past the page deadline"
        ) from None
    except (OSError, EOFError, pickle.UnpicklingError) as exc:
        worker.kill()
        raise ExtractionFailed(
            "failed", f"{url}: the extraction worker died ({type(exc).__name__}; exit code {worker.exit_code()})"
        ) from None
    _POOL.give_back(worker, retire=reply.get("retire", False))
    if "error" in reply:
        detail = reply["detail"]
        if reply["error"] == "too_large":
            detail = f"{url}: extracting the main text needs more than {memory / 2**20:,.0f} MiB of memory"
        raise ExtractionFailed(reply["error"], detail)
    return {"title": reply["title"], "text": reply["text"]}


def extract_main_text(url: str, body: bytes, content_type: str) -> dict[str, str]:
    """The main text (and title) of a page, here and now: trafilatura for HTML, the text itself for plain text."""
    kind = content_type.split(";")[0].strip().lower()
    if kind in ("text/plain", "text/markdown"):
        text = body.decode(_charset(content_type), errors="replace").strip()
        title = text.split("\n", 1)[0][:200]
    else:
        import trafilatura

        found = trafilatura.bare_extraction(body, url=url, with_metadata=True, include_comments=False)
        text = (getattr(found, "text", None) or "").strip()
        title = (getattr(found, "title", None) or "").strip()
    if not text:
        raise ExtractionFailed("no_text", f"{url}: no main text found in {len(body):,} bytes")
    return {"title": title or url, "text": text}


def _charset(content_type: str) -> str:
    """The ``charset`` of a content type when Python knows it, else UTF-8."""
    for part in content_type.split(";")[1:]:
        name, _, value = part.strip().partition("=")
        if name.strip().lower() == "charset":
            try:
                return codecs.lookup(value.strip().strip('"')).name
            except LookupError:
                break
    return "utf-8"


# -- the caller's side ------------------------------------------------------------------------------------------
class _Worker:
    """One worker process and its pipes."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "searchenv.retrievers.web.extraction"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def ask(self, request: Any, timeout: float) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        _send(self.process.stdin, request)
        return _receive(self.process.stdout, time.monotonic() + timeout)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()

    def exit_code(self) -> int | None:
        return self.process.poll()


class _Pool:
    """The process's extraction workers: taken one per page, given back when they answered. A forked child
    starts with none (its parent's workers stay its parent's); idle workers are stopped at exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        os.register_at_fork(after_in_child=self._forget)
        atexit.register(self.close)

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._idle = []

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()

    def take(self) -> _Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.exit_code() is None:
                    return worker
        return _Worker()

    def give_back(self, worker: _Worker, retire: bool) -> None:
        with self._lock:
            if not retire and len(self._idle) < IDLE_WORKERS:
                self._idle.append(worker)
                return
        worker.kill()


_POOL = _Pool()


def _send(pipe: BinaryIO, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    pipe.write(_HEADER.pack(len(data)) + data)
    pipe.flush()


def _receive(pipe: BinaryIO, deadline: float | None = None) -> Any:
    """One message; ``TimeoutError`` if it has not fully arrived by ``deadline`` (``None``: wait)."""
    header = _read_exactly(pipe, _HEADER.size, deadline)
    return pickle.loads(_read_exactly(pipe, _HEADER.unpack(header)[0], deadline))


def _read_exactly(pipe: BinaryIO, size: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not _readable(pipe, left):
                raise TimeoutError
        chunk = os.read(pipe.fileno(), size - got)
        if not chunk:
            raise EOFError("the worker closed its pipe")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _readable(pipe: BinaryIO, timeout: float) -> bool:
    """Whether ``pipe`` has bytes to read within ``timeout`` seconds (poll/epoll: any file descriptor number)."""
    with selectors.DefaultSelector() as selector:
        selector.register(pipe, selectors.EVENT_READ)
        return bool(selector.select(timeout))


# -- the worker's side ------------------------------------------------------------------------------------------
def _address_space() -> tuple[int, int] | None:
    """This process's address space and its peak so far, in bytes (Linux), else ``None``."""
    try:
        with open("/proc/self/status") as status:
            fields = dict(line.split(":", 1) for line in status if line.startswith(("VmSize", "VmPeak")))
        return int(fields["VmSize"].split()[0]) * 1024, int(fields["VmPeak"].split()[0]) * 1024
    except (OSError, ValueError, KeyError):
        return None


def _serve() -> None:
    """Answer extraction requests on stdin/stdout until stdin closes."""
    try:
        import resource
    except ImportError:  # no address-space limit on this platform; the deadline still holds
        resource = None  # type: ignore[assignment]
    requests = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), "wb")  # the replies' own pipe; anything a library prints goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        extract_main_text("warm-up", b"<html><body><p>warm up the extractor's imports</p></body></html>", "text/html")
    except Exception:  # noqa: BLE001 - a missing extractor is reported with the first real page
        pass
    measured = _address_space()
    baseline = None if measured is None else measured[0]
    while True:
        try:
            url, body, content_type, memory = _receive(requests)
        except EOFError:
            return
        limited = resource is not None and baseline is not None
        if limited:
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            cap = baseline + memory if hard == resource.RLIM_INFINITY else min(baseline + memory, hard)
            resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
        try:
            reply: dict[str, Any] = extract_main_text(url, body, content_type)
        except ExtractionFailed as failed:
            reply = {"error": failed.kind, "detail": failed.detail}
        except MemoryError:
            reply = {"error": "too_large", "detail": ""}
        except Exception as exc:  # noqa: BLE001 - one page's failure is that page's answer
            reply = {"error": "failed", "detail": f"{url}: {type(exc).__name__}: {str(exc)[:300]}"}
        finally:
            if limited:
                resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        measured = _address_space()
        if baseline is not None and measured is not None:
            peak = measured[1] - baseline
            # the extractor may swallow a MemoryError and find no text: near the cap, that is the cap's doing
            if "error" in reply and peak >= memory * 0.9:
                reply = {"error": "too_large", "detail": ""}
            # a worker that grew keeps its peak: replaced, so the next page's peak is its own
            reply["retire"] = peak > RETIRE_GROWTH
        _send(replies, reply)


if __name__ == "__main__":
    _serve()
