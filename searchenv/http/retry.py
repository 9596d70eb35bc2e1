"""Retrying HTTP calls to a service that restarts, throttles or stalls: searchenv's one retry policy.

Every HTTP client of searchenv talks to something that can be briefly away: a retrieval server being restarted
(Search-R1's takes 10–15 s to come back), a web API answering 429 with ``Retry-After``, an LLM endpoint (the
judge, the simulated engine, ``searchenv eval``'s endpoint policy) behind a proxy that answers 502 while the
model server restarts. The client of a ``/retrieve`` service (:mod:`searchenv.retrievers.remote.retriever`), the web
search backends (:mod:`searchenv.retrievers.web`) and the LLM client (:mod:`searchenv.llm.client`) all retry
here, by these rules, and this is the only module that reads ``Retry-After``:

* retry only what can succeed later — connection errors, timeouts, HTTP 408/425/429/502/503/504; never a request
  the backend refused (400/401/403/404/413/422), a 500 (the backend failed on *this* request), or a malformed answer;
* a 502 (what a proxy in front of a dead server returns) and a 504 count as the service being away, like a
  refused connection (``unreachable`` and ``timeout``), so callers do not search a batch again query by query;
* wait at least what ``Retry-After`` asks (seconds or an HTTP date), otherwise exponential backoff with jitter so
  many clients do not reconnect in lockstep;
* keep trying for a total window (60 s by default) that outlasts a server restart — a ``Retry-After`` that would
  end past the window gives up at once — then give up with a :class:`ServiceUnavailable` (for retrievers its
  subclass :class:`RetrievalUnavailable`) whose ``kind`` is machine-readable and whose message holds no URL, key
  or hint: what the model sees is the environment's decision, the operator's details are in ``detail``.

:meth:`Retrier.run` serves threads (``time.sleep`` between attempts), :meth:`Retrier.arun` event loops
(``asyncio.sleep``: the loop keeps running while a request waits for its next attempt).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import random
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

__all__ = [
    "RETRYABLE_STATUSES",
    "AttemptFailed",
    "ErrorKind",
    "RetrievalUnavailable",
    "Retrier",
    "RetryPolicy",
    "ServiceUnavailable",
    "attempt_failed_from_exception",
    "attempt_failed_from_status",
    "parse_retry_after",
]

log = logging.getLogger("searchenv.http")

T = TypeVar("T")

#: Statuses worth retrying: overload, a gateway in front of a restarting backend, a request that timed out.
RETRYABLE_STATUSES = frozenset({408, 425, 429, 502, 503, 504})

#: Why a service could not answer, in one word a program can branch on.
ErrorKind = Literal[
    "unreachable", "timeout", "overloaded", "server_error", "refused", "unauthorized", "bad_response", "not_recorded"
]


class ServiceUnavailable(RuntimeError):
    """A service could not answer (after the retries its policy allows).

    ``str(error)`` is short and safe to show anywhere (``"retrieval unreachable after 7 attempts"``): no URL,
    no key, no shell hint. Operators read the attributes (the environment puts them into
    ``info["retrieval_error"]``, the judge reward into its fallback reason).

    Attributes:
        kind: :data:`ErrorKind` of the last failure.
        detail: the endpoint, the number of attempts and the last error in words (never a secret).
        endpoint: the URL without its query string.
        attempts: requests made.
        retryable: whether the last failure was transient (down, slow, overloaded) rather than a refusal.
    """

    #: The word the short message starts with: what kind of service it was.
    service = "service"

    def __init__(self, kind: ErrorKind, endpoint: str, attempts: int, reason: str, retryable: bool):
        super().__init__(f"{self.service} {kind} after {attempts} attempt{'s' if attempts != 1 else ''}")
        self.kind: ErrorKind = kind
        self.endpoint = endpoint
        self.attempts = attempts
        self.reason = reason
        self.retryable = retryable
        self.detail = f"{endpoint}: {kind} after {attempts} attempt(s); last error: {reason}"


class RetrievalUnavailable(ServiceUnavailable):
    """A search backend could not answer a batch: the :class:`ServiceUnavailable` of every retriever."""

    service = "retrieval"


class AttemptFailed(Exception):
    """One attempt failed; ``retry_after`` is the wait the backend asked for (seconds), if it asked."""

    def __init__(self, kind: ErrorKind, reason: str, retryable: bool, retry_after: float | None = None):
        super().__init__(reason)
        self.kind: ErrorKind = kind
        self.reason = reason
        self.retryable = retryable
        self.retry_after = retry_after


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` in seconds from now: delta-seconds (``"2"``, ``"1.5"``) or an HTTP date; ``None`` if absent
    or unreadable. A date in the past means 0."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


def attempt_failed_from_status(status: int, headers: Mapping[str, str], body: str) -> AttemptFailed:
    """Classify a non-success HTTP answer (``body`` is quoted, shortened, in the reason)."""
    kind: ErrorKind
    if status in (401, 403):
        kind = "unauthorized"
    elif status in (429, 503):
        kind = "overloaded"
    elif status == 502:  # a proxy or gateway that cannot reach the server: the service is away, not this request
        kind = "unreachable"
    elif status >= 500 or status == 408:
        kind = "timeout" if status in (408, 504) else "server_error"
    else:
        kind = "refused"
    retry_after = parse_retry_after(headers.get("retry-after")) if status in (429, 503) else None
    snippet = " ".join(body[:300].split())
    return AttemptFailed(kind, f"HTTP {status}: {snippet}", status in RETRYABLE_STATUSES, retry_after)


def attempt_failed_from_exception(exc: BaseException, timeout: float) -> AttemptFailed:
    """Classify an ``httpx`` transport exception: timeouts and connection trouble are transient."""
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return AttemptFailed("timeout", f"timed out after {timeout:g}s ({type(exc).__name__})", True)
    if isinstance(exc, httpx.LocalProtocolError):  # the request cannot be sent (an illegal header): no retry cures it
        return AttemptFailed("refused", f"the request could not be sent: {type(exc).__name__}: {exc}", False)
    if isinstance(exc, httpx.TransportError):  # refused, reset, closed mid-answer: a restart cures these
        return AttemptFailed("unreachable", f"{type(exc).__name__}: {exc}", True)
    return AttemptFailed("bad_response", f"{type(exc).__name__}: {exc}", False)


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often to retry.

    Attributes:
        window: seconds from the first attempt after which no new attempt starts (60 s outlasts a Search-R1
            server restart, measured at 10–15 s). A ``Retry-After`` that would end past it gives up at once.
        max_attempts: hard cap on attempts (``None``: only the window limits them).
        backoff: first wait in seconds; doubles per attempt up to ``max_backoff``, times a random factor in
            [0.5, 1]. A ``Retry-After`` wait is used instead when longer, times a factor in [1, 1.1].
    """

    window: float = 60.0
    max_attempts: int | None = None
    backoff: float = 0.25
    max_backoff: float = 8.0

    def __post_init__(self) -> None:
        if self.window < 0 or self.backoff < 0 or self.max_backoff < 0:
            raise ValueError(
                f"retry window, backoff and max_backoff must be >= 0; got window={self.window}, "
                f"backoff={self.backoff}, max_backoff={self.max_backoff}"
            )
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1 or None, got {self.max_attempts}")

    @classmethod
    def of(cls, retry_window: float, retries: int | None, backoff: float, max_backoff: float) -> RetryPolicy:
        """The policy from a client's options: ``retry_window`` seconds, at most ``retries`` retries (``None``:
        the window alone limits them), the first wait ``backoff`` doubling up to ``max_backoff``."""
        return cls(
            window=float(retry_window),
            max_attempts=None if retries is None else int(retries) + 1,
            backoff=float(backoff),
            max_backoff=float(max_backoff),
        )

    def wait(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        backoff = min(self.max_backoff, self.backoff * 2 ** (attempt - 1)) * rng.uniform(0.5, 1.0)
        if retry_after is None:
            return backoff
        return max(backoff, retry_after * rng.uniform(1.0, 1.1))


class Retrier:
    """Runs one attempt function under a :class:`RetryPolicy`, keeping counters a dashboard can read.

    Thread-safe: many threads may call :meth:`run` at once (the jitter generator and counters are locked), and
    many coroutines :meth:`arun`. ``unavailable`` is the error raised on giving up (retrievers pass
    :class:`RetrievalUnavailable`).
    """

    def __init__(
        self,
        policy: RetryPolicy,
        seed: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
        unavailable: type[ServiceUnavailable] = ServiceUnavailable,
    ):
        self.policy = policy
        self.unavailable = unavailable
        self._rng = random.Random(seed)
        self._sleep = sleep
        self._lock = threading.Lock()
        self.attempts = 0
        self.retried = 0
        self.failures = 0
        self.last_errors: list[str] = []

    def run(self, attempt: Callable[[], T], endpoint: str) -> T:
        """``attempt()`` until it returns, fails for good, or the policy's window or attempt cap is reached."""
        tries = _Tries(self, endpoint)
        while True:
            try:
                return attempt()
            except AttemptFailed as failure:
                wait = tries.wait_after(failure)
            self._sleep(wait)

    async def arun(self, attempt: Callable[[], Awaitable[T]], endpoint: str) -> T:
        """:meth:`run` for coroutines: the waits between attempts are ``asyncio.sleep``, so the loop runs on."""
        tries = _Tries(self, endpoint)
        while True:
            try:
                return await attempt()
            except AttemptFailed as failure:
                wait = tries.wait_after(failure)
            await asyncio.sleep(wait)

    def _record(self, line: str) -> None:
        with self._lock:
            self.last_errors.append(f"{time.strftime('%H:%M:%S')} {line}")
            del self.last_errors[:-32]


class _Tries:
    """The attempts of one :meth:`Retrier.run`: counted, and after each failure the wait before the next one, or
    the error that ends them (a refusal, the attempt cap, a wait that would end past the window)."""

    def __init__(self, retrier: Retrier, endpoint: str):
        self.retrier, self.endpoint = retrier, endpoint
        self.started = time.monotonic()
        self.n = 0
        self._next()

    def _next(self) -> None:
        self.n += 1
        with self.retrier._lock:
            self.retrier.attempts += 1

    def wait_after(self, failure: AttemptFailed) -> float:
        """Seconds to wait before the next attempt; raises the policy's ``unavailable`` error to give up."""
        retrier, policy = self.retrier, self.retrier.policy
        retrier._record(f"attempt {self.n}: {failure.kind}: {failure.reason}")
        wait: float | None = None
        if failure.retryable and (policy.max_attempts is None or self.n < policy.max_attempts):
            with retrier._lock:
                wait = policy.wait(self.n, failure.retry_after, retrier._rng)
            if time.monotonic() - self.started + wait > policy.window:
                wait = None
        if wait is None:
            with retrier._lock:
                retrier.failures += 1
            error = retrier.unavailable(failure.kind, self.endpoint, self.n, failure.reason, failure.retryable)
            log.warning("%s", error.detail)
            raise error from None
        with retrier._lock:
            retrier.retried += 1
        self._next()
        return wait
