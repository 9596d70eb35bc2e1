"""Moved to :mod:`searchenv.http.retry` (the one retry policy, below the retrievers and the LLM client); the
old names keep working here with a ``DeprecationWarning``."""

from searchenv.imports import moved

_NAMES = (
    "RETRYABLE_STATUSES",
    "AttemptFailed",
    "ErrorKind",
    "RetrievalUnavailable",
    "Retrier",
    "RetryPolicy",
    "attempt_failed_from_exception",
    "attempt_failed_from_status",
    "parse_retry_after",
)
__getattr__ = moved(__name__, {name: f"searchenv.http.retry:{name}" for name in _NAMES})
