"""The veRL adapter with the real verl package: agent loop, reward function, data script and launch configs.

veRL's rollout servers need a GPU, so the agent loop talks to local stand-ins implementing the server
manager's ``generate(request_id, *, prompt_ids, sampling_params) -> TokenOutput``: a scripted one (exact
control over the sampled text) and SmolLM2-135M through transformers (a real model's token ids).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

pytest.importorskip("verl.experimental.agent_loop")

import hydra
import numpy as np
import pyarrow.parquet as pq
import ray
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopOutput,
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.workers.rollout.replica import TokenOutput

import searchenv.adapters
from searchenv.adapters.rows import AGENT_NAME, PAPER_EVAL, episode_env, eval_split, row_example
from searchenv.adapters.verl import agent_loop as verl_agent_loop
from searchenv.adapters.verl.agent_loop import SearchEnvAgentLoop, compute_score, env_spans, merge_server_fields
from searchenv.adapters.verl.launch import LAUNCH_FILES, launch_file
from searchenv.cli.verl_data import add_parser
from searchenv.cli.verl_data import main as verl_data_main
from searchenv.protocol import PROTOCOLS

REPO = Path(__file__).resolve().parents[1]
AGENT_YAML = REPO / "adapters" / "verl" / "configs" / "agent_loop.yaml"
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


class ScriptedServer:
    """Answers each generate call with the next scripted text, tokenized, and records every request."""

    def __init__(self, tokenizer, texts, logprobs=True):
        self.tokenizer, self.texts, self.logprobs, self.calls = tokenizer, list(texts), logprobs, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), "params": dict(sampling_params)})
        ids = self.tokenizer.encode(self.texts.pop(0), add_special_tokens=False)
        # veRL's server client reports an empty list when log-probabilities were not requested.
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids) if self.logprobs else [])


class HFServer:
    """A real causal LM behind the server-manager interface (engine-level stop strings, sampled logprobs)."""

    def __init__(self, generator):
        self.generator, self.calls = generator, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        stops, cap = sampling_params.get("stop", []), sampling_params["max_tokens"]
        [turn] = await asyncio.to_thread(self.generator.generate, [list(prompt_ids)], stops, [cap])
        self.calls.append({"prompt_ids": list(prompt_ids), "token_ids": list(turn.token_ids)})
        return TokenOutput(token_ids=turn.token_ids, log_probs=turn.logprobs, stop_reason="completed")


def make_loop(server, tokenizer, *, env, response_length=2048, entry=None, **loop_options) -> SearchEnvAgentLoop:
    """Instantiate the agent loop from adapters/verl/configs/agent_loop.yaml the way veRL's worker does.

    Must be called inside a running event loop (veRL builds agent loops inside its worker's loop)."""
    trainer = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": 1024, "response_length": response_length}},
            "data": {"apply_chat_template_kwargs": {}},
        }
    )
    if entry is None:
        entry = OmegaConf.load(AGENT_YAML)[0]
        entry.env = OmegaConf.merge(entry.env, env)
    for key, value in loop_options.items():
        entry[key] = value
    loop = hydra.utils.instantiate(
        config=entry,
        trainer_config=DictConfigWrap(trainer),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(trainer.data),
        tools=ToolListWrap([]),
    )
    assert isinstance(loop, SearchEnvAgentLoop)
    return loop


def run_loop(server, tokenizer, row, **options) -> AgentLoopOutput:
    async def play():
        return await make_loop(server, tokenizer, **options).run(dict(SAMPLING), **row)

    return asyncio.run(play())


def runs(output: AgentLoopOutput) -> list[tuple[int, list[int]]]:
    """The response split into maximal runs of equal mask: [(mask, ids), ...]."""
    out: list[tuple[int, list[int]]] = []
    for token, mask in zip(output.response_ids, output.response_mask):
        if out and out[-1][0] == mask:
            out[-1][1].append(token)
        else:
            out.append((mask, [token]))
    return out


def replay_observations(row, env_options, actions):
    """Play the same actions in a fresh environment: the texts the environment inserted, turn by turn."""
    example = row_example(row["reward_model"]["ground_truth"], row.get("extra_info"), row.get("raw_prompt"))
    env, _ = episode_env(example, {"retriever": "bm25", **env_options})
    return [env.step(action)[0] for action in actions]


@pytest.fixture(scope="module")
def hotpot_options(shared_data):
    return {"retriever": "bm25", "corpus": str(shared_data / "corpus" / "hotpotqa_hipporag.jsonl")}


@pytest.fixture(scope="module")
def hotpot_rows(tmp_path_factory, shared_data, qwen_tokenizer):
    """HotpotQA rows written by the data script and read back through veRL's own dataset and collate_fn."""
    out = tmp_path_factory.mktemp("verl_data")
    verl_data_main(
        ["--dataset", str(shared_data / "qa" / "hotpotqa_100.jsonl"), "--split", "train", "--output", str(out)]
    )
    config = OmegaConf.create(
        {"cache_dir": str(out / "cache"), "return_raw_chat": True, "filter_overlong_prompts": False}
    )
    dataset = RLHFDataset(str(out / "train.parquet"), qwen_tokenizer, config)
    batch = collate_fn([dataset[i] for i in range(4)])
    return [{k: v[i] for k, v in batch.items() if not hasattr(v, "dim")} for i in range(4)]


def test_data_script_writes_search_r1_rows(tmp_path):
    paths = verl_data_main(["--dataset", "world", "--output", str(tmp_path), "--limit", "3"])
    assert [p.name for p in paths] == ["train.parquet", "test.parquet"]
    row = pq.read_table(paths[0]).to_pylist()[0]
    assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info", "agent_name"}
    assert row["agent_name"] == AGENT_NAME and row["reward_model"]["style"] == "rule"
    assert isinstance(row["reward_model"]["ground_truth"]["target"], list)
    assert row["extra_info"]["split"] == "train" and row["extra_info"]["index"] == 0
    assert row["prompt"][0]["role"] == "user" and row["extra_info"]["question"] in row["prompt"][0]["content"]


def test_cli_subcommand_writes_skyrl_rows(tmp_path, shared_data):
    commands = argparse.ArgumentParser().add_subparsers(dest="command")
    add_parser(commands)
    qa = str(shared_data / "qa" / "nq_test_17.jsonl")
    args = commands.choices["verl-data"].parse_args(["--dataset", qa, "--trainer", "skyrl", "--output", str(tmp_path)])
    assert args.handler(args) == 0
    rows = pq.read_table(tmp_path / "test.parquet").to_pylist()
    assert len(rows) == 17 and rows[0]["env_class"] == "searchenv" and "agent_name" not in rows[0]
    assert rows[0]["reward_spec"]["ground_truth"] == rows[0]["reward_model"]["ground_truth"]
    with pytest.raises(SystemExit):
        verl_data_main(["--dataset", str(tmp_path / "missing.jsonl"), "--output", str(tmp_path)])


def test_scripted_episode_masks_tokens_and_reward(hotpot_rows, hotpot_options, qwen_tokenizer):
    row = hotpot_rows[0]  # "If Gallu is a demon Lilu is what?" -> "a spirit"
    texts = [
        "<think>Look up Lilu.</think>\n<search>Lilu mythology</search> text the engine ran on",
        "I am not sure yet.",
        "<think>Found it.</think>\n<answer>a spirit</answer>",
    ]
    server = ScriptedServer(qwen_tokenizer, texts)
    output = run_loop(server, qwen_tokenizer, row, env=hotpot_options)

    assert len(output.response_mask) == len(output.response_ids) == len(output.response_logprobs)
    assert output.reward_score == 1.0 and output.num_turns == 1 + 5
    model_runs = [ids for mask, ids in runs(output) if mask == 1]
    env_runs = [ids for mask, ids in runs(output) if mask == 0]
    kept = [texts[0][: texts[0].index("</search>") + len("</search>")], texts[1], texts[2]]
    # Model tokens are the sampled ids, cut where the environment cut the text; logprobs follow them.
    assert [qwen_tokenizer.decode(ids) for ids in model_runs] == kept
    assert all(lp == -0.25 for lp, m in zip(output.response_logprobs, output.response_mask) if m == 1)
    assert all(lp == 0.0 for lp, m in zip(output.response_logprobs, output.response_mask) if m == 0)
    # Environment tokens are exactly the tokenizer's ids of the text the environment inserted.
    observations = replay_observations(row, hotpot_options, kept)
    assert env_runs == [qwen_tokenizer.encode(o, add_special_tokens=False) for o in observations if o]
    assert observations[0].startswith("\n\n<information>") and "invalid" in observations[1]

    # Token-in/token-out: each call continues exactly the previous context; stop strings and budgets are sent.
    assert len({c["request_id"] for c in server.calls}) == 1
    for before, after in zip(server.calls, server.calls[1:]):
        assert after["prompt_ids"][: len(before["prompt_ids"])] == before["prompt_ids"]
    assert server.calls[-1]["prompt_ids"] == output.prompt_ids + output.response_ids[: -len(model_runs[-1])]
    assert all(c["params"]["stop"] == ["</search>", "</answer>"] for c in server.calls)
    assert server.calls[0]["params"]["max_tokens"] == 500 and server.calls[0]["params"]["temperature"] == 1.0
    info = output.extra_fields["reward_extra_info"]
    assert info["num_searches"] == 1.0 and info["num_invalid"] == 1.0 and info["reward/em"] == 1.0
    assert info["verl/model_tokens"] == sum(output.response_mask) and info["end_reason/answer"] == 1.0


def test_response_budget_cuts_the_episode_and_still_scores_it(hotpot_rows, hotpot_options, qwen_tokenizer):
    server = ScriptedServer(qwen_tokenizer, ["<search>Christopher Nolan director</search>"] * 4)
    output = run_loop(server, qwen_tokenizer, hotpot_rows[1], env=hotpot_options, response_length=200)
    assert len(output.response_ids) == len(output.response_mask) == 200
    assert output.reward_score == 0.0
    info = output.extra_fields["reward_extra_info"]
    assert info["end_reason/context_limit"] == 1.0 and info["end_reason/answer"] == 0.0 and "reward/em" in info
    # The first information block alone overflows the 200 tokens: it is cut, and no second turn is sampled.
    assert len(server.calls) == 1 and output.response_mask[-1] == 0


def test_concurrent_episodes_share_one_retriever(hotpot_rows, hotpot_options, qwen_tokenizer):
    """veRL runs every sample of a batch as a coroutine on one event loop; the first ones build the index together."""
    options = {**hotpot_options, "topk": 2}  # a config no other test used: its retriever is built here

    async def batch():
        loops = []
        for row in hotpot_rows:
            gold = row["reward_model"]["ground_truth"]["target"][0]
            texts = [f"<search>{row['extra_info']['question']}</search>", f"<answer>{gold}</answer>"]
            loops.append(make_loop(ScriptedServer(qwen_tokenizer, texts), qwen_tokenizer, env=options))
        return await asyncio.gather(*(loop.run(dict(SAMPLING), **row) for loop, row in zip(loops, hotpot_rows)))

    outputs = asyncio.run(batch())
    assert [o.reward_score for o in outputs] == [1.0] * len(hotpot_rows)
    assert all(o.extra_fields["reward_extra_info"]["num_searches"] == 1.0 for o in outputs)
    assert len({tuple(o.prompt_ids) for o in outputs}) == len(hotpot_rows)


def test_failed_search_is_observed_and_the_episode_goes_on(hotpot_rows, qwen_tokenizer):
    # a service that died after the environment was built (a dead URL at build time fails at once, with the fix)
    options = {"retries": 0, "timeout": 2.0, "check_on_start": False}
    dead = {"retriever": "http://127.0.0.1:9", "retriever_options": options}
    texts = ["<search>Christopher Nolan</search>", "<answer>yes</answer>"]
    server = ScriptedServer(qwen_tokenizer, texts, logprobs=False)
    output = run_loop(server, qwen_tokenizer, hotpot_rows[1], env=dead)
    assert output.reward_score == 1.0 and output.response_logprobs is None
    inserted = qwen_tokenizer.decode([t for t, m in zip(output.response_ids, output.response_mask) if m == 0])
    assert inserted == PROTOCOLS["search-r1"].format_error()  # the fixed text: no URL reaches the policy
    assert output.extra_fields["reward_extra_info"]["num_searches"] == 0.0


def test_bare_question_parquet_gets_the_protocol_prompt(shared_data, hotpot_options, qwen_tokenizer):
    """musique_dev_searchr1.parquet has a bare question as prompt and a plain-string ground truth."""
    row = pq.read_table(shared_data / "parquet" / "musique_dev_searchr1.parquet").slice(0, 1).to_pylist()[0]
    row["raw_prompt"] = row.pop("prompt")
    gold = row["reward_model"]["ground_truth"]
    assert isinstance(gold, str)
    server = ScriptedServer(qwen_tokenizer, [f"<answer>{gold}</answer>"])
    output = run_loop(server, qwen_tokenizer, row, env=hotpot_options)
    assert output.reward_score == 1.0
    prompt_text = qwen_tokenizer.decode(output.prompt_ids)
    assert "<search>" in prompt_text and row["extra_info"]["question"] in prompt_text


def test_real_model_rollout_keeps_masks_exact(hotpot_rows, hotpot_options):
    from searchenv.rollout import HFGenerator, SamplingConfig, load_policy

    model, tokenizer = load_policy("smollm2-135m")
    server = HFServer(HFGenerator(model, tokenizer, SamplingConfig(temperature=0.0)))
    row = hotpot_rows[2]
    output = run_loop(server, tokenizer, row, env={**hotpot_options, "max_turns": 2}, max_action_tokens=24)

    assert len(output.response_ids) == len(output.response_mask) == len(output.response_logprobs)
    assert 0.0 <= output.reward_score <= 1.0 and len(server.calls) <= 2
    model_runs = [ids for mask, ids in runs(output) if mask == 1]
    env_runs = [ids for mask, ids in runs(output) if mask == 0]
    # Every model run is (a prefix of) what the model sampled in that turn, never re-tokenized text.
    assert len(model_runs) == len(server.calls) and len(env_runs) == len(server.calls) - 1
    for ids, call in zip(model_runs, server.calls):
        assert ids == call["token_ids"][: len(ids)]
    actions = [tokenizer.decode(ids, skip_special_tokens=True) for ids in model_runs]
    observations = [o for o in replay_observations(row, {**hotpot_options, "max_turns": 2}, actions) if o]
    assert env_runs == [tokenizer.encode(o, add_special_tokens=False) for o in observations]
    assert all(lp <= 0.0 for lp in output.response_logprobs)


def test_compute_score_reads_search_r1_strings():
    gold = {"target": ["Paris", "City of Paris"]}
    response = (
        "<think>Find the capital.</think>\n<search>capital of France</search>\n\n<information>Doc 1(Title: France) "
        "Its capital is Paris.\n</information>\n\n<think>Done.</think>\n<answer> paris </answer>"
    )
    scored = compute_score("nq", response, gold, {"question": "What is the capital of France?"})
    assert scored["score"] == scored["reward"] == 1.0 and scored["reward/em"] == 1.0
    # An answer that only appears inside the inserted information block is not the model's answer.
    planted = "<search>x</search>\n\n<information><answer>Paris</answer>\n</information>\n\n"
    assert compute_score("nq", planted, gold)["score"] == 0.0
    assert compute_score("nq", "<answer>Lyon</answer>", gold)["score"] == 0.0
    assert compute_score("nq", "<answer>City of Paris, France</answer>", gold, reward="f1")["score"] > 0.5


def test_compute_score_on_musique_parquet_with_string_ground_truth(shared_data):
    rows = pq.read_table(shared_data / "parquet" / "musique_dev_searchr1.parquet").slice(0, 25).to_pylist()
    for row in rows:
        gold, extra = row["reward_model"]["ground_truth"], row["extra_info"]
        right = compute_score(row["data_source"], f"<think>ok</think>\n<answer>{gold}</answer>", gold, extra)
        wrong = compute_score(row["data_source"], "<think>ok</think>\n<answer>Atlantis</answer>", gold, extra)
        assert right["score"] == 1.0 and wrong["score"] == 0.0
    with pytest.raises(ValueError, match="ground_truth"):
        compute_score("x", "<answer>a</answer>", {"answers": ["a"]})


def test_custom_reward_function_loads_through_verl(tmp_path):
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://searchenv.adapters.verl.agent_loop",
                    "name": "compute_score",
                    "reward_kwargs": {"reward": "format"},
                }
            }
        }
    )
    score = get_custom_reward_fn(config)
    result = score(data_source="nq", solution_str="<think>x</think>\n<answer>Paris</answer>", ground_truth="Paris")
    assert result["score"] == 1.0 and result["reward/format_ok"] == 1.0


# -- compute_score on our agent loop's rollouts, through veRL's reward loop ---------------------------------------
def reward_loop_score(config, output: AgentLoopOutput, row: dict) -> dict:
    """Score one agent-loop output with veRL's RewardLoopWorker (its reward manager and custom reward function),
    handing it the batch AgentLoopWorker._compute_score builds for a trajectory veRL scores: the row's columns and
    the output's extra_fields as ``tool_extra_fields``."""
    import torch
    from verl import DataProto
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    prompts = torch.tensor([output.prompt_ids], dtype=torch.int64)
    responses = torch.tensor([output.response_ids], dtype=torch.int64)
    input_ids = torch.cat([prompts, responses], dim=1)
    tensors = {"prompts": prompts, "responses": responses, "input_ids": input_ids}
    non_tensors = {
        **{key: np.array([value]) for key, value in row.items()},
        "__num_turns__": np.array([output.num_turns]),
        "tool_extra_fields": np.array([output.extra_fields], dtype=object),
    }
    data = DataProto.from_dict({**tensors, "attention_mask": torch.ones_like(input_ids)}, non_tensors=non_tensors)

    async def score():  # the worker binds the running event loop when it is built, as in its Ray actor
        return await RewardLoopWorker(config, None).compute_score(data)

    return asyncio.run(score())


@pytest.fixture(scope="module")
def reward_config(qwen_model_dir):
    """veRL's composed trainer config as the launch script writes it, for a given reward spec."""

    def build(reward: str):
        config = compose_verl(launcher_overrides("grpo", "smoke", MODEL=str(qwen_model_dir), REWARD=reward))
        OmegaConf.resolve(config)
        return config

    return build


SEARCH_THEN_WRONG = [
    "<think>Look up Lilu.</think>\n<search>Lilu mythology</search>",
    "<think>Sure.</think>\n<answer>a demon</answer>",
]


@pytest.mark.parametrize("reward", ["format-retrieval", "r1-searcher-stage1"])
def test_reward_loop_credits_the_search_of_an_agent_loop_rollout(
    reward, reward_config, hotpot_rows, hotpot_options, qwen_tokenizer
):
    """A wrong answer after a search whose passages hold the gold ("a spirit"): format-retrieval pays λr, and
    r1-searcher-stage1 its search term, through veRL's reward worker, as the environment itself paid."""
    row = hotpot_rows[0]
    output = run_loop(
        ScriptedServer(qwen_tokenizer, SEARCH_THEN_WRONG), qwen_tokenizer, row, env={**hotpot_options, "reward": reward}
    )
    episode = output.extra_fields["reward_extra_info"]
    assert episode["reward/retrieval_hit"] == 1.0 and episode["reward/em"] == 0.0  # what the episode earned

    result = reward_loop_score(reward_config(reward), output, row)
    info = result["reward_extra_info"]
    assert info["num_searches"] == 1.0 and info["reward/retrieval_hit"] == 1.0
    assert result["reward_score"] == pytest.approx(output.reward_score)
    expected = 0.2 + 0.1 if reward == "format-retrieval" else 0.5 + 0.5  # format (+ λr) / search + format
    assert result["reward_score"] == pytest.approx(expected)


def test_env_spans_mark_the_inserted_text_in_verls_decoding(hotpot_rows, hotpot_options, qwen_tokenizer):
    texts = ["<search>Lilu mythology</search>", "no tag here", "<answer>a demon</answer>"]
    output = run_loop(ScriptedServer(qwen_tokenizer, texts), qwen_tokenizer, hotpot_rows[0], env=hotpot_options)
    spans = output.extra_fields["env_spans"]
    decoded = qwen_tokenizer.decode(output.response_ids, skip_special_tokens=True)  # as veRL's reward managers do
    observations = replay_observations(hotpot_rows[0], hotpot_options, texts)
    assert [decoded[start:end] for start, end in spans] == [o for o in observations if o]
    # A response cut inside an information block: the span ends where the response ends.
    cut = len(output.response_ids) - len(qwen_tokenizer.encode(texts[-1])) - 3
    mask = output.response_mask[:cut]
    assert mask[-1] == 0
    cut_spans = env_spans(qwen_tokenizer, output.response_ids[:cut], mask)
    assert cut_spans[:-1] == spans[:-1] and cut_spans[-1][1] == len(
        qwen_tokenizer.decode(output.response_ids[:cut], skip_special_tokens=True)
    )


def test_env_spans_are_withheld_when_decoding_moves_a_boundary():
    """A tokenizer that cleans up spaces decodes "Hi " + ". x" as "Hi. x": the prefix "Hi " is not a prefix of the
    whole, so any span would point one character off; no spans are given (compute_score then warns)."""
    from transformers import AutoTokenizer

    from searchenv.assets import qwen_tokenizer_dir

    model, env = "Hi ", ". x"
    for cleanup, expected in ((False, [[3, 6]]), (True, None)):
        tokenizer = AutoTokenizer.from_pretrained(
            str(qwen_tokenizer_dir()),
            clean_up_tokenization_spaces=cleanup,  # transformers ignores it for BPE unless forced:
            clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output=cleanup,
        )
        model_ids, env_ids = (tokenizer.encode(t, add_special_tokens=False) for t in (model, env))
        mask = [1] * len(model_ids) + [0] * len(env_ids)
        assert env_spans(tokenizer, model_ids + env_ids, mask) == expected


def test_trust_transcript_reaches_compute_score_through_reward_kwargs():
    from verl.trainer.ppo.reward import get_custom_reward_fn

    response = (
        "<think>x</think>\n<search>capital of France</search>\n\n<information>Doc 1(Title: France) Its capital is "
        "Paris.\n</information>\n\n<think>y</think>\n<answer>Lyon</answer>"
    )

    def score_fn(**reward_kwargs):
        path = "pkg://searchenv.adapters.verl"
        function = {"path": path, "name": "compute_score", "reward_kwargs": reward_kwargs}
        return get_custom_reward_fn(OmegaConf.create({"reward": {"custom_reward_function": function}}))

    trusted = score_fn(reward="format-retrieval", trust_transcript=True)
    assert trusted(data_source="nq", solution_str=response, ground_truth="Paris", extra_info={})[
        "score"
    ] == pytest.approx(0.3)
    misspelt = score_fn(reward="format-retrieval", trust_transcrit=True)
    with pytest.raises(TypeError, match=r"\['trust_transcrit'\].*trust_transcript"):
        misspelt(data_source="nq", solution_str=response, ground_truth="Paris", extra_info={})
    # every argument veRL's reward managers pass is accepted (the reward-model ones only with a reward model)
    scored = trusted(
        data_source="nq",
        solution_str=response,
        ground_truth="Paris",
        extra_info={"num_turns": 3, "rollout_reward_scores": {}},
        reward_router_address="127.0.0.1:1",
        reward_model_tokenizer=None,
    )
    assert scored["reward/retrieval_hit"] == 1.0


def test_retrieval_reward_without_spans_or_trust_warns_once():
    verl_agent_loop._warn_uncredited.cache_clear()  # once per process: start this process's count here
    response = "<think>x</think>\n<search>q</search>\n\n<information>Paris</information>\n\n<answer>Lyon</answer>"
    with pytest.warns(RuntimeWarning, match="trust_transcript") as caught:
        for _ in range(3):
            assert compute_score("nq", response, "Paris", reward="r1-searcher-stage1")["num_searches"] == 0.0
    assert len([w for w in caught if "env_spans" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # with trust, or for a spec that pays no search, nothing is said
        compute_score("nq", response, "Paris", reward="format-retrieval", trust_transcript=True)
        compute_score("nq", response, "Paris", reward="em")


def test_server_fields_merge_across_turns_as_verls_tool_loop_does():
    fields: dict = {}
    first = {"global_steps": 3, "min_global_steps": 3, "max_global_steps": 3, "spec_num_draft_tokens": 2}
    merge_server_fields(fields, first)
    merge_server_fields(fields, {**first, "global_steps": 5, "min_global_steps": 5, "max_global_steps": 5})
    merge_server_fields(fields, {"max_global_steps": None, "kv_transfer_params": {"a": 1}})
    assert fields == {
        "global_steps": 3,
        "min_global_steps": 3,
        "max_global_steps": 5,
        "spec_num_draft_tokens": 4,
        "kv_transfer_params": {"a": 1},  # a key only a later turn reported is kept, not dropped
    }


def test_agent_loop_output_carries_every_server_field(hotpot_rows, hotpot_options, qwen_tokenizer):
    class VersionedServer(ScriptedServer):
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            output = await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params)
            step = len(self.calls)
            output.extra_fields = {"global_steps": step, "min_global_steps": step, "max_global_steps": step, "new": 1}
            return output

    texts = ["<search>Lilu</search>", "<answer>a spirit</answer>"]
    output = run_loop(VersionedServer(qwen_tokenizer, texts), qwen_tokenizer, hotpot_rows[0], env=hotpot_options)
    fields = output.extra_fields
    assert (fields["min_global_steps"], fields["max_global_steps"], fields["new"]) == (1, 2, 1)
    assert output.reward_score == 1.0 == fields["reward_extra_info"]["reward/em"]


@pytest.mark.slow
def test_yaml_entry_survives_the_adapter_import_in_a_fresh_worker():
    """veRL's AgentLoopWorker loads the YAML into its registry and imports the adapter only when hydra builds the
    first loop; the import must not replace the YAML entry (its env options) for the episodes after it."""
    script = (
        "import hydra\n"
        "from omegaconf import OmegaConf\n"
        "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry\n"
        f"for entry in OmegaConf.load({str(AGENT_YAML)!r}):\n"
        "    _agent_loop_registry[entry.name] = entry\n"
        "hydra.utils.get_class(_agent_loop_registry['searchenv_agent']._target_)\n"
        "print(_agent_loop_registry['searchenv_agent'].env.retriever)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "http://127.0.0.1:8000"


def test_agent_loop_without_env_options_is_an_error(qwen_tokenizer):
    bare = OmegaConf.create({"_target_": "searchenv.adapters.verl.agent_loop.SearchEnvAgentLoop"})

    async def build():
        return make_loop(ScriptedServer(qwen_tokenizer, []), qwen_tokenizer, env={}, entry=bare)

    with pytest.raises(hydra.errors.InstantiationException, match="agent_loop_config_path"):
        asyncio.run(build())


# -- launch files ---------------------------------------------------------------------------------------------------
def launcher_overrides(*args: str, **env: str) -> list[str]:
    """The hydra overrides the packaged verl_train.sh passes to veRL (PRINT_ARGS=1 starts nothing)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("WANDB_API_KEY", "WANDB", "ATTN")}
    printed = subprocess.run(
        ["bash", str(launch_file("verl_train.sh")), *args],
        env={**clean, "PRINT_ARGS": "1", **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in printed.split("\n") if line]


def compose_verl(overrides: list[str]):
    """veRL's own ppo_trainer config composed with ``overrides`` the way ``python -m verl.trainer.main_ppo`` does."""
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


@pytest.fixture(scope="module")
def qwen_model_dir(tmp_path_factory) -> Path:
    """A model folder veRL's HFModelConfig can read offline: the real Qwen2.5 tokenizer and a Qwen2 config.json.

    veRL's config checks and agent-loop workers read the tokenizer and config, never the weights."""
    from transformers import Qwen2Config

    from searchenv.assets import qwen_tokenizer_dir

    model_dir = tmp_path_factory.mktemp("qwen_config") / "model"
    shutil.copytree(qwen_tokenizer_dir(), model_dir)
    sizes = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 2}
    Qwen2Config(architectures=["Qwen2ForCausalLM"], **sizes).save_pretrained(model_dir)
    return model_dir


@pytest.mark.parametrize("algo", ["ppo", "grpo"])
@pytest.mark.parametrize("profile", ["smoke", "8xh100"])
def test_launch_script_composes_a_config_verl_accepts(algo, profile, qwen_model_dir):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    config = compose_verl(launcher_overrides(algo, profile, MODEL=str(qwen_model_dir)))
    # veRL's own pre-flight checks (main_ppo runs them before starting Ray) and its typed rollout config.
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    rollout = config.actor_rollout_ref.rollout
    assert rollout.agent.default_agent_loop == AGENT_NAME and rollout.skip_tokenizer_init is False
    assert config.reward.custom_reward_function.path == "pkg://searchenv.adapters.verl.agent_loop"
    assert config.actor_rollout_ref.actor.clip_ratio == 0.2 and config.algorithm.gamma == 1.0
    # flash-attn is not installed here: every model the trainer builds gets sdpa instead of veRL's default.
    assert config.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert list(config.trainer.logger) == ["console"]  # no WANDB_API_KEY in this environment
    if algo == "ppo":
        assert config.algorithm.adv_estimator == "gae" and config.algorithm.kl_ctrl.kl_coef == 0.001
        assert config.actor_rollout_ref.actor.optim.lr == 1e-6 and config.critic.optim.lr == 1e-5
        assert config.critic.model.override_config.attn_implementation == "sdpa"
    else:
        assert config.algorithm.adv_estimator == "grpo" and rollout.n == 5
        assert config.actor_rollout_ref.actor.optim.lr == 5e-7 and config.actor_rollout_ref.actor.kl_loss_coef == 0.001
    if profile == "8xh100":
        assert config.trainer.n_gpus_per_node == 8 and config.data.train_batch_size == 512
        assert config.actor_rollout_ref.actor.ppo_mini_batch_size == 256 and rollout.gpu_memory_utilization == 0.6
        assert config.trainer.save_freq == 100 and config.actor_rollout_ref.actor.fsdp_config.param_offload is True
    assert AGENT_NAME in _agent_loop_registry  # importing the adapter registered the loop under its name


def test_launch_script_defaults_and_switches():
    bare = launcher_overrides()  # the README's bare `bash adapters/verl/scripts/verl_train.sh`
    assert bare == launcher_overrides("grpo", "smoke")
    assert "data.train_files=runs/verl-grpo-smoke/data/train.parquet" in bare
    assert launcher_overrides("ppo", "paper") == launcher_overrides("ppo", "8xh100")
    extra = launcher_overrides("grpo", "smoke", "trainer.total_training_steps=7")
    assert extra[-1] == "trainer.total_training_steps=7"
    assert launcher_overrides("trainer.save_freq=3")[-1] == "trainer.save_freq=3"  # overrides without ALGO/PROFILE
    wandb = compose_verl(launcher_overrides(WANDB_API_KEY="set-by-test"))
    assert list(wandb.trainer.logger) == ["console", "wandb"]
    assert compose_verl(launcher_overrides(WANDB="1")).trainer.logger[-1] == "wandb"
    attn = compose_verl(launcher_overrides(ATTN="flash_attention_2"))
    assert attn.actor_rollout_ref.model.override_config.attn_implementation == "flash_attention_2"
    bad = subprocess.run(["bash", str(launch_file("verl_train.sh")), "grpo", "tiny"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown PROFILE 'tiny'" in bad.stderr


def test_searchenv_verl_subcommand_writes_and_runs_the_packaged_files(tmp_path, capfd):
    from searchenv.cli.main import main as cli_main

    assert cli_main(["verl", "files", str(tmp_path / "launch")]) == 0
    for name in LAUNCH_FILES:
        written = tmp_path / "launch" / name
        assert written.read_bytes() == launch_file(name).read_bytes()
    assert os.access(tmp_path / "launch" / "verl_train.sh", os.X_OK)
    assert launch_file("verl_train.sh").parent.parent == Path(searchenv.adapters.verl.__file__).parent
    capfd.readouterr()
    assert cli_main(["verl", "train", "--print-args", "ppo", "paper", "trainer.total_training_steps=9"]) == 0
    printed = capfd.readouterr().out.split("\n")
    assert "algorithm.adv_estimator=gae" in printed and "trainer.total_training_steps=9" in printed
    assert "data.train_batch_size=512" in printed
    # without the GPUs a profile needs, it stops before Ray starts, saying what is missing
    assert cli_main(["verl", "train", "grpo", "smoke"]) == 2
    error = capfd.readouterr().err
    assert "trains on 1 CUDA GPU(s) and this machine has 0" in error and "--print-args" in error


def test_paper_data_trains_on_nq_hotpotqa_and_evaluates_on_seven_sets(tmp_path, shared_data):
    """Hub names resolved through the local override (<data_dir>/<name>/<split>.jsonl), as offline users run it."""
    qa = shared_data / "qa"
    local = {
        ("nq", "train"): "nq_test_17.jsonl",
        ("hotpotqa", "train"): "hotpotqa_100.jsonl",
        ("nq", "test"): "nq_test_1000.jsonl",
        ("triviaqa", "test"): "triviaqa_test_1000.jsonl",
        ("popqa", "test"): "popqa_test_1000.jsonl",
        ("hotpotqa", "dev"): "hotpotqa_100.jsonl",
        ("2wikimultihopqa", "dev"): "musique_100.jsonl",  # no 2Wiki file in the shared data: any QA rows do here
        ("musique", "dev"): "musique_100.jsonl",
        ("bamboogle", "test"): "nq_test_17.jsonl",
    }
    for (name, split), file in local.items():
        (tmp_path / "qa" / name).mkdir(parents=True, exist_ok=True)
        (tmp_path / "qa" / name / f"{split}.jsonl").write_bytes((qa / file).read_bytes())
    out = tmp_path / "paper"
    paths = verl_data_main(["--paper", "--data-dir", str(tmp_path / "qa"), "--limit", "5", "--output", str(out)])
    assert [p.name for p in paths] == ["train.parquet", "test.parquet"]
    train, test = (pq.read_table(p).to_pylist() for p in paths)
    assert [r["data_source"] for r in train] == ["nq"] * 5 + ["hotpotqa"] * 5
    assert [r["data_source"] for r in test] == [name for name in PAPER_EVAL for _ in range(5)]
    assert [r["extra_info"]["index"] for r in test] == list(range(35))
    assert {eval_split(n) for n in ("popqa", "bamboogle", "nq")} == {"test"} and eval_split("musique") == "dev"
    with pytest.raises(SystemExit):
        verl_data_main(["--paper", "--dataset", "world", "--output", str(out)])


# -- veRL's own trainer code around the agent loop ------------------------------------------------------------------
@ray.remote
class OracleTokenServer:
    """A rollout server stand-in behind veRL's real LLMServerClient and load balancer (a Ray actor, as vLLM's is).

    It plays a fixed policy on token ids: search the question, then answer with the gold answer it was told. Like
    veRL's vLLM server it reports the weights version it generated with in ``extra_fields["global_steps"]``; the
    version moves from 3 to 4 once a trajectory already holds retrieved passages (a weight update between
    turns, as with partial rollouts), so a trajectory spans versions 3..4.
    """

    def __init__(self, tokenizer_dir: str, answers: dict[str, str]):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        self.answers = answers

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        context = self.tokenizer.decode(prompt_ids)
        question = next(q for q in self.answers if q in context)
        searched = "Doc 1(Title:" in context  # a retrieved block (the prompt's instructions name the tags too)
        text = f"<answer>{self.answers[question]}</answer>" if searched else f"<search>{question}</search>"
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        fields = {"global_steps": 4 if searched else 3, "num_cached_tokens": len(prompt_ids) // 2}
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed", extra_fields=fields)


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory, shared_data, qwen_tokenizer, qwen_model_dir):
    """Everything a veRL trainer hands its agent-loop workers, built from veRL's own config and classes on CPU.

    Generation goes through veRL's LLMServerClient and GlobalRequestLoadBalancer to OracleTokenServer.
    """
    from verl.workers.rollout.llm_server import LLMServerClient
    from verl.workers.rollout.router import GlobalRequestLoadBalancer

    root = tmp_path_factory.mktemp("verl_run")
    model_dir = qwen_model_dir
    data = root / "data"
    hotpot = str(shared_data / "qa" / "hotpotqa_100.jsonl")
    verl_data_main(["--dataset", hotpot, "--split", "train", "--limit", "4", "--output", str(data)])
    agent_yaml = root / "agent_loop.yaml"
    entry = OmegaConf.load(AGENT_YAML)
    entry[0].env = {"retriever": "bm25", "corpus": str(shared_data / "corpus" / "hotpotqa_hipporag.jsonl")}
    OmegaConf.save(entry, agent_yaml)
    overrides = [
        o
        for o in launcher_overrides("grpo", "smoke", MODEL=str(model_dir))
        if not o.startswith(("data.train_files", "data.val_files")) and "agent_loop_config_path" not in o
    ]
    config = compose_verl(
        [
            *overrides,
            f"data.train_files={data / 'train.parquet'}",
            f"data.val_files={data / 'train.parquet'}",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={agent_yaml}",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.calculate_log_probs=True",
            "data.max_prompt_length=1024",
            "data.max_response_length=1024",
            "data.filter_overlong_prompts=False",
            "+ray_kwargs.ray_init.num_cpus=2",
        ]
    )
    OmegaConf.resolve(config)
    rows = pq.read_table(data / "train.parquet").to_pylist()
    answers = {r["extra_info"]["question"]: r["reward_model"]["ground_truth"]["target"][0] for r in rows}

    started_ray = not ray.is_initialized()
    if started_ray:
        with pytest.MonkeyPatch.context() as env:
            # The machine's memory is shared with other jobs: Ray's node-wide OOM killer would stop these small actors.
            env.setenv("RAY_memory_monitor_refresh_ms", "0")
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    server = OracleTokenServer.remote(str(model_dir), answers)
    balancer = ray.remote(GlobalRequestLoadBalancer).remote(servers={"oracle": server})
    client = LLMServerClient(config, load_balancer_handle=balancer)
    dataset = RLHFDataset(str(data / "train.parquet"), qwen_tokenizer, config.data)
    batch_dict = collate_fn([dataset[i] for i in range(len(dataset))])
    yield argparse.Namespace(config=config, client=client, batch_dict=batch_dict, answers=answers)
    if started_ray:
        ray.shutdown()


def check_scores(rewards, response_mask) -> None:
    """The oracle's episodes all score EM 1, paid on the last response token (the answer's, masked 1)."""
    for row, mask in zip(rewards, response_mask):
        last_model_token = mask.nonzero().flatten()[-1].item()
        assert row.nonzero().flatten().tolist() == [last_model_token] and row[last_model_token].item() == 1.0


@pytest.mark.slow
def test_legacy_trainer_step_over_real_agent_loop_worker(verl_run):
    """veRL's legacy trainer (trainer.use_v1=false): AgentLoopWorker.generate_sequences (our loop, its
    _agent_loop_postprocess and _postprocess), then the trainer's union, reward extraction, GRPO advantages and
    metrics, exactly as RayPPOTrainer.fit calls them."""
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.trainer.ppo.core_algos import AdvantageEstimator
    from verl.trainer.ppo.metric_utils import compute_data_metrics
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer, compute_advantage
    from verl.trainer.ppo.reward import extract_reward

    config, n = verl_run.config, verl_run.config.actor_rollout_ref.rollout.n
    batch = DataProto.from_single_dict(dict(verl_run.batch_dict))
    batch.non_tensor_batch["uid"] = np.array([f"uid-{i}" for i in range(len(batch))], dtype=object)
    gen_batch = RayPPOTrainer._get_gen_batch(None, batch)
    gen_batch.meta_info["global_steps"] = 4
    worker = AgentLoopWorker(config, verl_run.client, None, None)
    output = asyncio.run(worker.generate_sequences(gen_batch.repeat(repeat_times=n, interleave=True)))

    batch = batch.repeat(repeat_times=n, interleave=True).union(output)
    rewards, extra_infos = extract_reward(batch)
    check_scores(rewards, batch.batch["response_mask"])
    ones = [1.0] * len(batch)
    assert list(extra_infos["num_searches"]) == ones and list(extra_infos["reward/em"]) == ones
    # The server's fields reach the batch: weights versions 3..4 per trajectory, prefix-cache hits.
    columns = batch.non_tensor_batch
    assert list(columns["min_global_steps"]) == [3] * len(batch)
    assert list(columns["max_global_steps"]) == [4] * len(batch)
    assert all(hits > 0 for hits in columns["num_cached_tokens"])
    batch.batch["token_level_scores"] = batch.batch["token_level_rewards"] = rewards
    batch = compute_advantage(batch, adv_estimator=AdvantageEstimator.GRPO, num_repeat=n)
    metrics = compute_data_metrics(batch, use_critic=False)
    assert metrics["critic/score/mean"] == 1.0 and metrics["num_turns/min"] == 4  # prompt, search, information, answer
    # Every sample scored 1: GRPO's group-normalised advantage is zero on every token.
    assert batch.batch["advantages"].abs().max().item() == 0.0
    masked = batch.batch["response_mask"].bool()
    assert (batch.batch["rollout_log_probs"][masked] == -0.5).all()


@pytest.mark.slow
def test_v1_trainer_reads_what_the_transfer_queue_worker_stores(verl_run):
    """veRL's default trainer (trainer.use_v1=true): the prompts go into TransferQueue and to a real
    AgentLoopWorkerTQ actor as PPOTrainer._submit_batch_to_rollout sends them; the trajectories' tags and fields are
    read back and the weights-version line of PPOTrainer._compute_metrics is applied to them."""
    tq = pytest.importorskip("transfer_queue")
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.utils import tensordict_utils as tu

    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    try:
        batch_dict = dict(verl_run.batch_dict)
        uids = [f"uid{i}" for i in range(len(batch_dict["raw_prompt"]))]
        batch_dict["uid"] = np.array(uids, dtype=object)
        batch = tu.get_tensordict(batch_dict)  # = PPOTrainer._fetch_one_gen_batch
        tu.assign_non_tensor_data(batch, "global_steps", 5)
        tags = [{"is_prompt": True, "status": "pending", "global_steps": 5} for _ in uids]
        tq.kv_batch_put(keys=uids, partition_id="train", tags=tags)
        worker = AgentLoopWorkerTQ.remote(verl_run.config, verl_run.client, None, None)
        ray.get(worker.generate_sequences.remote(batch))

        deadline = time.monotonic() + 300
        while True:
            items = tq.kv_list(partition_id="train")["train"]
            statuses = [items[uid]["status"] for uid in uids]
            if all(s in ("finished", "failure") for s in statuses) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert statuses == ["finished"] * len(uids)

        n = verl_run.config.actor_rollout_ref.rollout.n
        keys = sorted(k for k, tag in items.items() if not tag.get("is_prompt"))
        assert keys == sorted(f"{uid}_{session}_0" for uid in uids for session in range(n))
        trajectory_tags = [items[k] for k in keys]
        # trainer_base.py, PPOTrainer._compute_metrics: these two lines raised TypeError when the fields were dropped.
        min_global_steps = np.array([tag["min_global_steps"] for tag in trajectory_tags], dtype=int)
        max_global_steps = np.array([tag["max_global_steps"] for tag in trajectory_tags], dtype=int)
        assert min_global_steps.tolist() == [3] * len(keys) and max_global_steps.tolist() == [4] * len(keys)

        fields = ["rm_scores", "response_mask", "rollout_log_probs", "num_turns", "extra_fields"]
        data = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=fields)
        extra_fields = [getattr(f, "data", f) for f in data.pop("extra_fields")]  # NonTensorData items
        num_turns = np.array(data.pop("num_turns").tolist())  # as PPOTrainer._compute_metrics reads them
        data = data.to_padded_tensor()
        check_scores(data["rm_scores"], data["response_mask"])
        assert all(f["reward_extra_info"]["num_searches"] == 1.0 and f["num_cached_tokens"] > 0 for f in extra_fields)
        assert num_turns.tolist() == [4] * len(keys)
    finally:
        tq.close()
