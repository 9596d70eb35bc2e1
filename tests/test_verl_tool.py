"""searchenv's veRL tool and tool agent loop, through veRL 0.9.1's own code on CPU.

veRL's tool-config loader builds the tool; its lifecycle is called as ``ToolAgentLoop._call_tool`` calls it;
its ``HermesToolParser`` reads our protocol's calls; and ``SearchToolAgentLoop`` (veRL's ``ToolAgentLoop``, built
from veRL's agent-loop registry as its worker does) plays whole episodes against a scripted generation server
(veRL's rollout servers need a GPU) — tool turns rendered by veRL's continuous-token builder, masks by veRL.
"""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("verl.experimental.agent_loop")

import hydra
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
from verl.experimental.agent_loop.tool_agent_loop import AgentData
from verl.experimental.agent_loop.tool_parser import HermesToolParser
from verl.tools.tool_registry import initialize_tools_from_config
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from searchenv.adapters.rows import episode_env, row_example
from searchenv.adapters.tool_steps import BUDGET_OVER, EPISODE_OVER, call_action
from searchenv.adapters.verl.tool import AGENT_NAME, TOOL_CONFIG, SearchTool, SearchToolAgentLoop
from searchenv.protocol.tool_calls import SEARCH_TOOL

ENV = {"max_turns": 3, "max_information_words": 30}
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def tools_from_config(tmp_path, **env):
    """The shipped tool YAML with ``env`` overrides, loaded by veRL's own loader."""
    config = OmegaConf.load(TOOL_CONFIG)
    config.tools[0].config.env = OmegaConf.merge(config.tools[0].config.env, env)
    path = tmp_path / "tools.yaml"
    OmegaConf.save(config, path)
    return initialize_tools_from_config(str(path))


def world_row():
    from searchenv.components import load_examples

    example = load_examples("world", "train")[0]
    return example, {
        "raw_prompt": [{"role": "user", "content": example.question}],
        "reward_model": {"ground_truth": {"target": list(example.golden_answers)}},
        "extra_info": {"question": example.question},
        "data_source": "world",
    }


def replayed_body(row, arguments):
    """The information body a fresh environment shows for the same search call."""
    example = row_example(row["reward_model"]["ground_truth"], row["extra_info"])
    env, _ = episode_env(example, {"protocol": "tool-call-message", **ENV})
    return env.protocol.information_body(env.step(call_action("search", arguments))[0])


def agent_data(question):
    return AgentData([{"role": "user", "content": question}], None, None, None, None, {}, "req", {})


async def call(tool, data, arguments, create_kwargs):
    """What ToolAgentLoop._call_tool does for a BaseTool: create, execute with agent_data, release."""
    instance_id, _ = await tool.create(create_kwargs=create_kwargs)
    try:
        return await tool.execute(instance_id, arguments, agent_data=data), await tool.calc_reward(instance_id)
    finally:
        await tool.release(instance_id)


def test_shipped_config_loads_through_verls_loader(tmp_path):
    [tool] = tools_from_config(tmp_path, **ENV)
    assert isinstance(tool, SearchTool) and tool.name == "search"
    assert tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True) == SEARCH_TOOL
    assert TOOL_CONFIG.is_file()


def test_tag_protocol_and_answer_tool_are_refused(tmp_path):
    with pytest.raises(ValueError, match="tag protocol"):
        tools_from_config(tmp_path, protocol="search-r1")
    with pytest.raises(ValueError, match="answer"):
        tools_from_config(tmp_path, protocol="tool-call-answer-tool")


def test_tool_lifecycle_steps_the_episode_like_the_environment(tmp_path):
    [tool] = tools_from_config(tmp_path, **ENV)
    example, row = world_row()
    create = {"ground_truth": row["reward_model"]["ground_truth"], "question": example.question}
    data = agent_data(example.question)
    queries = [{"query": example.question}, {"query": 5}, {"query": "founded"}, {"query": "again"}]

    async def play():
        return [await call(tool, data, q, create) for q in queries]

    results = asyncio.run(play())
    texts = [response.text for (response, _, _), _ in results]
    # The same action in a fresh environment: the tool's text is the information block's body.
    assert texts[0] == replayed_body(row, queries[0]) and texts[0].startswith("Doc 1(Title:")
    assert texts[1].startswith("Error:") and "query" in texts[1]  # a non-string query: invalid action, no search
    assert texts[2] == BUDGET_OVER  # the third action is the last of B=3: not executed, episode truncated
    assert texts[3] == EPISODE_OVER
    episode = data.searchenv_episode.env.episode
    assert episode.num_searches == 1 and episode.num_invalid == 1 and episode.truncated
    assert [m["executed"] for (_, _, m), _ in results] == [True, False, False, False]
    assert results[-1][1] == episode.reward == 0.0


def test_hermes_parser_reads_our_protocols_call(qwen_tokenizer):
    text = call_action("search", {"query": "Brosara « founded »"}) + "<|im_end|>"
    ids = qwen_tokenizer.encode(text, add_special_tokens=False)
    content, calls = asyncio.run(HermesToolParser(qwen_tokenizer).extract_tool_calls(ids))
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("search", {"query": "Brosara « founded »"})]
    assert content == "<|im_end|>"


class ScriptedServer:
    """Answers each generate call with the next scripted text (veRL's rollout servers need a GPU)."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts = tokenizer, list(texts)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        ids = self.tokenizer.encode(self.texts.pop(0), add_special_tokens=False)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


def run_loop(tools, tokenizer, texts, row, agent_name=AGENT_NAME, max_tool_response_length=4096, max_assistant_turns=4):
    trainer = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": 1024,
                    "response_length": 1024,
                    "full_determinism": False,
                    "multi_turn": {
                        "max_user_turns": 4,
                        "max_assistant_turns": max_assistant_turns,
                        "max_parallel_calls": 1,
                        "max_tool_response_length": max_tool_response_length,
                        "tool_response_truncate_side": "middle",
                        "format": "hermes",
                    },
                }
            },
            "data": {"apply_chat_template_kwargs": {}},
        }
    )

    async def play():
        loop = hydra.utils.instantiate(
            config=_agent_loop_registry[agent_name],
            trainer_config=DictConfigWrap(trainer),
            server_manager=ScriptedServer(tokenizer, texts),
            tokenizer=tokenizer,
            processor=None,
            hf_model_type=None,
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(trainer.data),
            tools=ToolListWrap(tools),
        )
        return await loop.run(dict(SAMPLING), **row), loop

    return asyncio.run(play())


@pytest.mark.parametrize("answer_right, max_assistant_turns", [(True, 4), (False, 4), (True, 2)])
def test_tool_agent_loop_plays_the_episode_and_scores_it(tmp_path, qwen_tokenizer, answer_right, max_assistant_turns):
    """With max_assistant_turns=2 veRL stops before parsing the answer turn; the episode still reads it."""
    [tool] = tools_from_config(tmp_path, **ENV)
    example, row = world_row()
    answer = example.golden_answers[0] if answer_right else "certainly not this"
    texts = [call_action("search", {"query": example.question}) + "<|im_end|>", f"{answer}<|im_end|>"]
    output, loop = run_loop([tool], qwen_tokenizer, texts, row, max_assistant_turns=max_assistant_turns)
    assert isinstance(loop, SearchToolAgentLoop)

    episode = loop._trajectory.env.episode
    assert episode.terminated and episode.prediction == answer and episode.num_searches == 1
    assert output.reward_score == episode.reward == (1.0 if answer_right else 0.0)
    assert output.extra_fields["reward_extra_info"]["num_searches"] == 1.0
    # veRL's masks: the tool turn veRL rendered is environment text (0) and holds our information body.
    env_ids = [t for t, m in zip(output.response_ids, output.response_mask) if m == 0]
    model_ids = [t for t, m in zip(output.response_ids, output.response_mask) if m == 1]
    body = episode.protocol.information_body(episode.turns[0].observation)
    env_text = qwen_tokenizer.decode(env_ids)
    assert f"<tool_response>\n{body}\n</tool_response>" in env_text and env_text.count("<tool_response>") == 1
    assert answer in qwen_tokenizer.decode(model_ids) and "<tool_response>" not in qwen_tokenizer.decode(model_ids)


def test_loop_without_a_tool_call_still_scores_and_refuses_a_missing_tool(tmp_path, qwen_tokenizer):
    [tool] = tools_from_config(tmp_path, **ENV)
    example, row = world_row()
    output, loop = run_loop([tool], qwen_tokenizer, [f"{example.golden_answers[0]}<|im_end|>"], row)
    assert output.reward_score == 1.0 and loop._trajectory.env.episode.num_searches == 0
    with pytest.raises(ValueError, match="SearchTool"):
        run_loop([], qwen_tokenizer, ["x<|im_end|>"], row)
    search = call_action("search", {"query": example.question}) + "<|im_end|>"
    with pytest.raises(ValueError, match="max_tool_response_length=50"):  # veRL's own cut would be silent
        run_loop([tool], qwen_tokenizer, [search, "x<|im_end|>"], row, max_tool_response_length=50)


def test_veRLs_plain_tool_agent_loop_uses_the_tool_by_the_same_rules(tmp_path, qwen_tokenizer):
    [tool] = tools_from_config(tmp_path, **ENV)
    example, row = world_row()
    create = {"ground_truth": row["reward_model"]["ground_truth"], "question": example.question}
    row = {**row, "tools_kwargs": {"search": {"create_kwargs": create}}}
    texts = [call_action("search", {"query": example.question}) + "<|im_end|>", "done<|im_end|>"]
    output, _ = run_loop([tool], qwen_tokenizer, texts, row, agent_name="tool_agent")
    body = replayed_body(row, {"query": example.question})
    env_ids = [t for t, m in zip(output.response_ids, output.response_mask) if m == 0]
    assert f"<tool_response>\n{body}\n</tool_response>" in qwen_tokenizer.decode(env_ids)
    assert output.reward_score is None  # veRL's reward workers score this loop's text, not the episode
