"""The page reader against the loopback web: a page's main text, and each limit as a clear ``PageError``.

A 50 MB page (announced or not), a page that never ends, binary content, a robots.txt disallow, a URL that is not
http(s) and a host on the machine's own network each give their own ``kind`` and a ``detail`` naming the URL, in
that page's entry only — the other pages of the call open as usual.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from searchenv.data.world.generator import generate_world
from searchenv.retrievers.web.pages import PageError, PageReader
from searchenv.retrievers.web.standin import LocalWeb
from searchenv.types import Document, DocumentOpener


@pytest.fixture(scope="module")
def world() -> Any:
    return generate_world(300, seed=4)


@pytest.fixture(scope="module")
def web(world: Any) -> Iterator[LocalWeb]:
    with LocalWeb(world.corpus) as served:
        yield served


def reader(web: LocalWeb, **options: Any) -> PageReader:
    return PageReader(allowed_hosts=[web.base_url.split("//")[1]], host_interval=0.0, **options)


def test_a_page_opens_as_its_main_text(web: LocalWeb, world: Any) -> None:
    passage = world.corpus[11]
    (document,) = reader(web).open_documents([web.page_url(passage.title)])
    assert isinstance(document, Document)
    assert document.ref == web.page_url(passage.title) and document.title == passage.title
    assert passage.text[:80] in document.text
    assert "scripts never run" not in document.text and "Local web" not in document.text  # no script, no menu


@pytest.mark.parametrize(
    ("path", "kind", "words"),
    [
        ("/fault/huge", "too_large", "52,428,800 bytes announced"),
        ("/fault/unannounced", "too_large", "more than 1,000,000 bytes"),
        ("/fault/binary", "binary", "'image/png' is not a page"),
        ("/private/secret.html", "robots", "robots.txt"),
        ("/wiki/No%20Such%20Article", "http_status", "HTTP 404"),
    ],
)
def test_each_limit_is_a_clear_error(web: LocalWeb, path: str, kind: str, words: str) -> None:
    started = time.monotonic()
    good = web.page_url(next(iter(web.articles)))
    error, document = reader(web, max_bytes=1_000_000).open_documents([web.base_url + path, good])
    assert isinstance(error, PageError) and error.kind == kind, error
    assert words in error.detail and path in error.detail and str(error) == f"page {kind}"
    assert isinstance(document, Document)  # the other page of the call is unaffected
    assert time.monotonic() - started < 30


def test_a_page_that_never_ends_is_cut_at_the_deadline(web: LocalWeb) -> None:
    started = time.monotonic()
    (error,) = reader(web, timeout=1.5).open_documents([f"{web.base_url}/fault/endless"])
    assert isinstance(error, PageError) and error.kind == "timeout" and "deadline" in error.detail
    assert time.monotonic() - started < 10


def test_urls_outside_the_web_are_refused_before_any_request(web: LocalWeb) -> None:
    before = sum(web.counts.values())
    results = PageReader().open_documents(["file:///etc/passwd", "javascript:alert(1)", web.page_url("x")])
    assert [e.kind for e in results] == ["bad_url", "bad_url", "blocked"]  # type: ignore[union-attr]
    assert "allowed_hosts" in results[2].detail  # type: ignore[union-attr]
    assert sum(web.counts.values()) == before


def test_robots_txt_is_fetched_once_per_site_and_can_be_ignored(web: LocalWeb) -> None:
    pages = reader(web)
    before = web.counts["robots"]
    pages.open_documents([web.page_url(t) for t in list(web.articles)[:6]])
    assert web.counts["robots"] == before + 1
    (document,) = reader(web, respect_robots=False).open_documents([f"{web.base_url}/private/secret.html"])
    assert isinstance(document, Document)


def test_requests_to_one_host_are_spaced(web: LocalWeb) -> None:
    pages = PageReader(allowed_hosts=[web.base_url.split("//")[1]], host_interval=0.3, respect_robots=False)
    started = time.monotonic()
    pages.open_documents([web.page_url(t) for t in list(web.articles)[:4]])
    assert time.monotonic() - started >= 0.9  # 4 starts, 0.3 s apart


def test_web_retrievers_are_document_openers(web: LocalWeb, world: Any) -> None:
    from searchenv.retrievers import make_retriever

    engine = make_retriever("searxng", None, url=web.searxng_url, pages={"host_interval": 0})
    assert isinstance(engine, DocumentOpener)
    hits = engine.search([world.corpus[3].title], 2)[0]
    documents = engine.open_documents([h.id for h in hits])
    assert [d.ref for d in documents] == [h.id for h in hits]  # type: ignore[union-attr]
    assert world.corpus[3].text[:60] in documents[0].text  # type: ignore[union-attr]


def test_a_page_behind_two_gzip_layers_opens(web: LocalWeb, world: Any) -> None:
    passage = world.corpus[11]
    (document,) = reader(web).open_documents([f"{web.base_url}/gzip2/{passage.title}"])
    assert isinstance(document, Document) and passage.text[:80] in document.text


def test_a_gzip_bomb_is_cut_at_the_cap_while_it_is_decoded(web: LocalWeb) -> None:
    """Two gzip layers of a few hundred bytes inflate to 100 MB: the cap holds during decoding, so the memory
    the reader allocates stays near the cap (before, one network chunk was inflated whole, past 100 MB)."""
    import tracemalloc

    bomb = f"{web.base_url}/fault/gzip-bomb"
    limit = 1_000_000
    reader(web, max_bytes=limit).open_documents([bomb])  # the server builds its bomb once, outside the trace
    tracemalloc.start()
    try:
        (error,) = reader(web, max_bytes=limit).open_documents([bomb])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * limit, f"{peak:,} bytes allocated reading a page capped at {limit:,}"
    assert isinstance(error, PageError) and error.kind == "too_large" and "decoded" in error.detail, error


def test_the_decoder_undoes_any_stack_of_codings_in_bounded_pieces() -> None:
    import gzip
    import zlib

    from searchenv.retrievers.web.decoding import PIECE, BoundedDecoder, CorruptCoding, UnknownCoding

    body = b"".join(b"line %d of a page\n" % i for i in range(60_000))  # about 1 MB
    raw_deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    stacks = {
        "gzip": gzip.compress(body),
        "x-gzip, identity": gzip.compress(body),
        "deflate": zlib.compress(body),
        "gzip, deflate": raw_deflate.compress(gzip.compress(body)) + raw_deflate.flush(),
        "gzip, gzip, gzip": gzip.compress(gzip.compress(gzip.compress(body))),
        "": body,
    }
    for encoding, wire in stacks.items():
        decoder = BoundedDecoder(encoding)
        pieces = [p for i in range(0, len(wire), 1000) for p in decoder.feed(wire[i : i + 1000])]
        assert b"".join(pieces) == body, encoding
        assert max(len(p) for p in pieces) <= max(PIECE, 1000), encoding
    with pytest.raises(UnknownCoding, match="'br' is not one the page reader decodes"):
        BoundedDecoder("gzip, br")
    with pytest.raises(CorruptCoding, match="gzip layer is corrupt"):
        list(BoundedDecoder("gzip").feed(b"not gzip at all"))


def test_extraction_is_bounded_by_the_page_deadline(web: LocalWeb) -> None:
    """4.9 MB of one-word paragraphs take trafilatura tens of seconds: the page deadline cuts the extraction."""
    (error,) = reader(web, timeout=2.0).open_documents([f"{web.base_url}/fault/tiny-paragraphs"])
    assert isinstance(error, PageError) and error.kind == "timeout", error
    assert "extraction" in error.detail and "page deadline" in error.detail
    (document,) = reader(web).open_documents([web.page_url(next(iter(web.articles)))])
    assert isinstance(document, Document)  # the next page opens in a fresh worker


def test_extraction_is_bounded_in_memory(web: LocalWeb) -> None:
    (error,) = reader(web, timeout=60.0, max_memory=128 * 2**20).open_documents(
        [f"{web.base_url}/fault/tiny-paragraphs"]
    )
    assert isinstance(error, PageError) and error.kind == "too_large", error
    assert "needs more than 128 MiB of memory" in error.detail
