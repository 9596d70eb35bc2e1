"""Record and replay: a recorded web run replays byte for byte with zero requests, and a miss is a counted failure.

Requests are counted at the loopback web itself, so "zero API calls" is what the server saw, not what the client
believes.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import gymnasium as gym
import pytest

from searchenv.answer_store import AnswerStore, StoreDamaged
from searchenv.data.world.generator import generate_world
from searchenv.http.retry import RetrievalUnavailable
from searchenv.retrievers import make_retriever
from searchenv.retrievers.web.pages import PageError, PageReader
from searchenv.retrievers.web.record import normal_query, normal_url
from searchenv.retrievers.web.standin import LocalWeb
from searchenv.types import Document

KEY = "sk-record-never-stored-0042"


@pytest.fixture(scope="module")
def world() -> Any:
    return generate_world(300, seed=5)


@pytest.fixture
def web(world: Any) -> Iterator[LocalWeb]:
    with LocalWeb(world.corpus) as served:
        yield served


def serper(web: LocalWeb, cache: Path, mode: str, **more: Any) -> Any:
    return make_retriever(
        "serper",
        None,
        url=web.serper_url,
        api_key=KEY,
        cache=str(cache),
        cache_mode=mode,
        **{"pages": {"host_interval": 0}, **more},
    )


def play(env: Any, actions: list[str]) -> list[str]:
    observation, _ = env.reset(seed=0)
    seen = [observation]
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        seen.append(json.dumps([observation, reward, terminated, truncated, info], sort_keys=True, default=str))
    return seen


def test_a_recorded_episode_replays_byte_identically_with_zero_requests(
    web: LocalWeb, world: Any, tmp_path: Path
) -> None:
    cache = tmp_path / "web.sqlite"
    titles = [world.corpus[i].title for i in (2, 9)]
    actions = [f"<search>{titles[0]}</search>", f"<search>{titles[1]} born</search>", "<answer>x</answer>"]

    def env(mode: str) -> Any:
        options = {"url": web.searxng_url, "cache": str(cache), "cache_mode": mode}
        return gym.make("SearchQA-v0", dataset=world.questions[:1], retriever="searxng", retriever_options=options)

    recorded = play(env("record"), actions)
    assert web.counts["searxng"] == 2
    replays = [play(env("replay"), actions) for _ in range(2)]
    assert web.counts["searxng"] == 2  # the replays asked the web nothing
    assert replays[0] == recorded and replays[1] == recorded


def test_replay_never_calls_and_counts_its_misses(web: LocalWeb, world: Any, tmp_path: Path) -> None:
    cache = tmp_path / "web.sqlite"
    recorder = serper(web, cache, "record")
    query = world.corpus[4].title
    recorded = recorder.search([query], 3)
    page = recorder.open_documents([recorded[0][0].id, f"{web.base_url}/fault/binary"])
    web.stop()  # nothing to call any more

    replay = serper(web, cache, "replay")
    assert replay.search([f"  {query.upper()} "], 3) == recorded  # the key reads the normalised query
    document, refusal = replay.open_documents([recorded[0][0].id, f"{web.base_url}/fault/binary"])
    assert document == page[0] and (refusal.kind, refusal.detail) == (page[1].kind, page[1].detail)  # type: ignore[union-attr]
    with pytest.raises(RetrievalUnavailable) as caught:
        replay.search(["never recorded"], 3)
    assert caught.value.kind == "not_recorded" and "never recorded" in caught.value.detail
    (missing,) = replay.open_documents([f"{web.base_url}/wiki/Unopened"])
    assert isinstance(missing, PageError) and missing.kind == "not_recorded"
    stats = replay.stats()
    assert stats["api_calls"] == 0 and stats["hits"] == 3 and stats["replay_misses"] == 2
    assert stats["hit_rate"] == pytest.approx(3 / 5) and stats["search_requests"] == 0


def test_a_page_refusal_is_recorded_and_replayed_but_a_timeout_is_not(web: LocalWeb, tmp_path: Path) -> None:
    cache = tmp_path / "web.sqlite"
    recorder = serper(web, cache, "record", pages={"host_interval": 0, "timeout": 1.0})
    binary, endless = recorder.open_documents([f"{web.base_url}/fault/binary", f"{web.base_url}/fault/endless"])
    assert binary.kind == "binary" and endless.kind == "timeout"  # type: ignore[union-attr]
    replay = serper(web, cache, "replay")
    again, missing = replay.open_documents([f"{web.base_url}/fault/binary", f"{web.base_url}/fault/endless"])
    assert (again.kind, again.detail) == (binary.kind, binary.detail)  # type: ignore[union-attr]
    assert missing.kind == "not_recorded"  # type: ignore[union-attr]


def test_one_miss_fails_only_its_own_episode(web: LocalWeb, world: Any, tmp_path: Path) -> None:
    cache = tmp_path / "web.sqlite"
    known = world.corpus[6].title
    serper(web, cache, "record").search([known], 3)
    options = {"url": web.serper_url, "api_key": KEY, "cache": str(cache), "cache_mode": "replay"}
    envs = gym.make_vec(
        "SearchQA-v0", num_envs=2, dataset=world.questions[:2], retriever="serper", retriever_options=options
    )
    envs.reset(seed=0)
    _, _, _, _, infos = envs.step([f"<search>{known}</search>", "<search>not in the record</search>"])
    errors = infos["retrieval_error"]
    assert not errors[0] and "not_recorded" in errors[1]
    envs.close()


def test_cached_mode_calls_only_on_a_miss_and_estimates_the_cost(web: LocalWeb, world: Any, tmp_path: Path) -> None:
    engine = serper(web, tmp_path / "web.sqlite", "cached", price_per_1k=2.0)
    for _ in range(3):
        engine.search([world.corpus[1].title, world.corpus[2].title], 2)
    assert web.counts["serper"] == 2
    stats = engine.stats()
    assert stats["hits"] == 4 and stats["api_calls_search"] == 2 and stats["estimated_cost_usd"] == pytest.approx(0.004)


def test_the_record_holds_no_key(web: LocalWeb, world: Any, tmp_path: Path) -> None:
    cache = tmp_path / "web.sqlite"
    engine = serper(web, cache, "record")
    engine.open_documents([r.id for r in engine.search([world.corpus[8].title], 2)[0]])
    engine.close()
    assert KEY.encode() not in cache.read_bytes()
    with sqlite3.connect(cache) as db:
        assert {kind for (kind,) in db.execute("select kind from answers")} == {"search", "page"}


def test_keys_normalise_queries_and_urls() -> None:
    assert normal_query("  Who\u00a0WROTE   Hamlet ") == "who wrote hamlet"
    assert normal_url("HTTP://Example.ORG:80/a/B?x=1#top") == "http://example.org/a/B?x=1"
    assert normal_url("https://example.org") == "https://example.org/"


# One process recording 30 answers into a shared file, each answer naming the process (an engine whose answers
# differ from run to run); prints what the record returned.
_WRITER = """
import json, sys
from searchenv.answer_store import AnswerStore
record = AnswerStore(sys.argv[1], sys.argv[3])
print(json.dumps([record.through("search", {"query": f"q{i}"}, lambda i=i: [sys.argv[2], i]) for i in range(30)]))
"""


@pytest.mark.parametrize("mode", ["record", "cached"])
def test_many_processes_share_one_record(tmp_path: Path, mode: str) -> None:
    path = str(tmp_path / "shared.sqlite")
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, path, str(w), mode], stdout=subprocess.PIPE, text=True)
        for w in range(3)
    ]
    answers = [json.loads(w.communicate(timeout=120)[0]) for w in writers]
    assert answers[0] == answers[1] == answers[2]  # the first answer stored for a key wins everywhere
    replayed = AnswerStore(path, "replay")
    assert [replayed.through("search", {"query": f"q{i}"}, list) for i in range(30)] == answers[0]
    with sqlite3.connect(path) as db:
        assert db.execute("select count(*) from answers").fetchone() == (30,)
        assert db.execute("pragma journal_mode").fetchone() == ("wal",)


def test_every_recording_caller_gets_the_first_answer_stored(tmp_path: Path) -> None:
    answers = iter(range(100))  # an engine whose answer to the same query changes every time
    record = AnswerStore(tmp_path / "drift.sqlite", "record")
    first, second = (record.through("search", {"query": "q"}, lambda: next(answers)) for _ in range(2))
    assert first == second == 0  # the second episode sees what its replay will see
    assert AnswerStore(tmp_path / "drift.sqlite", "replay").through("search", {"query": "q"}, list) == 0


def test_a_damaged_record_fails_when_opened_naming_the_file(web: LocalWeb, world: Any, tmp_path: Path) -> None:
    cache = tmp_path / "web.sqlite"
    recorder = AnswerStore(cache, "record")
    for i in range(300):
        recorder.through("search", {"query": f"q{i}"}, lambda i=i: [["http://x", "title", "snippet " * 20, i]])
    recorder.close()
    data = bytearray(cache.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 2048] = b"\xab" * 2048  # the header intact, a page of data not
    cache.write_bytes(bytes(data))
    for mode in ("replay", "cached", "record"):
        with pytest.raises(StoreDamaged, match=f"the record {cache} is damaged.*record again into a new file"):
            serper(web, cache, mode)
    with pytest.raises(StoreDamaged, match="web.sqlite is damaged"):
        gym.make(
            "SearchQA-v0",
            retriever="serper",
            retriever_options={"url": web.serper_url, "api_key": KEY, "cache": str(cache)},
        )


def test_replay_refuses_a_file_that_holds_no_record(tmp_path: Path) -> None:
    """A missing record was refused, an empty file (``touch``, a failed copy) was replayed as a record of nothing."""
    with pytest.raises(FileNotFoundError, match=r"web.sqlite does not exist \(make one with cache_mode='record'\)"):
        AnswerStore(tmp_path / "web.sqlite", "replay")
    (tmp_path / "web.sqlite").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"needs an existing record; .*web.sqlite is empty \(0 bytes\)"):
        AnswerStore(tmp_path / "web.sqlite", "replay")
    assert (tmp_path / "web.sqlite").stat().st_size == 0  # left as it was
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE notes (text TEXT)")
    with pytest.raises(StoreDamaged, match=r"other.sqlite is damaged: its answers table has columns \[\]"):
        AnswerStore(other, "replay")
    AnswerStore(tmp_path / "web.sqlite", "record").close()  # recording into the empty file makes it a record
    assert AnswerStore(tmp_path / "web.sqlite", "replay").stats()["hits"] == 0


def test_reach_settings_are_part_of_a_page_record(web: LocalWeb, tmp_path: Path) -> None:
    store = AnswerStore(tmp_path / "pages.sqlite", "cached")
    url = web.page_url(next(iter(web.articles)))
    allowed = PageReader(record=store, allow_private=True, host_interval=0).open_documents([url])[0]
    assert isinstance(allowed, Document)
    forbidding = PageReader(record=store, host_interval=0)  # a run that forbids private hosts
    (refused,) = forbidding.open_documents([url])
    assert isinstance(refused, PageError) and refused.kind == "blocked"  # not the page stored under allow_private
    assert PageReader(record=store, host_interval=0).open_documents([url])[0].kind == "blocked"  # stored as such
    again = PageReader(record=store, allowed_hosts=[urlsplit(url).netloc], host_interval=0).open_documents([url])
    assert again == [allowed]  # allowing the host again: the stored page, not the stored refusal


def test_a_search_host_on_another_loopback_port_does_not_open_a_pages_record(web: LocalWeb, tmp_path: Path) -> None:
    """The key's reach is the connection's rule: allowing the search host ``127.0.0.1:Q`` does not allow a page on
    ``127.0.0.1:P`` (the key dropped the loopback port, so the two shared a key)."""
    url = web.page_url(next(iter(web.articles)))
    search_host = f"127.0.0.1:{urlsplit(url).port + 1}"
    store = AnswerStore(tmp_path / "pages.sqlite", "cached")
    assert isinstance(PageReader(record=store, allow_private=True, host_interval=0).open_documents([url])[0], Document)
    beside = PageReader(record=store, allowed_hosts=[search_host], host_interval=0)
    (refused,) = beside.open_documents([url])
    assert isinstance(refused, PageError) and refused.kind == "blocked"  # not the page stored under allow_private
    other = AnswerStore(tmp_path / "blocked.sqlite", "cached")
    assert PageReader(record=other, allowed_hosts=[search_host], host_interval=0).open_documents([url])[0].kind == (
        "blocked"
    )
    assert isinstance(PageReader(record=other, allow_private=True, host_interval=0).open_documents([url])[0], Document)


# Records one search and one page against a stand-in of its own (a random port), then prints what it got.
_RECORDER = """
import json, sys
from searchenv.data.world.generator import generate_world
from searchenv.retrievers import make_retriever
from searchenv.retrievers.web.standin import LocalWeb
world = generate_world(300, seed=5)
with LocalWeb(world.corpus) as web:
    engine = make_retriever("serper", None, url=web.serper_url, api_key="k", cache=sys.argv[1], cache_mode="record",
                            pages={"host_interval": 0})
    hits = engine.search([world.corpus[4].title], 3)[0]
    page = engine.open_documents([hits[0].id])[0]
    print(json.dumps([[h.id, h.title, h.text] for h in hits] + [[page.ref, page.title, page.text]]))
"""


def test_a_record_made_against_the_standins_random_port_replays_in_a_new_process(
    web: LocalWeb, world: Any, tmp_path: Path
) -> None:
    cache = str(tmp_path / "web.sqlite")
    recorded = json.loads(
        subprocess.run(
            [sys.executable, "-c", _RECORDER, cache], capture_output=True, text=True, check=True, timeout=120
        ).stdout
    )
    replay = serper(web, Path(cache), "replay")  # this process's stand-in listens on another port
    hits = replay.search([world.corpus[4].title], 3)[0]
    page = replay.open_documents([hits[0].id])[0]
    assert [[h.id, h.title, h.text] for h in hits] + [[page.ref, page.title, page.text]] == recorded  # type: ignore[union-attr]
    assert replay.stats()["replay_misses"] == 0 and sum(web.counts.values()) == 0


def test_play_says_a_replay_miss_is_one(
    web: LocalWeb, world: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    from searchenv.cli.main import main

    cache = tmp_path / "web.sqlite"
    serper(web, cache, "record").search([world.corpus[1].title], 3)
    options = [f"url={web.serper_url}", f"api_key={KEY}", f"cache={cache}", "cache_mode=replay"]
    monkeypatch.setattr("sys.stdin", io.StringIO("<search> never recorded </search>\n"))
    argv = ["play", "--retriever", "serper", *(x for o in options for x in ("--retriever-option", o))]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "[replay miss: search 'never recorded' is not in the record web.sqlite (cache_mode='replay')" in out
    assert "the model is shown the search-error text]" in out
