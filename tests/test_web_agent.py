"""The web-research agent end to end: search the web, open a result, answer — and replay that run exactly.

Real parts: the loopback web (:class:`~searchenv.retrievers.web.standin.LocalWeb`, a real HTTP server speaking
SearXNG's and Serper's wire formats and serving one page per world article), the page reader, the SQLite record,
and ``gym.make`` with ASearcher's protocol. Requests are counted by the server, so "zero calls" is what it saw.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from searchenv.retrievers.web.standin import LocalWeb
from tests.test_web_record import web, world  # noqa: F401 (the same world and loopback web fixtures)


def agent_env(web: LocalWeb, world: Any, backend: str, **options: Any) -> Any:  # noqa: F811
    url = web.searxng_url if backend == "searxng" else web.serper_url
    extra = {"api_key": "sk-test-0001"} if backend == "serper" else {}
    return gym.make(
        "SearchQA-v0",
        dataset=world.questions[:1],
        retriever=backend,
        retriever_options={"url": url, "pages": {"host_interval": 0}, **extra, **options},
        protocol="asearcher",
        reward="em",
    )


def play(env: Any, world: Any) -> list[Any]:  # noqa: F811
    """Search the question's subject, open result 1, answer the gold: what the model saw and got, step by step."""
    env.reset(seed=0)
    example = env.unwrapped.episode.example
    title = next(p.title for p in world.corpus if p.title.casefold() in example.question.casefold())
    steps = [env.step(f"<think>look</think><search> {title} </search>"), env.step("<access> 1 </access>")]
    steps.append(env.step(f"<answer> {example.golden_answers[0]} </answer>"))
    return [json.loads(json.dumps(step, default=str)) for step in steps]


@pytest.mark.parametrize("backend", ["searxng", "serper"])
def test_an_episode_searches_the_web_opens_a_result_and_answers(web: LocalWeb, world: Any, backend: str) -> None:  # noqa: F811
    (searched, opened, answered) = play(agent_env(web, world, backend), world)
    first_url = searched[4]["passage_ids"][0]
    assert first_url.startswith("http://127.0.0.1")
    observation, _, _, _, info = opened
    assert info["action"] == "open" and info["document_ref"] == first_url and "open_error" not in info
    assert observation.lstrip().startswith("<information>Page(Title: ")
    assert web.counts["page"] >= 1
    _, reward, terminated, _, final = answered
    assert terminated and reward == 1.0 and final["episode_metrics"]["num_opens"] == 1.0


def test_a_recorded_web_agent_run_replays_byte_identically_with_no_request(
    web: LocalWeb,  # noqa: F811 (the imported fixture)
    world: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    cache = str(tmp_path / "agent.sqlite")
    recorded = play(agent_env(web, world, "searxng", cache=cache, cache_mode="record"), world)
    calls = dict(web.counts)
    assert calls["searxng"] >= 1 and calls["page"] >= 1
    replays = [play(agent_env(web, world, "searxng", cache=cache, cache_mode="replay"), world) for _ in range(2)]
    assert dict(web.counts) == calls  # neither the search API nor a page was asked again
    assert replays == [recorded, recorded]


def test_the_stand_ins_printed_flags_play_an_agent_that_opens_a_page(web: LocalWeb) -> None:  # noqa: F811
    """``python -m searchenv.retrievers.web.standin`` prints command-line flags (it printed Python dicts): the
    command it suggests runs as printed."""
    import shlex
    import subprocess
    import sys

    from searchenv.retrievers.web.standin import usage_lines

    lines = usage_lines(web)
    assert all("{" not in line for line in lines[:4])  # flags, not dicts
    command = next(line for line in lines if line.startswith("try:")).removeprefix("try:").split()
    assert command[:2] == ["searchenv", "play"] and "--protocol" in command
    actions = "<search> Brosara founded </search>\n<access> 1 </access>\n<answer> 999 </answer>\n"
    out = subprocess.run(
        [sys.executable, "-m", "searchenv.cli", *command[1:]],
        input=actions,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "<information>Page(Title: " in out.stdout and "episode over: answered" in out.stdout
    assert shlex.split(lines[1].split(":", 1)[1]) == [
        "--retriever",
        "searxng",
        "--retriever-option",
        f"url={web.searxng_url}",
    ]
