"""The optional page summariser against a loopback server speaking OpenAI's chat-completions wire format."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from searchenv.retrievers import make_retriever
from searchenv.retrievers.web.pages import PageError
from searchenv.retrievers.web.standin import LocalWeb
from searchenv.retrievers.web.summary import Summariser
from searchenv.types import Document, Passage

KEY = "sk-llm-never-shown-77"


class ChatHandler(BaseHTTPRequestHandler):
    server: ChatServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append((self.path, dict(self.headers), body))
        if self.server.fail:
            payload, status = {"error": {"message": f"bad key {self.headers.get('Authorization')}"}}, 401
        else:
            question = body["messages"][0]["content"].split("Question: ")[1].split("\n")[0]
            payload, status = {"choices": [{"message": {"role": "assistant", "content": f"note on {question}"}}]}, 200
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


class ChatServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ChatHandler)
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.fail = False


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    server = ChatServer()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def long_article(title: str) -> list[Passage]:
    return [Passage(str(i), title, f"Paragraph {i} about {title}. " + "More words here. " * 40) for i in range(5)]


def test_a_long_page_becomes_a_note_on_the_question_and_replays(
    chat: ChatServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    url = f"http://127.0.0.1:{chat.server_address[1]}/v1"
    with LocalWeb(long_article("Orvenna Castle")) as web:
        options = {"url": web.searxng_url, "pages": {"host_interval": 0}, "cache": str(tmp_path / "web.sqlite")}
        engine = make_retriever("searxng", None, summariser={"url": url, "model": "tiny"}, **options)
        hit = engine.search(["Orvenna Castle"], 1)[0][0]
        whole, noted = engine.open_documents([hit.id]), engine.open_documents([hit.id], ["who built it?"])
        replay = make_retriever(
            "searxng", None, summariser={"url": url, "model": "tiny"}, **options, cache_mode="replay"
        )
        again = replay.open_documents([hit.id], ["who built it?"])
    assert isinstance(whole[0], Document) and len(whole[0].text.split()) > 300  # no question: the page whole
    assert noted == [Document(hit.id, "Orvenna Castle", "note on who built it?")] and again == noted
    assert len(chat.requests) == 1  # the replay asked no model
    path, headers, body = chat.requests[0]
    assert path == "/v1/chat/completions" and body["model"] == "tiny" and body["temperature"] == 0.0
    assert (
        headers["Authorization"] == f"Bearer {KEY}"
        and "Paragraph 0 about Orvenna Castle" in body["messages"][0]["content"]
    )


def test_short_pages_stay_whole_and_a_failed_note_is_that_pages_error(
    chat: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    notes = Summariser(f"http://127.0.0.1:{chat.server_address[1]}/v1", "tiny")
    short = Document("http://x/short", "Short", "only a few words")
    assert notes.summarise(short, "q") is short and not chat.requests
    chat.fail = True
    error = notes.summarise(Document("http://x/long", "Long", "word " * 400), "q")
    assert isinstance(error, PageError) and error.kind == "summary_failed"
    assert KEY not in error.detail and "<key>" in error.detail


def test_an_episode_opening_a_page_gets_the_note_on_its_own_question(
    chat: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gymnasium as gym

    from searchenv.types import QAExample

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    url = f"http://127.0.0.1:{chat.server_address[1]}/v1"
    question = "Who built Orvenna Castle?"
    with LocalWeb(long_article("Orvenna Castle")) as web:
        options = {"url": web.searxng_url, "pages": {"host_interval": 0}, "summariser": {"url": url, "model": "m"}}
        env = gym.make(
            "SearchQA-v0",
            dataset=[QAExample("q1", question, ("Ada",))],
            retriever="searxng",
            retriever_options=options,
            protocol="asearcher",
        )
        env.reset(seed=0)
        env.step("<search> Orvenna Castle </search>")
        observation, _, _, _, info = env.step("<access> 1 </access>")
    assert "open_error" not in info and f"note on {question}" in observation
