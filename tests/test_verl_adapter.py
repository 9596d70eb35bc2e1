"""The veRL adapter with the real verl package: agent loop, reward function, data script and launch configs.

veRL's rollout servers need a GPU, so the agent loop talks to local stand-ins implementing the server
manager's ``generate(request_id, *, prompt_ids, sampling_params) -> TokenOutput``: a scripted one (exact
control over the sampled text) and SmolLM2-135M through transformers (a real model's token ids).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("verl.experimental.agent_loop")

import hydra
import pyarrow.parquet as pq
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopOutput,
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.workers.rollout.replica import TokenOutput

from searchenv.adapters.verl import SearchEnvAgentLoop, compute_score
from searchenv.adapters.verl_data import AGENT_NAME, add_parser, episode_env, row_example
from searchenv.adapters.verl_data import main as verl_data_main

REPO = Path(__file__).resolve().parents[1]
AGENT_YAML = REPO / "adapters" / "verl_configs" / "agent_loop.yaml"
TRAIN_SCRIPT = REPO / "adapters" / "scripts" / "verl_train.sh"
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


def make_loop(server, tokenizer, *, env, response_length=2048, **loop_options) -> SearchEnvAgentLoop:
    """Instantiate the agent loop from adapters/verl_configs/agent_loop.yaml the way veRL's worker does.

    Must be called inside a running event loop (veRL builds agent loops inside its worker's loop)."""
    trainer = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": 1024, "response_length": response_length}},
            "data": {"apply_chat_template_kwargs": {}},
        }
    )
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
    assert info["model_tokens"] == sum(output.response_mask) and info["cut_by_length"] == 0.0


def test_response_budget_cuts_the_episode_and_still_scores_it(hotpot_rows, hotpot_options, qwen_tokenizer):
    server = ScriptedServer(qwen_tokenizer, ["<search>Christopher Nolan director</search>"] * 4)
    output = run_loop(server, qwen_tokenizer, hotpot_rows[1], env=hotpot_options, response_length=200)
    assert len(output.response_ids) == len(output.response_mask) == 200
    assert output.reward_score == 0.0
    info = output.extra_fields["reward_extra_info"]
    assert info["cut_by_length"] == 1.0 and info["answered"] == 0.0 and "reward/em" in info
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
    dead = {"retriever": "http://127.0.0.1:9", "retriever_options": {"retries": 0, "timeout": 2.0}}
    texts = ["<search>Christopher Nolan</search>", "<answer>yes</answer>"]
    server = ScriptedServer(qwen_tokenizer, texts, logprobs=False)
    output = run_loop(server, qwen_tokenizer, hotpot_rows[1], env=dead)
    assert output.reward_score == 1.0 and output.response_logprobs is None
    inserted = qwen_tokenizer.decode([t for t, m in zip(output.response_ids, output.response_mask) if m == 0])
    assert inserted.startswith("\n\n<information>The search failed") and inserted.endswith("</information>\n\n")
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
    from searchenv.adapters.generation import HFGenerator, SamplingConfig, load_policy

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
    assert scored["score"] == 1.0 and scored["em"] == 1.0
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
                    "path": "pkg://searchenv.adapters.verl",
                    "name": "compute_score",
                    "reward_kwargs": {"reward": "format"},
                }
            }
        }
    )
    score = get_custom_reward_fn(config)
    result = score(data_source="nq", solution_str="<think>x</think>\n<answer>Paris</answer>", ground_truth="Paris")
    assert result["score"] == 1.0 and result["format_ok"] == 1.0


@pytest.mark.parametrize("algo", ["ppo", "grpo"])
@pytest.mark.parametrize("profile", ["smoke", "8xh100"])
def test_launch_script_composes_a_valid_verl_config(algo, profile):
    import verl
    from hydra import compose, initialize_config_dir

    printed = subprocess.run(
        ["bash", str(TRAIN_SCRIPT), algo, profile],
        env={**os.environ, "PRINT_ARGS": "1"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    overrides = [line for line in printed if line]
    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
    rollout = config.actor_rollout_ref.rollout
    assert rollout.agent.default_agent_loop == AGENT_NAME and rollout.skip_tokenizer_init is False
    assert config.reward.custom_reward_function.path == "pkg://searchenv.adapters.verl"
    assert config.actor_rollout_ref.actor.clip_ratio == 0.2 and config.algorithm.gamma == 1.0
    if algo == "ppo":
        assert config.algorithm.adv_estimator == "gae" and config.algorithm.kl_ctrl.kl_coef == 0.001
        assert config.actor_rollout_ref.actor.optim.lr == 1e-6 and config.critic.optim.lr == 1e-5
    else:
        assert config.algorithm.adv_estimator == "grpo" and rollout.n == 5
        assert config.actor_rollout_ref.actor.optim.lr == 5e-7 and config.actor_rollout_ref.actor.kl_loss_coef == 0.001
    if profile == "8xh100":
        assert config.trainer.n_gpus_per_node == 8 and config.data.train_batch_size == 512
        assert config.actor_rollout_ref.actor.ppo_mini_batch_size == 256 and rollout.gpu_memory_utilization == 0.6
        assert config.trainer.save_freq == 100 and config.actor_rollout_ref.actor.fsdp_config.param_offload is True
    assert AGENT_NAME in _agent_loop_registry  # importing the adapter registered the loop under its name
