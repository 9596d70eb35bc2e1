"""The LLM-judge reward spec and the evaluation's ACC_L judge through one judge: a real ``transformers serve`` on
loopback and a local SmolLM2 (slow), a loopback stand-in speaking OpenAI's wire format for the batch, cache and
failure rules (fast), a dead URL whose fallback is counted."""

from __future__ import annotations

import asyncio
import pickle

import gymnasium as gym
import pytest
from servers import free_port, openai_chat_app, serve_in_thread

from searchenv import SearchQAEnv
from searchenv.evaluation.judge import LLMJudge
from searchenv.reward_specs import REWARD_SPECS, Rollout, load_reward
from searchenv.reward_specs.judging.prompt import ACC_L_PROMPT, check_prompt, judge_prompt, parse_verdict

QUESTION = "Who founded Orvane Abbey?"
GOLDS = ["Tesk Mallor"]


def _rollout(answer: str | None, golds=GOLDS, question=QUESTION) -> Rollout:
    text = "<think>I know this.</think>" + (f"<answer>{answer}</answer>" if answer is not None else "no answer")
    return Rollout.from_text(text, golds, question=question)


def test_verdicts_are_read_from_the_first_word() -> None:
    assert [parse_verdict(r) for r in ("Yes.", " no, because", "**YES**", "maybe", "")] == [1.0, 0.0, 1.0, None, None]
    prompt = judge_prompt(QUESTION, ["a", "b"], "c")
    assert QUESTION in prompt and "a | b" in prompt and prompt.startswith(ACC_L_PROMPT[:20])
    with pytest.raises(ValueError, match=r"missing \{prediction\}"):
        check_prompt("Q: {question} G: {golds}")


def test_judge_is_a_builtin_spec_that_needs_its_model() -> None:
    assert "judge" in REWARD_SPECS
    with pytest.raises(ValueError, match="judge.*needs 'model'"):
        load_reward("judge")
    with pytest.raises(ValueError, match="not a local checkpoint folder"):
        load_reward("judge", model="/no/such/model")
    with pytest.raises(ValueError, match="url.*http"):
        load_reward("judge", url="localhost:8000", model="m")
    with pytest.raises(ValueError, match="lambda_f \\+ lambda_r must be below 1"):
        load_reward({"base": "judge", "url": "http://127.0.0.1:9", "model": "m", "lambda_f": 0.6, "lambda_r": 0.5})


def test_a_dead_judge_falls_back_to_em_and_counts_it() -> None:
    spec = load_reward({"base": "judge", "url": f"http://127.0.0.1:{free_port()}", "model": "m", "retries": 0})
    right, wrong, none = spec.score_batch([_rollout("Tesk Mallor"), _rollout("Orvane"), _rollout(None)])
    assert (right.reward, right.parts["judge"], right.parts["judge_fallback"]) == (1.0, 1.0, 1.0)
    assert (wrong.reward, wrong.parts["judge"], wrong.parts["judge_fallback"]) == (0.0, 0.0, 1.0)
    assert (none.parts["judge"], none.parts["judge_fallback"]) == (0.0, 0.0)  # nothing to judge: no fallback
    assert spec._judge.prompter.num_cached == 0  # a failure is never cached as an answer
    copy = pickle.loads(pickle.dumps(spec))  # a Ray worker or a subprocess vector env gets its own client
    assert copy == spec and copy(_rollout("Orvane")).parts["judge_fallback"] == 1.0


def test_the_judge_decides_against_the_metric_in_one_concurrent_batch_and_caches() -> None:
    asked: list[str] = []

    def reply(prompt: str) -> str | int:
        if "Predicted answer: broken" in prompt:
            return 400  # a refused request fails this case alone
        return "yes" if "Predicted answer: T. Mallor" in prompt else "no"

    with serve_in_thread(openai_chat_app(reply, asked)) as url:
        spec = load_reward("judge", url=url, model="judge-model", retries=0)
        batch = [_rollout("T. Mallor"), _rollout("Tesk Mallor"), _rollout("broken"), _rollout("T. Mallor")]
        synonym, exact, broken, again = spec.score_batch(batch)
        assert (synonym.reward, synonym.parts["judge"], synonym.parts["em"]) == (1.0, 1.0, 0.0)  # judge, not EM
        assert (exact.reward, exact.parts["judge"], exact.parts["judge_fallback"]) == (0.0, 0.0, 0.0)
        assert (broken.parts["judge"], broken.parts["judge_fallback"]) == (0.0, 1.0)
        assert again == synonym and len(asked) == 3  # the repeated case was asked once
        assert spec(_rollout("T. Mallor")) == synonym and len(asked) == 3  # per-rollout call: from the cache
        assert spec(_rollout("T. Mallor", question="Another question?")).parts["judge"] == 1.0 and len(asked) == 4


def test_judge_composes_with_the_format_and_retrieval_terms() -> None:
    with serve_in_thread(openai_chat_app(lambda prompt: "no")) as url:
        spec = load_reward({"base": "judge", "url": url, "model": "m", "lambda_f": 0.2, "lambda_r": 0.1})
        assert spec.reads_retrieval and not load_reward("judge", url=url, model="m").reads_retrieval
        result = spec(_rollout("Tesk Mallor"))  # EM says right, the judge says wrong
        assert result.reward == pytest.approx(0.2) and result.parts["judge"] == 0.0 and result.parts["em"] == 1.0


def test_the_env_logs_the_verdict_as_a_reward_part() -> None:
    with serve_in_thread(openai_chat_app(lambda prompt: "Yes")) as url:
        with gym.make("SearchQA-v0", retriever="random", reward={"base": "judge", "url": url, "model": "m"}) as env:
            env.reset(seed=0)
            _, reward, terminated, _, info = env.step("<answer>anything at all</answer>")
    assert terminated and reward == 1.0 and info["reward_parts"]["judge"] == 1.0
    assert info["episode_metrics"]["reward/judge_fallback"] == 0.0


class InFlight:
    """An ASGI wrapper that holds every request a moment and records the most that were in flight at once: requests
    sent one by one never overlap, those of one concurrent batch do."""

    def __init__(self, app, hold: float = 0.3):
        self.app, self.hold, self.now, self.peak, self.count = app, hold, 0, 0, 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        self.now, self.count = self.now + 1, self.count + 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(self.hold)
            await self.app(scope, receive, send)
        finally:
            self.now -= 1


def _verdict(prompt: str) -> str | int:
    if "Predicted answer: broken" in prompt:
        return 400  # this episode's judgement fails: it alone falls back to EM
    return "yes" if "Predicted answer: right" in prompt else "no"


def _row(batched: dict, i: int) -> dict:
    """Episode ``i``'s entries of a vector env's info dict (Gymnasium adds ``_key`` masks beside each key)."""
    return {k: float(v[i]) for k, v in batched.items() if not k.startswith("_")}


def test_a_vector_env_judges_the_episodes_a_step_ends_in_one_concurrent_batch() -> None:
    actions = [
        ["<answer>right</answer>", "<answer>ignored: autoreset</answer>"],
        ["<answer>wrong</answer>", "<answer>ignored: autoreset</answer>"],
        ["<answer>broken</answer>", "<answer>ignored: autoreset</answer>"],
        ["<search>the abbey</search>", "<answer>right</answer>"],
    ]
    server = InFlight(openai_chat_app(_verdict))
    with serve_in_thread(server) as url:
        options = {"base": "judge", "url": url, "model": "m", "retries": 0}
        batched = load_reward(options)
        asks: list[int] = []
        ask = batched._judge.prompter.ask
        batched._judge.prompter.ask = lambda prompts, stops: asks.append(len(prompts)) or ask(prompts, stops)
        envs = gym.make_vec("SearchQA-v0", num_envs=4, retriever="random", reward=batched)
        envs.reset(seed=10)
        _, first, ended, _, info = envs.step([a[0] for a in actions])
        assert list(ended) == [True, True, True, False]
        assert (asks, server.count, server.peak) == ([3], 3, 3)  # the three that ended: one concurrent batch
        parts = [_row(info["reward_parts"], i) for i in range(3)]
        _, second, ended, _, info = envs.step([a[1] for a in actions])
        assert ended[3] and asks == [3, 1]
        batch_rewards = [*first[:3], second[3]]
        parts.append(_row(info["reward_parts"], 3))
        envs.close()

        alone, server.peak = load_reward(options), 0  # the one-at-a-time path, with a judge of its own (no cache)
        for i, episode in enumerate(actions):
            env = SearchQAEnv(retriever="random", reward=alone)
            env.reset(seed=10 + i)
            steps = episode[:1] if i < 3 else episode
            *_, (_, reward, _, _, step_info) = [env.step(a) for a in steps]
            assert reward == batch_rewards[i] and step_info["reward_parts"] == parts[i]
        assert server.peak == 1
    assert [p["judge"] for p in parts] == [1.0, 0.0, 0.0, 1.0]
    assert [p["judge_fallback"] for p in parts] == [0.0, 0.0, 1.0, 0.0]  # the failed call fell back alone


def _lenient(prompt: str) -> str:
    """A lenient judge: yes when the prediction contains a gold answer (what a weak model tends to say)."""
    golds = prompt.split("Gold answers: ", 1)[1].split("\n", 1)[0].split(" | ")
    prediction = prompt.split("Predicted answer: ", 1)[1].rsplit("\nCorrect", 1)[0]
    return "yes" if any(g.lower() in prediction.lower() for g in golds) else "no"


def test_the_audit_judges_each_policy_in_one_concurrent_batch() -> None:
    from searchenv.evaluation.reward_audit import audit_reward

    server = InFlight(openai_chat_app(_lenient), hold=0.05)
    with serve_in_thread(server) as url:
        spec = load_reward("judge", url=url, model="m", retries=0)
        asks: list[int] = []
        ask = spec._judge.prompter.ask
        spec._judge.prompter.ask = lambda prompts, stops: asks.append(len(prompts)) or ask(prompts, stops)
        table = audit_reward(spec, limit=4)
    rows = {row.policy.name: row for row in table.rows}
    judged = [name for name in rows if name not in ("empty", "answer-in-think")]  # no answer: 0 without asking
    assert asks == [4] * len(judged) and server.peak == 4  # one batch of the four questions per policy
    assert rows["oracle"].mean_reward == 1.0 and rows["honest-wrong"].mean_reward == 0.0
    assert {"stuffing", "over-long"} <= set(table.exploits)  # a lenient judge pays answers that hold the gold
    assert all(row.judge_fallbacks == 0 for row in table.rows) and "judge fallbacks" in table.markdown()


def test_eval_judge_leaves_an_unjudged_record_out() -> None:
    with serve_in_thread(openai_chat_app(lambda prompt: "yes" if "Paris" in prompt else "dunno")) as url:
        judge = LLMJudge(url, "m", retries=0)
        judge.check()
        records = [
            {"question": "Capital of France?", "golden_answers": ["Paris"], "prediction": "Paris"},
            {"question": "Capital of Spain?", "golden_answers": ["Madrid"], "prediction": "Lyon"},
            {"question": "Capital of Spain?", "golden_answers": ["Madrid"], "prediction": None},
        ]
        judge(records)
    assert [r["judge"] for r in records] == [1.0, None, 0.0]


@pytest.mark.slow
def test_judge_reward_against_transformers_serve(transformers_server, smollm2_dir) -> None:
    spec = load_reward("judge", url=transformers_server, model=str(smollm2_dir), retries=1, timeout=120)
    results = spec.score_batch([_rollout("Tesk Mallor"), _rollout("a cat")])
    assert spec._judge.prompter.num_cached == 2  # the real server answered both: no failure fallback
    for result in results:
        assert result.parts["judge"] in (0.0, 1.0) and result.parts["judge_fallback"] in (0.0, 1.0)
    assert spec.score_batch([_rollout("Tesk Mallor"), _rollout("a cat")]) == results  # greedy + cached


@pytest.mark.slow
def test_judge_reward_with_a_local_model(smollm2_dir) -> None:
    spec = load_reward({"base": "judge", "model": str(smollm2_dir), "device": "cpu"})
    result = spec(_rollout("Tesk Mallor"))
    assert spec._judge.prompter.num_cached == 1 and result.parts["judge"] in (0.0, 1.0)
