"""A loopback web: pages made from a corpus's passages and the three search APIs over them, on 127.0.0.1.

The web agent's whole path — search, open a result, answer — then runs offline: in the tests, in CI, in the
demo, and for users without keys. One article per title (the passages sharing a title, in corpus order), each
at ``/wiki/<title>``, its text linking the other articles it names. The search APIs speak the real wire formats:

* SearXNG — ``GET /search?q=…&format=json`` (403 without ``format=json``, as an instance without JSON enabled);
* Serper — ``POST /serper/search`` with ``X-API-KEY`` and ``{"q", "num"}`` → ``organic[]`` (403 without a key);
* Brave — ``GET /brave/res/v1/web/search?q=…&count=…`` with ``X-Subscription-Token`` → ``web.results[]`` (401).

Its ranking is a plain count of query words in each article (title words count double) — a stand-in's order,
not an engine. Faults for tests: :meth:`LocalWeb.inject` makes the next search answers HTML instead of JSON,
429 with ``Retry-After``, 500, 503, 403, or a 401 whose body echoes the key; fixed pages misbehave on every request —
``/fault/huge`` (50 MB, announced), ``/fault/unannounced`` (50 MB, no length), ``/fault/endless`` (1 KB every
0.2 s, forever), ``/fault/binary`` (a PNG), ``/fault/gzip-bomb`` (a few hundred bytes that two gzip layers
inflate to 100 MB), ``/fault/tiny-paragraphs`` (4.9 MB of one-word paragraphs, slow to extract), ``/private/…``
(disallowed by ``/robots.txt``); ``/gzip2/<title>`` serves an article behind two gzip layers.
``counts`` counts requests per route, so a test can tell that a replay called nothing.

``python -m searchenv.retrievers.web.standin --port 8080`` serves the generated world until Ctrl-C.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import html
import json
import re
import threading
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from searchenv.types import Passage

__all__ = ["FAULTS", "LocalWeb", "main", "usage_lines"]

#: What :meth:`LocalWeb.inject` can make the next search answers be.
FAULTS = ("html", "rate_limit", "server_error", "overloaded", "forbidden", "echo_key")
HUGE_BYTES = 50 * 1024 * 1024
#: What ``/fault/gzip-bomb`` inflates to.
BOMB_BYTES = 100 * 1024 * 1024
_WORD = re.compile(r"\w+")


class LocalWeb:
    """The loopback web over ``passages`` (any iterable of :class:`~searchenv.types.Passage`, e.g. a Corpus).

    Args:
        passages: the articles' passages; ``None`` uses the generated world's corpus.
        host, port: where to listen (``port=0`` picks a free one).
        keys: per backend (``"serper"``, ``"brave"``), the one key accepted; a backend not listed accepts any
            non-empty key.
        robots_redirect: where ``/robots.txt`` redirects (301), e.g. another site's robots.txt; ``None``: served
            here (``Disallow: /private/``).

    Use as a context manager (``with LocalWeb() as web:``) or call :meth:`start` and :meth:`stop`.
    """

    def __init__(
        self,
        passages: Sequence[Passage] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        keys: dict[str, str] | None = None,
        robots_redirect: str | None = None,
    ):
        if passages is None:
            from searchenv.data.world.generator import default_world

            passages = default_world().corpus
        articles: dict[str, list[str]] = defaultdict(list)
        for passage in passages:
            articles[passage.title].append(passage.text)
        self.articles = {title: "\n\n".join(texts) for title, texts in articles.items()}
        self.keys = dict(keys or {})
        self.robots_redirect = robots_redirect
        self.counts: Counter[str] = Counter()
        self._faults: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._index = self._word_index()
        self._links: re.Pattern[str] | None = None
        self._server = _Server((host, port), self)
        self._thread: threading.Thread | None = None

    # -- running --------------------------------------------------------------------------------------------
    def start(self) -> LocalWeb:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LocalWeb:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def searxng_url(self) -> str:
        """``url`` for ``retriever="searxng"`` (an instance's base URL)."""
        return self.base_url

    @property
    def serper_url(self) -> str:
        """``url`` for ``retriever="serper"``."""
        return f"{self.base_url}/serper/search"

    @property
    def brave_url(self) -> str:
        """``url`` for ``retriever="brave"``."""
        return f"{self.base_url}/brave/res/v1/web/search"

    def page_url(self, title: str) -> str:
        return f"{self.base_url}/wiki/{quote(title)}"

    def inject(self, fault: str, times: int = 1, **options: Any) -> None:
        """Make the next ``times`` search answers (any backend) a fault of :data:`FAULTS`;
        ``retry_after=`` sets the wait a ``rate_limit`` asks for (default 1 s)."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose one of {', '.join(FAULTS)}")
        with self._lock:
            self._faults.extend([(fault, options)] * times)

    # -- content --------------------------------------------------------------------------------------------
    def search(self, query: str, count: int) -> list[tuple[str, str, str, float]]:
        """The best ``count`` articles for ``query``: (url, title, snippet, score)."""
        words = {w.casefold() for w in _WORD.findall(query)}
        scores: Counter[str] = Counter()
        for word in words:
            for title, weight in self._index.get(word, {}).items():
                scores[title] += weight
        ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:count]
        return [(self.page_url(t), t, " ".join(self.articles[t].split()[:40]), float(s)) for t, s in ranked]

    def page(self, title: str) -> str | None:
        """The article's HTML, other articles' titles linked; ``None`` for an unknown title."""
        text = self.articles.get(title)
        if text is None:
            return None
        if self._links is None:
            names = sorted(self.articles, key=len, reverse=True)
            self._links = re.compile("|".join(re.escape(html.escape(n)) for n in names))
        paragraphs = []
        for block in text.split("\n\n"):
            linked = self._links.sub(lambda m: self._anchor(m.group(0), title), html.escape(block))
            paragraphs.append(f"<p>{linked}</p>")
        body = "\n".join(paragraphs)
        return (
            f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<script>document.title = 'scripts never run';</script></head>\n"
            "<body><nav><a href='/'>Local web</a> | <a href='/search'>Search</a></nav>\n"
            f"<article><h1>{html.escape(title)}</h1>\n{body}\n</article>\n"
            "<footer>Generated from the corpus by searchenv's local web.</footer></body></html>\n"
        )

    def _anchor(self, escaped: str, own: str) -> str:
        name = html.unescape(escaped)
        return escaped if name == own else f"<a href='/wiki/{quote(name)}'>{escaped}</a>"

    def _word_index(self) -> dict[str, dict[str, int]]:
        index: dict[str, dict[str, int]] = defaultdict(dict)
        for title, text in self.articles.items():
            counts = Counter(w.casefold() for w in _WORD.findall(text))
            for w in _WORD.findall(title):
                counts[w.casefold()] += 2
            for word, n in counts.items():
                index[word][title] = n
        return index

    def _next_fault(self) -> tuple[str, dict[str, Any]] | None:
        with self._lock:
            return self._faults.pop(0) if self._faults else None


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], web: LocalWeb):
        super().__init__(address, _Handler)
        self.web = web


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        path = parts.path
        if path == "/search":
            self._search("searxng", query.get("q", ""), 20, json_ok=query.get("format") == "json")
        elif path == "/brave/res/v1/web/search":
            self._search(
                "brave", query.get("q", ""), int(query.get("count", 20)), key=self.headers.get("X-Subscription-Token")
            )
        elif path == "/robots.txt":
            self._count("robots")
            if self.server.web.robots_redirect is not None:
                return self._send(301, b"", "text/plain", {"Location": self.server.web.robots_redirect})
            self._send(200, b"User-agent: *\nDisallow: /private/\n", "text/plain")
        elif path.startswith("/wiki/"):
            self._count("page")
            page = self.server.web.page(unquote(path[len("/wiki/") :]))
            if page is None:
                return self._send(404, b"<html><body>no such article</body></html>", "text/html")
            self._send(200, page.encode(), "text/html; charset=utf-8")
        elif path.startswith("/gzip2/"):  # the article behind two gzip layers (Content-Encoding: gzip, gzip)
            self._count("page")
            page = self.server.web.page(unquote(path[len("/gzip2/") :]))
            if page is None:
                return self._send(404, b"<html><body>no such article</body></html>", "text/html")
            body = gzip.compress(gzip.compress(page.encode()))
            self._send(200, body, "text/html; charset=utf-8", {"Content-Encoding": "gzip, gzip"})
        elif path.startswith("/private/"):
            self._count("page")
            self._send(200, b"<html><body><p>robots.txt asks crawlers to stay out.</p></body></html>", "text/html")
        elif path.startswith("/fault/"):
            self._count("fault_page")
            self._fault_page(path[len("/fault/") :])
        else:
            self._send(404, b"<html><body>not found</body></html>", "text/html")

    def do_POST(self) -> None:
        if urlsplit(self.path).path != "/serper/search":
            return self._send(404, b'{"message": "Not found", "statusCode": 404}', "application/json")
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            return self._send(400, b'{"message": "Invalid JSON", "statusCode": 400}', "application/json")
        self._search("serper", str(body.get("q", "")), int(body.get("num", 10)), key=self.headers.get("X-API-KEY"))

    # -- search APIs ----------------------------------------------------------------------------------------
    def _search(self, backend: str, q: str, count: int, *, key: str | None = None, json_ok: bool = True) -> None:
        self._count(backend)
        web = self.server.web
        if backend == "searxng" and not json_ok:
            return self._send(403, b"<html><body>403 Forbidden</body></html>", "text/html")
        if backend != "searxng" and (not key or web.keys.get(backend, key) != key):
            status = 401 if backend == "brave" else 403
            return self._send(
                status, json.dumps({"message": "Unauthorized.", "statusCode": status}).encode(), "application/json"
            )
        fault = web._next_fault()
        if fault is not None:
            return self._send_fault(fault, key)
        hits = web.search(q, count)
        self._send(200, json.dumps(_answer(backend, q, count, hits)).encode(), "application/json")

    def _send_fault(self, fault: tuple[str, dict[str, Any]], key: str | None) -> None:
        name, options = fault
        if name == "html":
            self._send(200, b"<!DOCTYPE html><html><body><h1>Just a moment...</h1></body></html>", "text/html")
        elif name == "rate_limit":
            wait = str(options.get("retry_after", 1))
            self._send(429, b'{"message": "Too many requests"}', "application/json", {"Retry-After": wait})
        elif name == "server_error":
            self._send(500, b'{"message": "Internal error"}', "application/json")
        elif name == "overloaded":
            self._send(503, b'{"message": "Overloaded"}', "application/json")
        elif name == "forbidden":  # a SearXNG instance without the JSON format enabled
            self._send(403, b"<html><body>403 Forbidden</body></html>", "text/html")
        else:  # echo_key: an error body that quotes the request's key (JSON-escaped and URL-encoded), as some do
            echo = {"message": f"key {key} is not valid", "request": f"/search?key={quote(key or '', safe='')}"}
            self._send(401, json.dumps(echo).encode(), "application/json")

    # -- misbehaving pages ----------------------------------------------------------------------------------
    def _fault_page(self, name: str) -> None:
        if name == "binary":
            return self._send(200, b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 16, "image/png")
        if name == "tiny-paragraphs":
            return self._send(200, _tiny_paragraphs(), "text/html; charset=utf-8")
        if name == "gzip-bomb":
            headers = {"Content-Encoding": "gzip, gzip"}
            return self._send(200, _gzip_bomb(), "text/html", headers)
        if name not in ("huge", "unannounced", "endless"):
            return self._send(404, b"<html><body>no such fault</body></html>", "text/html")
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        if name == "huge":
            self.send_header("Content-Length", str(HUGE_BYTES))
        self.send_header("Connection", "close")
        self.end_headers()
        chunk = b"<p>" + b"filler " * 145 + b"</p>\n"  # about 1 KB
        sent = 0
        try:
            self.wfile.write(b"<html><body>")
            while name == "endless" or sent < HUGE_BYTES:
                self.wfile.write(chunk)
                sent += len(chunk)
                if name == "endless":
                    self.wfile.flush()
                    time.sleep(0.2)
        except (BrokenPipeError, ConnectionResetError):  # the reader gave up, as it should
            pass
        self.close_connection = True

    # -- plumbing -------------------------------------------------------------------------------------------
    def _count(self, route: str) -> None:
        with self.server.web._lock:
            self.server.web.counts[route] += 1

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass


@functools.cache
def _tiny_paragraphs() -> bytes:
    """About 4.9 MB of HTML in half a million one-word paragraphs: cheap to send, slow to extract."""
    words = ("alpha", "beta", "gamma", "delta")
    paragraphs = "".join(f"<p>{words[i % 4]}</p>" for i in range(415_000))
    return f"<html><head><title>Tiny</title></head><body>{paragraphs}</body></html>".encode()


@functools.cache
def _gzip_bomb() -> bytes:
    """A few hundred bytes that two gzip layers inflate to :data:`BOMB_BYTES` of HTML."""
    inner = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = b"<p>" + b" " * (1024 * 1024 - 7) + b"</p>\n"
    layer = b"".join([inner.compress(block) for _ in range(BOMB_BYTES // len(block))] + [inner.flush()])
    return gzip.compress(layer, 9)


def _answer(backend: str, q: str, count: int, hits: list[tuple[str, str, str, float]]) -> dict[str, Any]:
    """The search answer in ``backend``'s wire format."""
    if backend == "searxng":
        results = [
            {"url": u, "title": t, "content": s, "engine": "standin", "score": sc, "category": "general"}
            for u, t, s, sc in hits
        ]
        return {
            "query": q,
            "number_of_results": len(results),
            "results": results,
            "answers": [],
            "corrections": [],
            "infoboxes": [],
            "suggestions": [],
            "unresponsive_engines": [],
        }
    if backend == "serper":
        organic = [{"title": t, "link": u, "snippet": s, "position": i + 1} for i, (u, t, s, _) in enumerate(hits)]
        return {
            "searchParameters": {"q": q, "num": count, "type": "search", "engine": "google"},
            "organic": organic,
            "credits": 1,
        }
    results = [{"type": "search_result", "title": t, "url": u, "description": s} for u, t, s, _ in hits]
    return {"type": "search", "query": {"original": q}, "web": {"type": "search", "results": results}}


def usage_lines(web: LocalWeb) -> list[str]:
    """What to point a command at this web with: the flags of every ``searchenv`` command that builds an
    environment, per backend, and one command to try (an agent that searches and opens pages)."""
    flags = {
        "searxng": f"--retriever searxng --retriever-option url={web.searxng_url}",
        "serper": f"--retriever serper --retriever-option url={web.serper_url} --retriever-option api_key=any",
        "brave": f"--retriever brave --retriever-option url={web.brave_url} --retriever-option api_key=any",
    }
    return [
        f"local web at {web.base_url} ({len(web.articles)} articles); add these flags to searchenv play, demo, serve "
        "or mcp (eval: --retrievers):",
        *(f"  {backend + ':':<9}{line}" for backend, line in flags.items()),
        f"try:      searchenv play --protocol asearcher {flags['searxng']}",
        "          (search with <search> ... </search>, open result N with <access> N </access>; in Python: "
        f"retriever='searxng', retriever_options={{'url': '{web.searxng_url}'}})",
    ]


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the generated world's local web until Ctrl-C and print the command-line flags that point at it."""
    parser = argparse.ArgumentParser(
        prog="python -m searchenv.retrievers.web.standin", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (keep the loopback default)")
    args = parser.parse_args(argv)
    with LocalWeb(host=args.host, port=args.port) as web:
        for line in usage_lines(web):
            print(line, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
