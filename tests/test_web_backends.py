"""SearXNG, Serper and Brave against the loopback web (a real HTTP server speaking their wire formats).

Each backend is checked for its results (URL ids, titles, snippets, best first), its refusals (no key, wrong
key, an instance without JSON), a 429 with ``Retry-After`` (waited, then answered), HTML instead of JSON (a
clear ``bad_response``, not "no results"), and a key that never reaches an error, a log line or ``repr``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

from searchenv.data.world.generator import generate_world
from searchenv.http.retry import RetrievalUnavailable
from searchenv.retrievers import check_retriever_options, make_retriever
from searchenv.retrievers.web.keys import key_renderings
from searchenv.retrievers.web.standin import LocalWeb

KEY = "sk-standin-5f3a9c0e7d21"
BACKENDS = ("searxng", "serper", "brave")


@pytest.fixture(scope="module")
def world() -> Any:
    return generate_world(300, seed=3)


@pytest.fixture(scope="module")
def web(world: Any) -> Iterator[LocalWeb]:
    with LocalWeb(world.corpus, keys={"serper": KEY, "brave": KEY}) as served:
        yield served


def options(web: LocalWeb, backend: str, **more: Any) -> dict[str, Any]:
    url = {"searxng": web.searxng_url, "serper": web.serper_url, "brave": web.brave_url}[backend]
    key = {} if backend == "searxng" else {"api_key": KEY}
    return {"url": url, **key, "backoff": 0.01, "max_backoff": 0.05, **more}


@pytest.mark.parametrize("backend", BACKENDS)
def test_results_are_the_pages_best_first_with_url_ids(web: LocalWeb, world: Any, backend: str) -> None:
    title = world.corpus[5].title
    engine = make_retriever(backend, None, **options(web, backend))
    hits, blank = engine.search([f"{title} biography", "  "], 3)
    assert blank == []  # a blank query costs no request
    assert 1 <= len(hits) <= 3
    assert hits[0].id == web.page_url(title) and hits[0].title == title
    assert hits[0].text and hits[0].text.split()[0] == world.corpus[5].text.split()[0]
    assert len({h.id for h in hits}) == len(hits)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_same_results_from_every_backend(web: LocalWeb, world: Any, backend: str) -> None:
    query = world.questions[0].question
    reference = make_retriever("searxng", None, url=web.searxng_url).search([query], 4)
    assert make_retriever(backend, None, **options(web, backend)).search([query], 4) == reference


@pytest.mark.parametrize("backend", BACKENDS)
def test_429_with_retry_after_is_waited_for(web: LocalWeb, world: Any, backend: str) -> None:
    engine = make_retriever(backend, None, **options(web, backend))
    web.inject("rate_limit", retry_after=1)
    started = time.monotonic()
    assert engine.search([world.corpus[1].title], 2)[0]
    assert time.monotonic() - started >= 1.0 and engine.requests == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_html_instead_of_json_is_a_clear_retrieval_error(web: LocalWeb, backend: str) -> None:
    engine = make_retriever(backend, None, **options(web, backend, retries=2))
    web.inject("html")
    with pytest.raises(RetrievalUnavailable) as caught:
        engine.search(["a captcha page"], 2)
    error = caught.value
    assert error.kind == "bad_response" and error.attempts == 1  # a malformed answer is not retried
    assert "text/html" in error.detail and backend in error.detail


#: A key whose escaped and URL-encoded renderings differ from the literal one.
ODD_KEY = 'sk/live+Zq=="x\\9'


@pytest.mark.parametrize("key", [KEY, ODD_KEY])
@pytest.mark.parametrize("backend", ["serper", "brave"])
def test_a_key_never_reaches_errors_logs_or_repr(
    world: Any, backend: str, key: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv({"serper": "SERPER_API_KEY", "brave": "BRAVE_SEARCH_API_KEY"}[backend], key)
    with LocalWeb(world.corpus, keys={backend: key}) as web:
        engine = make_retriever(backend, None, **{k: v for k, v in options(web, backend).items() if k != "api_key"})
        web.inject("echo_key")  # a 401 whose body quotes the key back, JSON-escaped and URL-encoded
        with caplog.at_level(logging.DEBUG), pytest.raises(RetrievalUnavailable) as caught:
            engine.search(["leak"], 2)
    assert caught.value.kind == "unauthorized" and "<key>" in caught.value.detail
    texts = (str(caught.value), caught.value.detail, caplog.text, repr(engine), str(engine.stats()))
    for form in key_renderings(key):
        for text in texts:
            assert form not in text, (form, text)


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("sk-5f3a9c0e7d21\n", "a newline at the end"),
        ("sk-5f3a9c0e7d21\r\n", "a carriage return"),
        (" sk-5f3a9c0e7d21", "a space at the start"),
        ("sk-5f3a 9c0e7d21", "a space inside it"),
        ("sk-5f3a9c0e7d21\t", "a tab at the end"),
        ("sk-5f3a9c0e7d21\u00e9", "U+00E9"),
    ],
)
@pytest.mark.parametrize("backend", ["serper", "brave"])
def test_a_key_with_a_stray_character_is_refused_when_the_retriever_is_built(
    web: LocalWeb, backend: str, key: str, words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    variable = {"serper": "SERPER_API_KEY", "brave": "BRAVE_SEARCH_API_KEY"}[backend]
    monkeypatch.setenv(variable, key)
    before = web.counts[backend]
    with pytest.raises(ValueError) as from_env:
        make_retriever(backend, None, url=web.base_url)
    with pytest.raises(ValueError) as from_argument:
        make_retriever(backend, None, url=web.base_url, api_key=key)
    for caught, where in ((from_env, f"${variable}"), (from_argument, "api_key=")):
        message = str(caught.value)
        assert where in message and words in message and "remove the stray character" in message
        assert "5f3a" not in message  # the key itself is never quoted
    assert "tr -d" in str(from_env.value)  # the fix for a variable: strip it in the shell
    assert web.counts[backend] == before  # refused before any request, so nothing is retried


def test_a_request_that_cannot_be_sent_is_not_retried() -> None:
    import httpx

    from searchenv.http.retry import attempt_failed_from_exception

    failure = attempt_failed_from_exception(httpx.LocalProtocolError("Illegal header value b'x\\n'"), 10.0)
    assert failure.kind == "refused" and not failure.retryable


@pytest.mark.parametrize("backend", ["serper", "brave"])
def test_wrong_and_missing_keys(web: LocalWeb, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    monkeypatch.delenv("BRAVE_SEARCH_API_KEY", raising=False)
    with pytest.raises(ValueError, match=r"needs an API key: set \$"):
        make_retriever(backend, None, url=web.base_url)
    engine = make_retriever(backend, None, **options(web, backend, api_key="wrong-key-123"))
    with pytest.raises(RetrievalUnavailable) as caught:
        engine.search(["q"], 2)
    assert caught.value.kind == "unauthorized" and caught.value.attempts == 1


def test_searxng_without_json_says_how_to_enable_it(web: LocalWeb) -> None:
    engine = make_retriever("searxng", None, url=web.searxng_url)
    web.inject("forbidden")  # what an instance answers when its settings.yml does not enable the JSON format
    with pytest.raises(RetrievalUnavailable) as caught:
        engine.search(["q"], 2)
    assert caught.value.kind == "unauthorized" and "formats: [html, json]" in caught.value.detail


def test_options_are_checked_before_anything_is_built() -> None:
    check_retriever_options("serper", {"url": "http://x", "cache": "runs/web.sqlite", "cache_mode": "replay"})
    with pytest.raises(ValueError, match="has no option 'endpoint'"):
        check_retriever_options("searxng", {"endpoint": "http://x"})
    with pytest.raises(ValueError, match="needs url="):
        make_retriever("searxng", None)
    with pytest.raises(ValueError, match="cache_mode must be one of record, replay, cached"):
        make_retriever("searxng", None, url="http://127.0.0.1:9", cache="x.sqlite", cache_mode="replayed")
    with pytest.raises(ValueError, match="needs cache=PATH"):
        make_retriever("searxng", None, url="http://127.0.0.1:9", cache_mode="replay")


def test_an_episode_searches_the_local_web(web: LocalWeb, world: Any) -> None:
    title = world.corpus[7].title
    env = gym.make(
        "SearchQA-v0",
        dataset=world.questions[:1],
        corpus=world.corpus,
        retriever="searxng",
        retriever_options={"url": web.searxng_url},
    )
    env.reset(seed=0)
    _, _, _, _, info = env.step(f"<search>{title}</search>")
    assert info["passage_ids"][0] == web.page_url(title)
    web.inject("html")
    observation, _, _, _, info = env.step("<search>a query the web cannot answer</search>")
    assert "bad_response" in info["retrieval_error"] and "not a searxng search answer" in info["retrieval_error"]
    env.close()
