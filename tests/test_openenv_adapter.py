"""SearchQA on OpenEnv: OpenEnv's own server (``searchenv openenv-serve``) and its own clients play real episodes.

The server is the real command in a child process on 127.0.0.1; the clients are OpenEnv's ``GenericEnvClient``
(WebSocket sessions) and plain HTTP for the Task API routes. In-process tests cover the tool-call protocol, the
other datasets and the errors.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("openenv")
httpx = pytest.importorskip("httpx")

from openenv.core import GenericEnvClient  # noqa: E402
from openenv_server import openenv_server  # noqa: E402

from searchenv.adapters.openenv import (  # noqa: E402
    SearchAction,
    SearchObservation,
    SearchQAEnvironment,
    SearchQATasks,
    create_app,
)
from searchenv.data.world import default_world  # noqa: E402


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """``searchenv openenv-serve`` on a free loopback port, serving the world's test split with BM25."""
    with openenv_server("--split", "test") as url:
        yield url


def _play(url: str, index: int, answer_of: Any, out: dict[int, Any], barrier: threading.Barrier) -> None:
    """One WebSocket session: reset to task ``index``, search, wait for the other session, then answer."""
    with GenericEnvClient(base_url=url).sync() as client:
        first = client.reset(split="test", index=index)
        searched = client.step({"text": "<search> Brosara founded </search>"})
        barrier.wait(timeout=120)  # both sessions hold an episode at once before either answers
        final = client.step({"text": f"<answer> {answer_of(first.observation['question'])} </answer>"})
        out[index] = (first, searched, final, client.state())


def test_two_concurrent_sessions_play_world_questions_to_gold_and_wrong_rewards(server: str) -> None:
    world_test = default_world().dataset("test")
    gold = {e.question: e.golden_answers[0] for e in world_test}
    out: dict[int, Any] = {}
    barrier = threading.Barrier(2)
    threads = [
        threading.Thread(target=_play, args=(server, 0, gold.__getitem__, out, barrier)),
        threading.Thread(target=_play, args=(server, 1, lambda _q: "Atlantis", out, barrier)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert sorted(out) == [0, 1], "a session failed (see the thread's exception above)"

    (first, searched, right, state), (_, _, wrong, other_state) = out[0], out[1]
    assert first.observation["question"] == world_test[0].question and first.observation["split"] == "test"
    assert first.observation["question"] in first.observation["text"]  # the prompt
    assert "golden_answers" not in (first.metadata or {})  # a client that is the policy never sees the gold
    assert searched.reward == 0.0 and not searched.done
    assert "<information>" in searched.observation["text"] and searched.metadata["num_searches"] == 1
    assert (right.reward, right.done, wrong.reward, wrong.done) == (1.0, True, 0.0, True)
    assert right.metadata["reward_parts"]["em"] == 1.0 and wrong.metadata["prediction"] == "Atlantis"
    assert right.metadata["end_reason"] == "answer" and right.metadata["episode_metrics"]["num_searches"] == 1.0
    assert state["index"] == 0 and other_state["index"] == 1 and state["done"] and state["step_count"] == 2
    assert state["episode_id"] != other_state["episode_id"]


def test_task_api_routes_list_the_worlds_splits_and_tasks(server: str) -> None:
    splits = httpx.get(f"{server}/searchqa/splits").json()
    assert [s["name"] for s in splits] == ["train", "test"]
    assert httpx.post(f"{server}/searchqa/num_tasks", json={"split": "test"}).json() == {"num_tasks": 100}
    task = httpx.post(f"{server}/searchqa/task", json={"split": "train", "index": 3}).json()["task"]
    assert task["question"] == default_world().dataset("train")[3].question and "golden_answers" not in task
    assert httpx.post(f"{server}/searchqa/task", json={"split": "test", "index": 100}).status_code == 400
    schema = httpx.get(f"{server}/schema").json()
    assert {"text", "tool", "arguments", "end"} <= set(schema["action"]["properties"])


def test_openenvs_own_runtime_validator_passes_the_server(server: str) -> None:
    from openenv.cli._validation import validate_running_environment

    report = validate_running_environment(server, timeout_s=60)
    assert report["passed"], [c for c in report["criteria"] if not c.get("passed")]
    assert report["summary"]["failed_criteria"] == []


def test_tool_call_protocol_with_structured_calls_and_the_open_tool() -> None:
    env = SearchQAEnvironment(protocol="tool-call-open", split="test", topk=2)
    first = env.reset(index=0)
    assert [tool["function"]["name"] for tool in first.tools] == ["search", "open"]
    gold = env.env.episode.example.golden_answers[0]  # type: ignore[union-attr]
    searched = env.step(SearchAction(tool="search", arguments={"query": "Brosara founded"}))
    assert searched.tool_output is not None and searched.tool_output.startswith("Doc 1(Title:")
    assert searched.metadata["action"] == "search" and len(searched.metadata["passage_ids"]) == 2
    opened = env.step(SearchAction(tool="open", arguments={"ref": "1"}))
    assert opened.metadata["action"] == "open" and opened.metadata["document_ref"]
    bad = env.step({"tool": "search", "arguments": {"q": "x"}})  # a dict, as the HTTP route hands it over
    assert bad.tool_output is not None and bad.tool_output.startswith("Error:") and "invalid_reason" in bad.metadata
    final = env.step(SearchAction(text=f"<answer> {gold} </answer>"))
    assert (final.reward, final.done, final.metadata["num_searches"]) == (1.0, True, 1)
    assert env.state.num_searches == 1 and env.state.done


def test_paper_set_splits_a_user_file_and_rows_of_your_own(tmp_path: Any) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text('{"question": "In what year was Brosara founded?", "golden_answers": ["999"]}\n')
    env = SearchQAEnvironment(dataset=str(path), corpus=default_world().corpus, reward="f1", split="eval")
    assert env.list_splits() == ["eval"] and env.num_tasks("eval") == 1
    env.reset(index=0)
    assert env.step(SearchAction(text="<answer> 999 </answer>")).reward == 1.0
    row = env.reset(example={"question": "Who?", "golden_answers": ["Ada Lovelace"]})
    assert row.question == "Who?" and row.index is None
    assert env.step(SearchAction(text="<answer> Ada </answer>")).reward == pytest.approx(2 / 3)  # F1
    from searchenv.adapters.openenv import dataset_splits

    assert dataset_splits("nq") == ("train", "dev", "test") and dataset_splits("bamboogle") == ("test",)


class _DownEngine:
    """An engine whose every search fails, as a dead service's would."""

    def search(self, queries: Any, k: int) -> Any:
        raise ConnectionError("retrieval service at 127.0.0.1:9 refused the connection")


def test_a_failed_search_is_reported_in_the_metadata_and_the_episode_goes_on() -> None:
    env = SearchQAEnvironment(retriever=_DownEngine(), split="test")
    env.reset(index=0)
    failed = env.step(SearchAction(text="<search> Brosara founded </search>"))
    assert "refused the connection" in failed.metadata["retrieval_error"] and not failed.done
    final = env.step(SearchAction(text="<answer> x </answer>"))
    assert final.done and final.metadata["episode_metrics"]["num_failed_searches"] == 1.0


def test_bad_requests_get_one_clear_error() -> None:
    tasks = SearchQATasks({"split": "test"})
    env = SearchQAEnvironment(tasks)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(SearchAction(text="<answer> x </answer>"))
    with pytest.raises(ValueError, match=r"unknown split 'dev'.*\['train', 'test'\]"):
        env.reset(split="dev")
    with pytest.raises(TypeError, match=r"unknown arguments \['spilt'\]"):
        env.reset(spilt="test")
    with pytest.raises(ValueError, match="not both and not neither"):
        SearchAction(text="<answer> a </answer>", tool="answer")
    with pytest.raises(ValueError, match="unknown tool 'lookup'"):
        SearchAction(tool="lookup")
    env.reset(index=0)
    with pytest.raises(ValueError, match="reads tags, not tool calls"):
        env.step(SearchAction(tool="search", arguments={"query": "q"}))
    with pytest.raises(ValueError, match="split 'dev' is not one of"):
        SearchQATasks({"split": "dev"})
    with pytest.raises(ValueError, match="max_sessions must be a positive integer"):
        create_app(max_sessions=0)
    assert SearchObservation.model_json_schema()["properties"]["metadata"]
