"""The page reader: a result's URL in, its main text out, or a :class:`PageError` that says why not.

A model that may open any URL it was shown (or writes) must not hang an episode, fill the memory, read a binary
file as text, hammer a site or reach into the machine's own network. So every page is fetched under limits:

* **time** — ``connect_timeout`` to connect, ``timeout`` for the whole page, main-text extraction included (a
  page that trickles forever is cut at the deadline, not at the first quiet gap; so is an extraction that runs
  past it, in its worker process: :mod:`.extraction`);
* **memory** — the extraction of one page may take at most ``max_memory`` bytes (512 MiB) → ``too_large``;
* **size** — at most ``max_bytes`` read (a larger ``Content-Length`` is refused before reading; a page without one
  is read up to the cap and then refused); the cap counts decoded bytes as they are produced, whatever the stack
  of content codings (:mod:`.decoding`: two gzip layers of a few hundred bytes never inflate past it);
* **type** — HTML, XHTML and plain text only; anything else (PDF, images, archives) is refused as ``binary``;
* **robots.txt** — honoured by default (RFC 9309: a missing file allows all, an unreachable one forbids all for
  now, redirects are followed up to five times, across hosts), fetched once per site and cached;
* **politeness** — request starts to one host spaced by ``host_interval`` seconds;
* **reach** — ``http``/``https`` only; hosts that resolve to private, loopback or link-local addresses are refused
  unless listed in ``allowed_hosts`` (a web retriever adds its own search host, so a stand-in's pages open), and
  the check is made again on the address each connection goes to (:mod:`.reach`: no DNS rebinding);
* **no scripts** — pages are parsed, never run: the main text is extracted by trafilatura from the HTML as served,
  in a worker process (:mod:`.extraction`).

Redirects are followed (at most 5) and each hop is checked again. The page is recorded (:mod:`.record`) under its
normalised URL; a refusal that the page itself decides (robots, type, size, a 4xx status, no text) is recorded as
such, so a replay fails the same pages the same way; a timeout or an unreachable host is never recorded.
"""

from __future__ import annotations

import threading
import time
import urllib.robotparser
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from searchenv.answer_store import AnswerStore, NotRecorded
from searchenv.http.clients import http_client
from searchenv.http.pacing import RequestPacer
from searchenv.retrievers.web.decoding import ACCEPT_ENCODING, BoundedDecoder, CorruptCoding, UnknownCoding
from searchenv.retrievers.web.extraction import DEFAULT_MEMORY, MIN_MEMORY, ExtractionFailed, extract_within
from searchenv.retrievers.web.reach import Reach, ReachRefused, checked_transport
from searchenv.retrievers.web.record import normal_url
from searchenv.types import Document

if TYPE_CHECKING:
    import httpx

__all__ = ["PAGE_ERROR_KINDS", "PageError", "PageReader"]

#: Why a page could not be read, in one word a program can branch on; the recorded kinds are the page's own.
PAGE_ERROR_KINDS = {
    "bad_url": True,
    "blocked": True,
    "robots": True,
    "binary": True,
    "too_large": True,
    "http_status": True,
    "no_text": True,
    "too_many_redirects": True,
    "timeout": False,
    "unreachable": False,
    "overloaded": False,
    "not_recorded": False,
    "summary_failed": False,
    "failed": False,
}

#: Content types read as pages; everything else is ``binary``.
TEXT_TYPES = ("text/html", "application/xhtml+xml", "text/plain", "text/markdown")
MAX_REDIRECTS = 5
ROBOTS_MAX_BYTES = 512_000
#: The product token robots.txt rules are matched against, and the User-Agent sent.
ROBOTS_AGENT = "searchenv"
USER_AGENT = "searchenv-page-reader/0.2 (research agent; honours robots.txt)"


class PageError(Exception):
    """A page that could not be read. ``str()`` is short and safe to show a model (``"page too_large"``);
    ``kind`` is one of :data:`PAGE_ERROR_KINDS` and ``detail`` says what happened, for ``info`` and logs."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"page {kind}")
        self.kind = kind
        self.detail = detail

    @property
    def recorded(self) -> bool:
        """Whether the page itself decided this (then a record keeps it), rather than the network."""
        return PAGE_ERROR_KINDS.get(self.kind, False)


class PageReader:
    """Fetches pages under the limits above and extracts their main text.

    Args:
        record: where pages are recorded and replayed from (:class:`~searchenv.answer_store.AnswerStore`).
        timeout: seconds for one page, all of it (redirects and robots.txt included).
        connect_timeout: seconds to connect.
        max_bytes: most bytes read of one page.
        respect_robots: honour robots.txt (default ``True``).
        host_interval: least seconds between two request starts to one host.
        concurrency: pages of one call fetched at once.
        allowed_hosts: ``host:port`` (or ``host``: ports 80 and 443) values that may resolve to private or loopback
            addresses.
        allow_private: allow every private, loopback or link-local address (a crawler inside a lab network).
        max_memory: most bytes of memory the extraction of one page may take (:mod:`.extraction`; 512 MiB).
    """

    def __init__(
        self,
        record: AnswerStore | None = None,
        *,
        timeout: float = 15.0,
        connect_timeout: float = 5.0,
        max_bytes: int = 5_000_000,
        respect_robots: bool = True,
        host_interval: float = 1.0,
        concurrency: int = 4,
        allowed_hosts: Sequence[str] = (),
        allow_private: bool = False,
        max_memory: int = DEFAULT_MEMORY,
    ):
        if (
            timeout <= 0
            or connect_timeout <= 0
            or max_bytes < 1
            or host_interval < 0
            or concurrency < 1
            or max_memory < MIN_MEMORY
        ):
            raise ValueError(
                "page reader: need timeout > 0, connect_timeout > 0, max_bytes >= 1, host_interval >= 0, "
                f"concurrency >= 1, max_memory >= 128 MiB; got timeout={timeout}, connect_timeout={connect_timeout}, "
                f"max_bytes={max_bytes}, host_interval={host_interval}, concurrency={concurrency}, "
                f"max_memory={max_memory}"
            )
        self.record = record if record is not None else AnswerStore(None)
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)
        self.max_bytes = int(max_bytes)
        self.respect_robots = bool(respect_robots)
        self.host_interval = float(host_interval)
        self.concurrency = int(concurrency)
        self.reach = Reach(allowed_hosts, allow_private)
        self.allowed_hosts = self.reach.allowed_hosts
        self.allow_private = self.reach.allow_private
        self.max_memory = int(max_memory)
        self.requests = 0
        self._lock = threading.Lock()
        self._pacer = RequestPacer(self.host_interval)  # request starts to one host spaced by host_interval
        self._robots: dict[str, urllib.robotparser.RobotFileParser] = {}
        self._site_locks: dict[str, threading.Lock] = {}
        self._client: httpx.Client | None = None

    def open_documents(self, refs: Sequence[str]) -> list[Document | BaseException]:
        """One entry per URL: its :class:`~searchenv.types.Document`, or the :class:`PageError` saying why not."""
        if isinstance(refs, str):
            raise TypeError("open_documents() takes a sequence of URLs; wrap a single URL in a list")
        refs = [str(r) for r in refs]
        if not refs:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(refs))) as pool:
            return list(pool.map(self._open_one, refs))

    @property
    def reach_settings(self) -> dict[str, object]:
        """The reach settings every fetch of this reader runs under (``allow_private``, ``allowed_hosts``), as
        plain data: what a stored page's answer depends on besides its URL and the size and robots settings."""
        return self.reach.settings()

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # -- one page -----------------------------------------------------------------------------------------------
    def _open_one(self, url: str) -> Document | PageError:
        try:
            url = url.strip()
            self._check_scheme(url)
            answer = self.record.through("page", self._record_key(url), lambda: self._fetch_recordable(url))
        except PageError as error:
            return error
        except NotRecorded as miss:
            return PageError("not_recorded", miss.detail)
        except Exception as exc:  # noqa: BLE001 - one broken page stays that page's failure
            return PageError("failed", f"{url}: {type(exc).__name__}: {str(exc)[:300]}")
        if "error" in answer:
            return PageError(answer["error"], answer["detail"])
        return Document(url, answer["title"], answer["text"])

    def _record_key(self, url: str) -> dict[str, object]:
        """What a page's stored answer depends on: its normalised URL, the size cap, robots, and the reach
        settings that decide whether its host may be opened — a page stored where private hosts were allowed is
        not served to a run that forbids them, and a ``blocked`` stored where they were forbidden is not served
        to a run that allows them. (A public host under default settings keeps the key it always had.)

        The two ways a host is opened are two keys: ``allow_private`` (every private host) and an allowed host
        (the search service's own, or the user's). The key's URL drops a loopback port (a record replays against
        a stand-in on another random port), so a host allowed on ``127.0.0.1:Q`` names every loopback port; had
        both ways shared one key, a page stored under ``allow_private`` from ``127.0.0.1:P`` would be served to a
        run that allows only the search host ``127.0.0.1:Q``, and a ``blocked`` stored there to ``allow_private``."""
        normal = normal_url(url)
        key: dict[str, object] = {"url": normal, "max_bytes": self.max_bytes, "robots": self.respect_robots}
        allowed = {urlsplit(normal_url(f"http://{host}")).netloc for host in self.allowed_hosts}
        if self.allow_private:
            key["reach"] = "private allowed"
        elif urlsplit(normal).netloc in allowed:
            key["reach"] = "host allowed"
        return key

    def _fetch_recordable(self, url: str) -> dict[str, str]:
        """The page as the record stores it: its title and text, or a refusal the page itself decided."""
        try:
            return self._fetch(url)
        except PageError as error:
            if error.recorded:
                return {"error": error.kind, "detail": error.detail}
            raise

    def _fetch(self, url: str) -> dict[str, str]:
        import httpx

        deadline = time.monotonic() + self.timeout
        for _ in range(MAX_REDIRECTS + 1):
            self._check_reach(url)
            if self.respect_robots and not self._robots_allow(url, deadline):
                raise PageError("robots", f"{url}: robots.txt of {urlsplit(url).netloc} disallows it")
            self._wait_host(urlsplit(url).netloc)
            try:
                with self._http().stream("GET", url, timeout=self._timeouts(deadline)) as response:
                    if response.is_redirect and "location" in response.headers:
                        url = urljoin(url, response.headers["location"])
                        continue
                    self._check_response(url, response)
                    body = self._read(url, response, deadline, self.max_bytes)
                    content_type = response.headers.get("content-type", "")
            except ReachRefused as refused:  # the connection's own check (the name resolved differently)
                raise PageError(refused.kind, f"{url}: {refused.detail}") from None
            except httpx.TimeoutException:
                raise PageError("timeout", f"{url}: no answer within {self.timeout:g} s") from None
            except httpx.HTTPError as exc:
                raise PageError("unreachable", f"{url}: {type(exc).__name__}: {exc}") from None
            try:
                return extract_within(url, body, content_type, deadline, self.max_memory)
            except ExtractionFailed as failed:
                raise PageError(failed.kind, failed.detail) from None
        raise PageError("too_many_redirects", f"{url}: more than {MAX_REDIRECTS} redirects")

    # -- the limits ---------------------------------------------------------------------------------------------
    @staticmethod
    def _check_scheme(url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise PageError("bad_url", f"{url[:200]!r} is not an http(s) URL")

    def _check_reach(self, url: str) -> None:
        """Refuse a host on this machine's own networks (cloud metadata, internal services) unless allowed, before
        any request; the connection itself checks again, on the address it connects to (:mod:`.reach`)."""
        self._check_scheme(url)
        parts = urlsplit(url)
        try:
            self.reach.addresses(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
        except ReachRefused as refused:
            raise PageError(refused.kind, f"{url}: {refused.detail}") from None

    def _check_response(self, url: str, response: httpx.Response) -> None:
        status = response.status_code
        if status == 429 or status >= 500:
            raise PageError("overloaded" if status in (429, 503) else "unreachable", f"{url}: HTTP {status}")
        if status != 200:
            raise PageError("http_status", f"{url}: HTTP {status}")
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type and content_type not in TEXT_TYPES:
            raise PageError("binary", f"{url}: content type {content_type!r} is not a page (HTML or text)")
        length = response.headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            raise PageError("too_large", f"{url}: {int(length):,} bytes announced, the limit is {self.max_bytes:,}")

    @staticmethod
    def _read(url: str, response: httpx.Response, deadline: float, limit: int) -> bytes:
        """The decoded body, at most ``limit`` bytes: the raw bytes are decoded piece by piece
        (:mod:`.decoding`) and counted as they are produced, so no stack of codings inflates past the cap."""
        try:
            decoder = BoundedDecoder(response.headers.get("content-encoding", ""))
        except UnknownCoding as exc:
            raise PageError("binary", f"{url}: {exc}") from None
        chunks, size = [], 0
        try:
            for raw in response.iter_raw():
                for piece in decoder.feed(raw):
                    size += len(piece)
                    if size > limit:
                        raise PageError("too_large", f"{url}: more than {limit:,} bytes (decoded)")
                    _check_deadline(url, deadline, size)
                    chunks.append(piece)
                _check_deadline(url, deadline, size)  # a chunk that decodes to nothing still spends the time
        except CorruptCoding as exc:
            raise PageError("binary", f"{url}: {exc}") from None
        return b"".join(chunks)

    def _timeouts(self, deadline: float) -> httpx.Timeout:
        import httpx

        left = max(0.01, deadline - time.monotonic())
        return httpx.Timeout(left, connect=min(self.connect_timeout, left))

    def _wait_host(self, host: str) -> None:
        with self._lock:
            self.requests += 1
        self._pacer.wait(host)

    def _robots_allow(self, url: str, deadline: float) -> bool:
        parts = urlsplit(url)
        site = f"{parts.scheme}://{parts.netloc}"
        with self._lock:
            site_lock = self._site_locks.setdefault(site, threading.Lock())
        with site_lock:  # one fetch of a site's robots.txt, however many pages of it open at once
            return self._robots_rules(site, url, deadline).can_fetch(ROBOTS_AGENT, url)

    def _robots_rules(self, site: str, url: str, deadline: float) -> urllib.robotparser.RobotFileParser:
        """The site's rules, fetched once. An unreachable robots.txt (5xx, no answer) forbids the page for now:
        a transient ``unreachable`` error, not recorded and not cached, so the site is asked again next time."""
        rules = self._robots.get(site)
        if rules is None:
            rules = urllib.robotparser.RobotFileParser()
            rules.parse(self._robots_lines(site, url, deadline))
            self._robots[site] = rules
        return rules

    def _robots_lines(self, site: str, url: str, deadline: float) -> list[str]:
        """The lines of the site's robots.txt, as RFC 9309 (2.3.1) reads it: redirects are followed, up to five
        and across hosts (each hop checked for reach like a page); a 4xx answer, or more than five redirects,
        means no rules; a 5xx answer or no answer means "unreachable" (forbidden for now)."""
        import httpx

        location = f"{site}/robots.txt"
        for _ in range(MAX_REDIRECTS + 1):
            try:
                self._check_reach(location)
            except PageError as refused:
                kind = "blocked" if refused.kind == "blocked" else "unreachable"
                raise PageError(kind, f"{url}: robots.txt of {site} leads to {refused.detail}") from None
            self._wait_host(urlsplit(location).netloc)
            try:
                with self._http().stream("GET", location, timeout=self._timeouts(deadline)) as response:
                    status = response.status_code
                    if response.is_redirect and "location" in response.headers:
                        location = urljoin(location, response.headers["location"])
                        continue
                    body = self._read(url, response, deadline, ROBOTS_MAX_BYTES) if status == 200 else b""
            except (httpx.HTTPError, PageError, ReachRefused) as exc:
                raise PageError(
                    "unreachable", f"{url}: robots.txt of {site} unreachable ({type(exc).__name__})"
                ) from None
            if status >= 500:
                raise PageError("unreachable", f"{url}: robots.txt of {site} answered HTTP {status}")
            return body.decode("utf-8", errors="replace").splitlines() if status == 200 else []
        return []  # more than five redirects: RFC 9309 lets a crawler take the file as unavailable

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:  # each request sets its own timeout, from the page's deadline
                headers = {"User-Agent": USER_AGENT, "Accept-Encoding": ACCEPT_ENCODING}
                transport = checked_transport(self.reach)  # connects only to the addresses it checked
                self._client = http_client(timeout=self.timeout, headers=headers, transport=transport)
            return self._client


def _check_deadline(url: str, deadline: float, size: int) -> None:
    if time.monotonic() > deadline:
        raise PageError("timeout", f"{url}: still sending after the page deadline ({size:,} bytes read)")
