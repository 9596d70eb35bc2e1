"""Search-R1's ``POST /retrieve`` wire format, written once for the client and the server.

A request is ``{"queries": [...], "topk": k, "return_scores": true}`` (``"query"`` for one query; ``top_k`` and
``k`` are accepted as spellings of ``topk``). The answer is ``{"result": [[hit, ...], ...]}``, one list per query,
where a hit is ``{"document": {"id", "contents"}, "score": s}`` or, without scores, the bare document.
``contents`` is the corpus row's field as stored (``"\\"Title\\"\\ntext"`` in wiki-18), so the information block a
client shows is byte-identical to the one Search-R1's own client shows.

:func:`parse_request` (server side) and :func:`parse_hits` (client side) validate everything they read and raise
:class:`WireError` naming the field and the fix: a malformed request is refused with a 4xx, and a malformed
answer is a failed search, never a passage titled ``None``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from searchenv.checks import is_int, is_number
from searchenv.types import Passage, split_contents

__all__ = [
    "EXAMPLE_REQUEST",
    "Limits",
    "WireError",
    "content_id",
    "encode_response",
    "parse_hits",
    "parse_request",
    "request_payload",
]

EXAMPLE_REQUEST = '{"queries": ["who wrote hamlet"], "topk": 3, "return_scores": true}'
_TOPK_KEYS = ("topk", "top_k", "k")


class WireError(ValueError):
    """A body that does not follow the format: ``status`` (for a server's answer), a short ``code``, the detail."""

    def __init__(self, status: int, code: str, detail: str):
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class Limits:
    """What a server accepts in one request, and the ``k`` it uses when the request names none."""

    default_topk: int = 3
    max_topk: int = 100
    max_queries: int = 1024
    max_query_chars: int = 2_000


# -- the client's side ----------------------------------------------------------------------------------------
def request_payload(queries: Sequence[str], k: int, topk_field: str = "topk") -> dict[str, Any]:
    """The request body for ``queries`` (scores always asked for: they cost nothing and some engines rank by them)."""
    return {"queries": list(queries), topk_field: k, "return_scores": True}


def content_id(contents: str) -> str:
    """A stable id for a passage that came without one: ``sha1:`` and the first 16 hex digits of its contents."""
    return "sha1:" + hashlib.sha1(contents.encode("utf-8")).hexdigest()[:16]


def _hit(item: Any) -> tuple[Passage, bool]:
    """One result item → ``(passage, id_was_derived)``."""
    if not isinstance(item, dict):
        raise WireError(502, "bad_hit", f"a result item must be an object, got {type(item).__name__}")
    document, score = (item["document"], item.get("score", 0.0)) if "document" in item else (item, 0.0)
    if not isinstance(document, dict):
        raise WireError(502, "bad_document", f"a document must be an object, got {type(document).__name__}")
    stored: str | None = None  # the server's contents string as sent: the information block shows it verbatim
    if "contents" in document:
        contents = document["contents"]
        if not isinstance(contents, str):
            raise WireError(502, "bad_contents", f"a document's 'contents' must be a string, got {contents!r:.60}")
        stored = contents
        title, text = split_contents(contents)
    elif isinstance(document.get("text"), str):
        title, text = document.get("title") or "", document["text"]
        if not isinstance(title, str):
            raise WireError(502, "bad_title", f"a document's 'title' must be a string, got {title!r:.60}")
        contents = f"{title}\n{text}"
    else:
        raise WireError(502, "bad_document", "a document needs 'contents' (or 'title' and 'text') as strings")
    if score is not None and not is_number(score):
        raise WireError(502, "bad_score", f"a hit's 'score' must be a number, got {score!r:.60}")
    passage_id = document.get("id")
    derived = passage_id is None or passage_id == ""
    if derived:
        passage_id = content_id(contents)
    return Passage(str(passage_id), title, text, float(score or 0.0), stored), derived


def parse_hits(payload: Any, n_queries: int, k: int) -> tuple[list[list[Passage]], bool]:
    """The ``result`` lists of an answer as passages (at most ``k`` each), and whether any id had to be derived."""
    result = payload.get("result") if isinstance(payload, dict) else None
    if not isinstance(result, list) or len(result) != n_queries:
        got = len(result) if isinstance(result, list) else type(result).__name__
        raise WireError(502, "bad_result", f"'result' must hold one list per query: {got} for {n_queries} queries")
    derived = False
    lists = []
    for hits in result:
        if not isinstance(hits, list):
            raise WireError(502, "bad_result", f"each entry of 'result' must be a list, got {type(hits).__name__}")
        passages = []
        for item in hits[:k]:
            passage, was_derived = _hit(item)
            passages.append(passage)
            derived |= was_derived
        lists.append(passages)
    return lists, derived


# -- the server's side ----------------------------------------------------------------------------------------
def parse_request(body: bytes, limits: Limits) -> tuple[list[str], int, bool]:
    """Validate a ``/retrieve`` body; returns ``(queries, k, return_scores)`` (a single ``query`` becomes one)."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(400, "invalid_json", f"the body is not JSON ({exc}); send e.g. {EXAMPLE_REQUEST}") from None
    if not isinstance(payload, dict):
        raise WireError(400, "invalid_body", f"the body must be a JSON object such as {EXAMPLE_REQUEST}")
    if ("queries" in payload) == ("query" in payload):
        raise WireError(
            422, "missing_queries", f"give exactly one of 'queries' (a list) or 'query'; e.g. {EXAMPLE_REQUEST}"
        )
    single = "query" in payload
    queries = [payload["query"]] if single else payload["queries"]
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        key = "query" if single else "queries"
        expected = "a string" if single else "a list of strings"
        raise WireError(422, "invalid_queries", f"'{key}' must be {expected}")
    if len(queries) > limits.max_queries:
        raise WireError(
            413,
            "too_many_queries",
            f"{len(queries)} queries in one request; this server accepts at most "
            f"{limits.max_queries} (split the batch or start the server with a larger --max-queries)",
        )
    longest = max((len(q) for q in queries), default=0)
    if longest > limits.max_query_chars:
        raise WireError(
            413,
            "query_too_long",
            f"a query has {longest} characters; the limit is {limits.max_query_chars} (--max-query-chars)",
        )
    given = [key for key in _TOPK_KEYS if payload.get(key) is not None]
    if len(given) > 1 and len({json.dumps(payload[key]) for key in given}) > 1:
        raise WireError(422, "conflicting_topk", f"{' and '.join(given)} disagree; send one of them")
    k = payload[given[0]] if given else limits.default_topk
    if not is_int(k) or not 1 <= k <= limits.max_topk:
        raise WireError(422, "invalid_topk", f"topk must be an integer in [1, {limits.max_topk}], got {k!r}")
    scores = payload.get("return_scores", False)
    if not isinstance(scores, bool):
        raise WireError(422, "invalid_return_scores", f"return_scores must be true or false, got {scores!r}")
    return queries, k, scores


@functools.lru_cache(maxsize=1 << 18)
def _document_json(passage_id: str, contents: str) -> str:
    """A passage's ``{"id", "contents"}`` JSON, memoised: popular passages are encoded once, not per answer."""
    return json.dumps({"id": passage_id, "contents": contents}, ensure_ascii=False)


def _score_json(score: float) -> str:
    score = float(score)
    return repr(score) if math.isfinite(score) else json.dumps(score)  # repr is JSON for finite floats, and fast


def encode_response(results: list[list[Passage]], with_scores: bool) -> bytes:
    """The answer body, assembled from memoised document fragments (JSON-encoding dominated the server's CPU)."""
    lists = []
    for hits in results:
        documents = [_document_json(p.id, p.contents) for p in hits]
        if with_scores:
            documents = [
                f'{{"document": {doc}, "score": {_score_json(p.score)}}}'
                for doc, p in zip(documents, hits, strict=True)
            ]
        lists.append("[" + ", ".join(documents) + "]")
    return ('{"result": [' + ", ".join(lists) + "]}").encode()
