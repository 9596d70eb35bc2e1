"""The ``searchqa`` verifiers v1 taskset: verifiers' own loader, tool registration (its MCP server class), traces and
``Task.score``, and parity with the environment played under ``protocol="tool-call"``.

A rollout's trace is built from verifiers' own message and trace types, as its runner records them; the toolset
is called in process (verifiers would run it as an MCP server in a child process, the same methods behind it).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

vf = pytest.importorskip("verifiers.v1")

from verifiers.v1.configs.agent import AgentConfig  # noqa: E402
from verifiers.v1.graph import MessageNode  # noqa: E402
from verifiers.v1.trace import AgentInfo, TraceTask  # noqa: E402
from verifiers.v1.types import AssistantMessage, ToolCall, ToolMessage, UserMessage  # noqa: E402
from verifiers.v1.utils.loaders import taskset_class  # noqa: E402

from searchenv.adapters.tool_steps import BUDGET_OVER, call_action, tool_result  # noqa: E402
from searchenv.adapters.verifiers import (  # noqa: E402
    SearchQAOptions,
    SearchQATask,
    SearchQATaskConfig,
    SearchQATaskset,
    SearchQATasksetConfig,
    SearchQAToolset,
    SearchQAToolsetConfig,
)
from searchenv.protocol.tools import OPEN, SEARCH  # noqa: E402

QUERY = "Brosara founded"


def _taskset(**options: Any) -> SearchQATaskset:
    config = SearchQATasksetConfig(task=SearchQATaskConfig(options=SearchQAOptions(split="test", **options)), limit=3)
    return SearchQATaskset(config)


def _play(task: SearchQATask, calls: list[tuple[str, dict[str, Any]]], final: str) -> tuple[Any, list[str]]:
    """A rollout as verifiers records it: the toolset answers each call, then the final message; then scoring."""
    toolset = SearchQAToolset(SearchQAToolsetConfig(options=task.config.options))
    asyncio.run(toolset.setup_task(task.data))  # what verifiers hands over
    nodes = [MessageNode(message=UserMessage(content=str(task.data.prompt)))]
    outputs = []
    for i, (name, arguments) in enumerate(calls):
        output = asyncio.run(getattr(toolset, name)(**arguments))
        outputs.append(output)
        call = ToolCall(id=f"c{i}", name=name, arguments=json.dumps(arguments))
        nodes.append(MessageNode(parent=len(nodes) - 1, message=AssistantMessage(tool_calls=[call]), sampled=True))
        nodes.append(MessageNode(parent=len(nodes) - 1, message=ToolMessage(tool_call_id=f"c{i}", content=output)))
    nodes.append(MessageNode(parent=len(nodes) - 1, message=AssistantMessage(content=final), sampled=True))
    trace = vf.Trace(
        task=TraceTask(type="SearchQATask", data=task.data), agent=AgentInfo(config=AgentConfig()), nodes=nodes
    )
    asyncio.run(task.score(trace))
    return trace, outputs


def test_verifiers_loader_finds_the_taskset_by_its_id() -> None:
    assert taskset_class("searchqa") is SearchQATaskset
    tasks = list(_taskset())
    assert [t.data.idx for t in tasks] == [0, 1, 2] and tasks[0].data.id == "test-0"
    assert tasks[0].data.question in str(tasks[0].data.prompt) and "golden_answers" not in str(tasks[0].data.prompt)


def test_score_gives_the_gold_answer_1_and_a_wrong_one_less() -> None:
    task = next(iter(_taskset()))
    gold = task.data.golden_answers[0]
    right, outputs = _play(task, [("search", {"query": QUERY})], f"<answer> {gold} </answer>")
    wrong, _ = _play(task, [("search", {"query": QUERY})], "<answer> Atlantis </answer>")
    assert right.rewards["em"].score == 1.0 and right.reward == 1.0
    assert wrong.rewards["em"].score == 0.0 and wrong.reward < 1.0
    assert right.metrics["num_searches"] == 1.0 and right.metrics["tool_outputs_replayed"] == 1.0
    assert outputs[0].startswith("Doc 1(Title:")
    assert json.loads(right.model_dump_json())["rewards"]["em"]["score"] == 1.0  # the trace still serialises
    assert task._replays == {}  # each replay went from the metric to the reward, none kept

    f1 = next(iter(_taskset(reward="f1")))
    partial, _ = _play(f1, [], f"<answer> {gold} Atlantis </answer>")
    assert 0.0 < partial.rewards["f1"].score < 1.0 and partial.metrics["num_searches"] == 0.0


def test_parity_with_the_environment_under_the_tool_call_protocol() -> None:
    """Same question, calls and final answer: the same tool outputs and reward as SearchQAEnv(protocol="tool-call")
    stepping the model's ``<tool_call>`` text (what ``searchenv eval --protocol tool-call`` does)."""
    import gymnasium as gym

    import searchenv

    task = next(iter(_taskset(max_turns=2)))
    gold = task.data.golden_answers[0]
    calls = [("search", {"query": QUERY}), ("search", {"query": task.data.question})]
    trace, outputs = _play(task, calls, f"<answer> {gold} </answer>")

    env = gym.make(searchenv.ENV_ID, protocol="tool-call", split="test", max_turns=2).unwrapped
    env.reset(options={"index": 0})
    expected = []
    for name, arguments in calls:
        observation, _, _, _, info = env.step(call_action(name, arguments))
        expected.append(tool_result(env, observation, info))
    assert env.episode.done  # the second action spent the budget (its search skipped): the answer is never read
    assert outputs == expected and outputs[0].startswith("Doc 1(Title:") and outputs[1] == BUDGET_OVER
    assert trace.rewards["em"].score == env.episode.reward == 0.0
    assert trace.metrics["num_searches"] == env.episode.num_searches == 1
    assert trace.metrics["end_reason/action_budget"] == 1.0 and trace.metrics["tool_outputs_replayed"] == 1.0

    # Answered within the budget, the gold pays the same through both.
    trace, _ = _play(task, calls[:1], f"<answer> {gold} </answer>")
    env.reset(options={"index": 0})
    env.step(call_action(*calls[0]))
    assert trace.rewards["em"].score == env.step(f"<answer> {gold} </answer>")[1] == 1.0


def test_a_call_the_tool_server_refuses_never_reaches_the_replayed_episode() -> None:
    task = next(iter(_taskset()))
    toolset = SearchQAToolset(SearchQAToolsetConfig(options=task.config.options))
    asyncio.run(toolset.setup_task(task.data))  # what verifiers hands over
    refused = ToolCall(id="c0", name="search", arguments=json.dumps({"q": "misspelt"}))
    nodes = [
        MessageNode(message=UserMessage(content=str(task.data.prompt))),
        MessageNode(parent=0, message=AssistantMessage(tool_calls=[refused]), sampled=True),
        MessageNode(parent=1, message=ToolMessage(tool_call_id="c0", content="Input validation error: 'query'")),
        MessageNode(parent=2, message=AssistantMessage(content="<answer> x </answer>"), sampled=True),
    ]
    trace = vf.Trace(
        task=TraceTask(type="SearchQATask", data=task.data), agent=AgentInfo(config=AgentConfig()), nodes=nodes
    )
    asyncio.run(task.score(trace))
    assert trace.metrics["num_actions"] == 1.0 and trace.metrics["num_invalid"] == 0.0
    assert trace.metrics["tool_outputs_replayed"] == 1.0


def test_tools_are_the_vocabularys_and_open_only_where_the_protocol_has_it() -> None:
    mcp_server = pytest.importorskip("mcp.server.mcpserver")

    def registered(protocol: str) -> dict[str, Any]:
        server = mcp_server.MCPServer("t")
        SearchQAToolset(SearchQAToolsetConfig(options=SearchQAOptions(protocol=protocol))).register(server)
        return {tool.name: tool for tool in asyncio.run(server.list_tools())}

    plain, with_open = registered("tool-call"), registered("tool-call-open")
    assert sorted(plain) == ["search"] and sorted(with_open) == ["open", "search"]
    for tool in (SEARCH, OPEN):
        declared = with_open[tool.name]
        assert declared.description == tool.description
        (argument,) = tool.declared(without=("k",))
        assert declared.input_schema["properties"][argument.name]["description"] == argument.description


def test_options_refuse_a_tag_protocol_and_bad_values() -> None:
    with pytest.raises(ValueError, match="protocol"):
        SearchQAOptions(protocol="search-r1")
    with pytest.raises(ValueError, match="topk"):
        SearchQAOptions(topk=0)
    toolset = SearchQAToolset(SearchQAToolsetConfig())
    with pytest.raises(RuntimeError, match="setup_task"):
        asyncio.run(toolset.search("q"))
