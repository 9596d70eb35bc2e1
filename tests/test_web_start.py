"""Web backends are checked when they are built, like ``http://`` retrievers: a dead or mistyped URL is one error
line and exit 2 before any episode (it cost a silent minute at the first search, then exit 0), a replay of a
record needs no network, and a missing ``web`` or ``lucene`` extra names the extra, not the module it lacks."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from servers import free_port

from searchenv.cli.main import main
from searchenv.components import build_retriever, check_components
from searchenv.data.world.generator import generate_world
from searchenv.retrievers.web.standin import LocalWeb

KEY = "sk-standin-5f3a9c0e7d21"


@pytest.fixture(scope="module")
def web() -> Iterator[LocalWeb]:
    with LocalWeb(generate_world(300, seed=3).corpus, keys={"serper": KEY, "brave": KEY}) as served:
        yield served


def _dead() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.mark.parametrize("backend", ["searxng", "serper", "brave"])
def test_a_dead_web_backend_fails_when_it_is_built(backend: str) -> None:
    dead = _dead()
    options: dict[str, Any] = {"url": dead, **({} if backend == "searxng" else {"api_key": KEY})}
    with pytest.raises(ConnectionError, match=rf"retriever '{backend}': nothing answers at {dead} \(ConnectError"):
        build_retriever(backend, None, options, shared=False)


@pytest.mark.parametrize("backend", ["searxng", "serper", "brave"])
def test_a_live_web_backend_passes_without_spending_a_search(backend: str, web: LocalWeb) -> None:
    url = {"searxng": web.searxng_url, "serper": web.serper_url, "brave": web.brave_url}[backend]
    before = dict(web.counts)
    options: dict[str, Any] = {"url": url, **({} if backend == "searxng" else {"api_key": KEY})}
    engine = build_retriever(backend, None, options, shared=False)
    assert engine.check_on_start and dict(web.counts) == before  # a HEAD request: no search was counted
    engine.close()


def test_a_replay_is_offline_and_check_on_start_false_waits(tmp_path) -> None:
    dead, record = _dead(), str(tmp_path / "record.sqlite")
    later = build_retriever("searxng", None, {"url": dead, "check_on_start": False}, shared=False)  # started later
    later.close()
    options = {"url": dead, "cache": record, "cache_mode": "record", "check_on_start": False}
    build_retriever("searxng", None, options, shared=False).close()
    replay = build_retriever("searxng", None, {"url": dead, "cache": record, "cache_mode": "replay"}, shared=False)
    assert not replay.check_on_start  # replaying a record needs no server
    replay.close()


def test_the_command_line_says_it_in_one_line_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    dead = _dead()
    code = main(["play", "--retriever", "searxng", "--retriever-option", f"url={dead}"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    [line] = err.strip().splitlines()
    assert line.startswith(f"searchenv play: error: retriever 'searxng': nothing answers at {dead} (ConnectError")
    assert line.endswith(
        "fix url=, replay a record offline (cache=..., cache_mode='replay'), or pass check_on_start=False "
        "for a backend started later"
    )


def _without(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # importlib.util.find_spec then says it is not installed


@pytest.mark.parametrize(
    ("retriever", "options", "module", "extra"),
    [
        ("serper", {"api_key": KEY}, "httpx", "web"),
        ("searxng", {"url": "http://127.0.0.1:9"}, "trafilatura", "web"),
        ("bm25", {"engine": "lucene"}, "jnius_config", "lucene"),
        ("bm25", {"engine": "lucene"}, "pyserini", "lucene"),
    ],
)
def test_a_missing_extra_is_named_before_anything_is_built(
    retriever: str, options: dict[str, Any], module: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _without(monkeypatch, module)
    with pytest.raises(
        ImportError, match=rf"needs {module}, which is not installed: pip install 'searchenv\[{extra}\]'"
    ):
        check_components("world", "train", None, retriever, "em", "search-r1", options)


def test_every_web_engines_help_names_the_key_variable_its_code_reads() -> None:
    """The Brave key was ``$BRAVE_SEARCH_API_KEY`` in the code and ``$BRAVE_API_KEY`` in every help and doc."""
    import importlib

    from searchenv.retrievers.catalogue import ENGINES

    for name, record in ENGINES.items():
        if not record.factory.startswith("searchenv.retrievers.web."):
            continue
        module, attr = record.factory.split(":")
        key_env = getattr(importlib.import_module(module), attr).key_env
        if key_env is None:
            assert "key:" not in record.help, name
        elif record.alias_of is None:
            assert f"(key: ${key_env})" in record.help, (name, record.help)
