"""searchenv inside the trainers' asynchronous modes, driven through the frameworks' own code on CPU.

veRL 0.9.1's fully-async policy resumes a generation aborted at a weight sync inside its
``FullyAsyncLLMServerClient`` (the prompt plus the ids generated so far go back to the server), so the agent
loop sees one turn whose tokens span two weights versions. Here the whole rollouter path runs: the fully-async
config composed by hydra, ``prepare_single_generation_data``, a real ``AgentLoopWorker`` running our agent loop,
``FullyAsyncLLMServerClient`` behind veRL's ``GlobalRequestLoadBalancer``, and ``assemble_batch_from_rollout_samples``.
Only the vLLM replica server (it needs a GPU) is a stand-in: :class:`WeightSyncServer`, a deterministic token
generator that aborts each episode's first turn part-way and "syncs weights" (version 3 → 4), as vLLM's
``abort_all_requests`` does. Ray is not started: the balancer and the server are called in-process through the
``handle.method.remote(...)`` shape of an actor handle.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
from pathlib import Path

import pytest

pytest.importorskip("verl.experimental.fully_async_policy")

from omegaconf import OmegaConf
from test_verl_adapter import AGENT_YAML, launcher_overrides, qwen_model_dir, run_loop  # noqa: F401 (a fixture)
from verl.workers.rollout.replica import TokenOutput

from searchenv.cli.verl_data import main as rows_main
from searchenv.episode.generation import Generation

ENV = {"retriever": "bm25", "reward": "em", "topk": 2, "max_turns": 3}


class _Done:
    """An already-finished awaitable: what ``actor.method.remote(...)`` gives for a method that is not async."""

    def __init__(self, value):
        self.value = value

    def __await__(self):
        return self.value
        yield  # pragma: no cover - makes this a generator


class InProcessActor:
    """Calls a plain object's methods in the shape of a Ray actor handle: ``handle.method.remote(...)``."""

    def __init__(self, target):
        self._target = target

    def __getattr__(self, name):
        method = getattr(self._target, name)

        def remote(*args, **kwargs):
            result = method(*args, **kwargs)
            return result if asyncio.iscoroutine(result) else _Done(result)

        return type("RemoteMethod", (), {"remote": staticmethod(remote)})


class WeightSyncServer:
    """Stands in for veRL's vLLM replica server: a deterministic token generator on ids.

    The policy searches the question, then answers with the gold answer. Its "samples" depend on the context only
    (the log-probability of a token is a function of its position), so a resumed request continues exactly where
    the aborted one stopped. With ``abort_after`` set, the first turn of every episode is aborted after that many
    tokens (``stop_reason="aborted"``, as vLLM reports a request cut by ``pause_generation``) and the weights move
    from version 3 to 4; the resumed request and everything after it are sampled by version 4. Without it, the
    first turn is version 3 and later turns version 4 (a sync between turns).
    """

    def __init__(self, tokenizer, answers: dict[str, str], abort_after: int | None):
        self.tokenizer, self.answers, self.abort_after = tokenizer, answers, abort_after
        self.calls: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, video_data=None, **kw):
        context = self.tokenizer.decode(prompt_ids)
        question = next(q for q in self.answers if q in context)
        searched = "Doc 1(Title:" in context
        text = f"<answer>{self.answers[question]}</answer>" if searched else f"<search>{question}</search>"
        target = self.tokenizer.encode(text, add_special_tokens=False)
        done = next(k for k in range(len(target) - 1, -1, -1) if k == 0 or list(prompt_ids[-k:]) == target[:k])
        ids = target[done:][: sampling_params["max_tokens"]]
        logprobs = [-0.001 * ((len(prompt_ids) + i) % 97 + 1) for i in range(len(ids))]
        self.calls.append({"prompt_ids": list(prompt_ids), "resumed_from": done, "params": dict(sampling_params)})
        if self.abort_after is not None and not searched and done == 0:
            cut = self.abort_after
            return TokenOutput(
                token_ids=ids[:cut], log_probs=logprobs[:cut], stop_reason="aborted", extra_fields={"global_steps": 3}
            )
        version = 4 if searched or self.abort_after is not None else 3
        return TokenOutput(
            token_ids=ids, log_probs=logprobs, stop_reason="completed", extra_fields={"global_steps": version}
        )


def compose_fully_async(overrides: list[str]):
    """veRL's fully_async_ppo_trainer config composed with ``overrides``, as fully_async_main does with hydra."""
    import verl.experimental.fully_async_policy as fully_async
    from hydra import compose, initialize_config_dir

    config_dir = str(Path(fully_async.__file__).parent / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="fully_async_ppo_trainer", overrides=overrides)


@pytest.fixture(scope="module")
def fully_async_setup(tmp_path_factory, qwen_model_dir):  # noqa: F811 (the imported fixture)
    root = tmp_path_factory.mktemp("fully_async")
    data = root / "data"
    rows_main(["--dataset", "world", "--split", "train", "--limit", "2", "--output", str(data)])
    agent_yaml = root / "agent_loop.yaml"
    entry = OmegaConf.load(AGENT_YAML)
    entry[0].env = dict(ENV)
    OmegaConf.save(entry, agent_yaml)
    overrides = [
        o
        for o in launcher_overrides("grpo", "smoke", MODEL=str(qwen_model_dir))
        if not o.startswith(("data.train_files", "data.val_files")) and "agent_loop_config_path" not in o
    ]
    config = compose_fully_async(
        [
            *overrides,
            f"data.train_files={data / 'train.parquet'}",
            f"data.val_files={data / 'train.parquet'}",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={agent_yaml}",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.calculate_log_probs=True",
            # Without it, prepare_single_generation_data replaces every row's agent_name with single_turn_agent.
            "actor_rollout_ref.rollout.multi_turn.enable=True",
            "data.max_prompt_length=1024",
            "data.max_response_length=512",
            "data.filter_overlong_prompts=False",
        ]
    )
    OmegaConf.resolve(config)
    assert config.async_training.partial_rollout is True  # the fully-async default: aborted turns are resumed
    import pyarrow.parquet as pq

    rows = pq.read_table(data / "train.parquet").to_pylist()
    answers = {r["extra_info"]["question"]: r["reward_model"]["ground_truth"]["target"][0] for r in rows}
    return config, data / "train.parquet", answers


def rollout_one_sample(config, parquet, answers, abort_after):
    """One dataset row through the fully-async rollouter's path; returns the assembled batch and the server."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.fully_async_policy.detach_utils import (
        RolloutSample,
        assemble_batch_from_rollout_samples,
        prepare_single_generation_data,
    )
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient
    from verl.workers.rollout.router import GlobalRequestLoadBalancer

    worker_holder = {}

    async def play():
        # AgentLoopWorker loads the tokenizer from the model folder: build it first, then the server on it.
        worker = AgentLoopWorker(config, None, None, None)
        server = WeightSyncServer(worker.tokenizer, answers, abort_after)
        balancer = InProcessActor(GlobalRequestLoadBalancer(servers={"replica-0": InProcessActor(server)}))
        worker.llm_client = FullyAsyncLLMServerClient(config, load_balancer_handle=balancer)
        dataset = RLHFDataset(str(parquet), worker.tokenizer, config.data)
        batch = prepare_single_generation_data(collate_fn([dataset[0]]), config)  # repeated n times
        output = await worker.generate_sequences(batch)
        worker_holder["server"] = server
        return output

    output = asyncio.run(play())
    sample = RolloutSample(full_batch=output, sample_id="sample_0_1", epoch=0, rollout_status={})
    assembled = assemble_batch_from_rollout_samples([sample], None, config)
    return assembled, worker_holder["server"]


@pytest.mark.slow
def test_episode_interrupted_at_a_weight_sync_is_token_identical(fully_async_setup):
    """Done-when of issue 23: an episode aborted mid-turn at a weight sync and resumed by veRL's fully-async client
    has the same prompt ids, response ids, response mask, rollout log-probs and reward as one never interrupted."""
    config, parquet, answers = fully_async_setup
    plain, plain_server = rollout_one_sample(config, parquet, answers, abort_after=None)
    resumed, resumed_server = rollout_one_sample(config, parquet, answers, abort_after=3)

    # The interruption happened: each of the n episodes' first turns was aborted after 3 tokens and resumed from
    # the ids generated so far (never from re-tokenised text).
    resumes = [c for c in resumed_server.calls if c["resumed_from"]]
    assert len(resumes) == config.actor_rollout_ref.rollout.n and all(c["resumed_from"] == 3 for c in resumes)
    assert not any(c["resumed_from"] for c in plain_server.calls)

    for key in (
        "prompts",
        "responses",
        "response_mask",
        "attention_mask",
        "input_ids",
        "rollout_log_probs",
        "rm_scores",
    ):
        assert (plain.batch[key] == resumed.batch[key]).all(), key
    assert resumed.batch["rm_scores"].sum(-1).tolist() == [1.0, 1.0]  # EM 1 on both samples
    masked = resumed.batch["response_mask"].bool()
    assert (resumed.batch["rollout_log_probs"][masked] < 0).all()  # the sampler's log-probs, not the 0.0 of env tokens

    # What differs is only the weights versions, as veRL's batch assembly reads them for its partial-rollout metrics.
    assert list(resumed.non_tensor_batch["min_global_steps"]) == [3, 3]
    assert list(resumed.non_tensor_batch["max_global_steps"]) == [4, 4]
    assert resumed.meta_info["fully_async/partial/max_partial_span"] == 1
    # Our agent loop played both (search, information, answer), not veRL's single-turn loop.
    assert list(plain.non_tensor_batch["reward/em"]) == list(resumed.non_tensor_batch["reward/em"]) == [1.0, 1.0]
    assert list(resumed.non_tensor_batch["__num_turns__"]) == [4, 4]


def test_resumed_turn_is_recorded_with_both_policy_versions(monkeypatch, qwen_tokenizer):
    """Our agent loop behind veRL's FullyAsyncLLMServerClient (no worker, no config composition): the turn aborted
    at the weight sync is recorded once, with the ids of both attempts and versions 3..4; the next turn is 4..4."""
    from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient
    from verl.workers.rollout.router import GlobalRequestLoadBalancer

    from searchenv.adapters.verl import agent_loop
    from searchenv.components import load_examples

    example = load_examples("world", "train")[0]
    row = {
        "raw_prompt": [{"role": "user", "content": example.question}],
        "reward_model": {"ground_truth": {"target": list(example.golden_answers)}},
        "extra_info": {"question": example.question},
        "data_source": "world",
    }
    envs, build = [], agent_loop.episode_env

    def recording_env(*args):
        env, info = build(*args)
        envs.append(env)
        return env, info

    monkeypatch.setattr(agent_loop, "episode_env", recording_env)
    server = WeightSyncServer(qwen_tokenizer, {example.question: example.golden_answers[0]}, abort_after=2)
    balancer = InProcessActor(GlobalRequestLoadBalancer(servers={"replica-0": InProcessActor(server)}))
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"name": "vllm", "response_length": 512}},
            "async_training": {"partial_rollout": True},
        }
    )
    client = FullyAsyncLLMServerClient(config, load_balancer_handle=balancer)
    output = run_loop(client, qwen_tokenizer, row, env=ENV)

    [env] = envs
    search, answer = env.episode.generations
    assert (search.policy_version, search.last_policy_version) == (3, 4)
    assert (answer.policy_version, answer.last_policy_version) == (4, 4)
    assert [c["resumed_from"] for c in server.calls] == [0, 2, 0]
    assert qwen_tokenizer.decode(list(search.token_ids)) == f"<search>{example.question}</search>"
    model_ids = [t for t, m in zip(output.response_ids, output.response_mask) if m]
    assert model_ids == [*search.token_ids, *answer.token_ids]
    assert output.response_logprobs[: len(search.token_ids)] == list(search.logprobs)
    assert (output.extra_fields["min_global_steps"], output.extra_fields["max_global_steps"]) == (3, 4)
    assert output.reward_score == 1.0


def test_generation_record_is_checked_and_cut():
    record = Generation.sampled([5, 6, 7], [-0.1, -0.2, -0.3], 3, 4)
    assert record.kept(2) == Generation((5, 6), (-0.1, -0.2), 3, 4)
    assert Generation.sampled([5], [], 2).logprobs is None  # veRL's client reports [] when none were asked for
    assert Generation((1,), None, 2).last_policy_version == 2
    with pytest.raises(ValueError, match="logprobs for 2 token ids"):
        Generation((1, 2), (-0.1,))
    with pytest.raises(ValueError, match="policy_version <= last_policy_version"):
        Generation((1,), None, 5, 4)
    with pytest.raises(ValueError, match="without policy_version"):
        Generation((1,), None, None, 4)


def test_every_turn_is_recorded_and_the_tokens_come_from_the_record(qwen_tokenizer):
    """Our token loop keeps one Generation per model turn (the kept ids, their log-probs, the policy version), and
    tokenize_episode rebuilds the trainer's sequence from that record, not from the text: a resumed episode needs no
    re-tokenisation."""
    from test_generation import ScriptedGenerator, _toy_envs
    from toyworld import QUESTIONS, ScriptedRetriever

    from searchenv.rollout import SamplingConfig, rollout
    from searchenv.tokenization import tokenize_episode

    def enc(text):
        return qwen_tokenizer(text, add_special_tokens=False)["input_ids"]

    question = QUESTIONS[0]["question"]
    # "Valtmora" sampled one character at a time: ids that are not the tokenizer's own encoding of their text (a
    # model may sample such ids) survive only by the record.
    spelled = [t for ch in "Valtmora" for t in enc(ch)]
    search = enc("<search> ") + spelled + enc(" Guild founder </search>") + enc(" words after the tag")
    answer = enc("<answer> Ilsa Brevondt </answer>")
    [env] = _toy_envs(1, ScriptedRetriever())
    [result] = rollout(
        [env],
        ScriptedGenerator(qwen_tokenizer, {question: [search, answer]}),
        SamplingConfig(),
        indices=[0],
        policy_version=7,
    )
    episode = env.unwrapped.episode
    kept_search = search[: len(search) - len(enc(" words after the tag"))]
    assert [g.token_ids for g in episode.generations] == [tuple(kept_search), tuple(answer)]
    assert [g.policy_version for g in episode.generations] == [7, 7]
    assert all(g.logprobs == (-0.5,) * len(g.token_ids) for g in episode.generations)
    assert len(episode.generations) == len(episode.turns)

    rebuilt = tokenize_episode(episode, qwen_tokenizer)
    assert rebuilt.response_ids == result.tokens.response_ids and rebuilt.loss_mask == result.tokens.loss_mask
    assert rebuilt.logprobs == result.tokens.logprobs
    # Without the record the text is re-encoded, and the model's own ids are lost.
    episode.generations.clear()
    assert tokenize_episode(episode, qwen_tokenizer).response_ids != result.tokens.response_ids


# -- TRL's AsyncGRPOTrainer -----------------------------------------------------------------------------------------
def completions_stand_in(tokenizer, answer: str):
    """A loopback stand-in for the vLLM server's ``/v1/completions`` (vLLM needs a GPU and is not installed here),
    speaking the wire format TRL's rollout worker reads: ``choices[0].token_ids`` and
    ``choices[0].logprobs.token_logprobs``. It plays a fixed policy on the rendered conversation: call ``search``,
    then ``answer``, then close with a plain message."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    def call(name, arguments):
        return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"

    async def completions(request):
        payload = await request.json()
        context = tokenizer.decode(payload["prompt"])
        if "<tool_response>" not in context:
            text = call("search", {"query": "who founded it"})
        elif "Answer recorded." not in context:
            text = call("answer", {"answer": answer})
        else:
            text = "Done."
        ids = tokenizer(text + "<|im_end|>", add_special_tokens=False)["input_ids"][: payload["max_tokens"]]
        choice = {"index": 0, "text": text, "token_ids": ids, "logprobs": {"token_logprobs": [-0.25] * len(ids)}}
        return JSONResponse({"choices": [choice]})

    return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])


def test_async_grpo_rollout_worker_plays_and_scores_our_environment(monkeypatch):
    """TRL's AsyncGRPOTrainer rollout loop (``_AsyncRolloutLoop``, the body of the child process its
    ``AsyncRolloutWorker`` spawns) plays our environment through ``environment_factory``: it declares the env's
    tools, steps each tool call through the episode, takes the reward from ``get_reward``, and tags every sample
    with the policy version its trainer's staleness filter reads; the trainer's own ``RolloutQueueDataset`` then
    keeps or drops it by ``max_staleness``."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    import multiprocessing
    import queue

    from accelerate.state import PartialState

    PartialState(cpu=True)  # what the worker's child process does first (TRL logs through accelerate)

    import transformers
    from servers import serve_in_thread
    from trl.chat_template_utils import qwen2_5_chat_template
    from trl.experimental.async_grpo.async_grpo_trainer import RolloutQueueDataset
    from trl.experimental.async_grpo.async_rollout_worker import _AsyncRolloutLoop

    from searchenv.adapters.trl.tools import RewardingAnswerToolEnvironment, environment_factory, make_tool_dataset
    from searchenv.assets import qwen_tokenizer_dir

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))
    tokenizer.chat_template = qwen2_5_chat_template  # a template TRL's response parser knows
    factory = environment_factory(env_reward=True, max_turns=3, max_information_words=20)
    gold = factory.env.examples[0].golden_answers[0]
    buffer: queue.Queue = queue.Queue()
    with serve_in_thread(completions_stand_in(tokenizer, gold)) as url:
        worker = _AsyncRolloutLoop(
            model_name="stand-in",
            dataset=make_tool_dataset(factory.env, limit=1),
            reward_funcs=[],
            processing_class=tokenizer,
            eos_token_ids=[tokenizer.convert_tokens_to_ids("<|im_end|>")],
            rollout_buffer=buffer,
            model_version_value=multiprocessing.Value("i", 5),
            heartbeat_value=multiprocessing.Value("d", 0.0),
            failed_event=multiprocessing.Event(),
            exception_info_queue=queue.Queue(),
            metrics_queue=queue.Queue(),
            environment_factory=factory,
            num_generations=2,
            max_inflight_tasks=2,
            vllm_server_url=url,
            max_tokens=128,
        )

        async def play_one_group():
            stop = asyncio.Event()
            task = asyncio.create_task(worker._run_loops(stop_event=stop))
            while buffer.qsize() < 2 and not task.done():
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.wait_for(task, timeout=60)

        asyncio.run(play_one_group())
    assert sorted(t.__name__ for t in worker.tools) == ["answer", "search"]
    samples = [buffer.get_nowait() for _ in range(buffer.qsize())]
    first = samples[:2]
    assert all(s.model_version == 5 and s.metrics["rewards/RewardingAnswerToolEnvironment"] == 1.0 for s in first)
    assert all(len(s.old_log_probs) == len(s.input_ids) for s in first)
    # Each rollout played its own episode to the end: the pool hands the finished environments back.
    episodes = [env.env.episode for env in worker._environment_pool[None]]
    assert all(isinstance(env, RewardingAnswerToolEnvironment) for env in worker._environment_pool[None])
    assert {(e.num_searches, e.prediction, e.reward) for e in episodes} == {(1, gold, 1.0)}

    # The trainer's staleness filter reads model_version: samples of version 5 are kept at version 7 and dropped at
    # version 9 (max_staleness=3), where only a fresh one passes.
    def through_filter(samples, version, count):
        feed: queue.Queue = queue.Queue()
        for sample in samples:
            feed.put(sample)
        metrics = collections.defaultdict(list)
        data = RolloutQueueDataset(feed, lambda: version, lambda _: None, 1.0, metrics, max_staleness=3)
        items = iter(data)
        return [next(items) for _ in range(count)], metrics

    kept, metrics = through_filter(first, 7, 2)
    assert metrics["sample/staleness_max"] == [2.0, 2.0]
    assert [list(k["old_log_probs"]) for k in kept] == [list(s.old_log_probs) for s in first]
    fresh = dataclasses.replace(first[0], model_version=9)
    kept, metrics = through_filter([*first, fresh], 9, 1)
    assert metrics["sample/dropped_stale_total"] == [1.0, 1.0] and metrics["sample/staleness_max"] == [0.0]


# -- SkyRL's fully-async trainer ------------------------------------------------------------------------------------
# SkyRL 0.3.0's modules import only on Python >= 3.12 (skyrl/tinker/types.py puts a typing.TypedDict in a pydantic
# model); on 3.11 this script runs SkyRL's own code with typing.TypedDict swapped for typing_extensions' one, as
# tests/test_skyrl_adapter.py does. It drives SkyRLGymGenerator, the generator FullyAsyncRayPPOTrainer runs per
# group, in the step-wise trajectory mode, over our environment; the inference engine (vLLM, GPU) is a stand-in.
_SKYRL_STEP_WISE = r"""
import asyncio, json, sys, typing
if sys.version_info < (3, 12):
    import typing_extensions
    typing.TypedDict = typing_extensions.TypedDict
import skyrl.train.fully_async_trainer  # the fully-async trainer's module imports once the swap is in place
from skyrl.train.generators.base import TrajectoryID
from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator
from transformers import AutoTokenizer
from searchenv.adapters.skyrl.env import register_skyrl_env
from searchenv.adapters.skyrl.train import compose

tokenizer_dir, row = sys.argv[1], json.loads(sys.argv[2])
gold = row["reward_spec"]["ground_truth"]["target"][0]
cfg = compose([
    "environment.skyrl_gym.searchenv.retriever=bm25",
    "generator.step_wise_trajectories=true",
    "generator.use_conversation_multi_turn=true",  # step-wise trajectories need it (SkyRL's check)
    "generator.sampling_params.logprobs=0",
])
tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)

class StandInEngine:
    # What SkyRLGymGenerator reads from vLLM's engine client: responses, response_ids, stop_reasons, logprobs.
    async def generate(self, engine_input, model=None):
        context = tokenizer.decode(engine_input["prompt_token_ids"][0])
        searched = "Doc 1(Title:" in context
        text = f"<answer>{gold}</answer>" if searched else f"<search>{row['extra_info']['question']}</search>"
        ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
        logprobs = [[-0.5] * len(ids)]
        return {"responses": [text], "response_ids": [ids], "stop_reasons": ["stop"], "response_logprobs": logprobs}
    async def finish_session(self, session_id):
        pass

register_skyrl_env()
generator = SkyRLGymGenerator(cfg.generator, cfg.environment.skyrl_gym, StandInEngine(), tokenizer)
extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
batch = {"prompts": [row["prompt"]] * 2, "env_classes": [cfg.environment.env_class] * 2, "env_extras": [extras] * 2,
         "trajectory_ids": [TrajectoryID("q0", 0), TrajectoryID("q0", 1)]}
out = asyncio.run(generator.generate(batch, disable_tqdm=True))
print(json.dumps({
    "rewards": out["rewards"], "is_last_step": out["is_last_step"],
    "trajectory_ids": [t.to_string() for t in out["trajectory_ids"]],
    "steps": [tokenizer.decode(r) for r in out["response_ids"]],
    "loss_masks": out["loss_masks"], "logprobs": out["rollout_logprobs"],
}))
"""


@pytest.mark.slow
def test_skyrl_step_wise_generator_plays_our_environment(tmp_path):
    import subprocess
    import sys

    import pyarrow.parquet as pq

    from searchenv.assets import qwen_tokenizer_dir

    pytest.importorskip("skyrl.train")
    rows_main(["--dataset", "world", "--trainer", "skyrl", "--limit", "1", "--output", str(tmp_path)])
    row = pq.read_table(tmp_path / "train.parquet").to_pylist()[0]
    out = subprocess.run(
        [sys.executable, "-c", _SKYRL_STEP_WISE, str(qwen_tokenizer_dir()), json.dumps(row)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    # Two trajectories, each two steps (search, then answer); the reward is on the last step's last token only.
    assert report["trajectory_ids"] == ["q0_0", "q0_0", "q0_1", "q0_1"]
    assert report["is_last_step"] == [False, True, False, True]
    assert report["steps"][0].startswith("<search>") and report["steps"][1].startswith("<answer>")
    assert [sum(r) for r in report["rewards"]] == [0.0, 1.0, 0.0, 1.0] and report["rewards"][1][-1] == 1.0
    # Each step is the model's turn (trained on, with the engine's log-probs) followed by what the environment
    # inserted (masked out): our information block for the search step.
    for mask, logprobs in zip(report["loss_masks"], report["logprobs"]):
        model = sum(mask)
        assert mask == [1] * model + [0] * (len(mask) - model)
        assert logprobs == [-0.5] * model + [0.0] * (len(mask) - model)
    assert "<information>" in report["steps"][0] and "<information>" not in report["steps"][1]
