"""Where a training step's learning signal comes from: the difficulty-filtered question pool, refilled rounds,
expert iteration's choice of episodes, the placebo control, and keeping the best validated checkpoint."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from searchenv.adapters.ppo.pool import QuestionPool, informative_groups, shuffle_within_groups

torch = pytest.importorskip("torch")

from searchenv.adapters.ppo.trainer import PPOConfig, Trainer
from searchenv.reward_specs import RewardResult
from searchenv.rollout import RUN_KEYS, load_policy, make_envs, read_run_settings


# -- the pool (pure) ----------------------------------------------------------------------------------------
def test_the_pool_draws_questions_of_intermediate_pass_rate_most_often():
    pool = QuestionPool(3, hops=[1, 1, 1])
    for _ in range(5):
        pool.record(0, [1.0] * 8)  # always solved
        pool.record(1, [1.0, 0.0] * 4)  # half the time
        pool.record(2, [0.0] * 8)  # never
    rates = pool.pass_rates()
    assert rates[0] > 0.9 and rates[2] < 0.1 and rates[1] == pytest.approx(0.5, abs=0.01)
    drawn = np.bincount([pool.sample(1, np.random.default_rng(s))[0] for s in range(400)], minlength=3)
    assert drawn[1] > 5 * max(drawn[0], drawn[2])  # p(1-p) favours the mixed question
    assert drawn[0] > 0 and drawn[2] > 0  # the floor keeps solved and hopeless questions drawable


def test_a_question_never_played_is_estimated_by_its_hop_count():
    pool = QuestionPool(4, hops=[1, 1, 3, 3])
    pool.record(0, [1.0] * 8)
    pool.record(2, [0.0] * 8)
    rates = pool.pass_rates()
    assert rates[1] == pytest.approx(1.0) and rates[3] == pytest.approx(0.0)  # the hop count's mean so far
    assert pool.hop_pass_rates() == {1: 1.0, 3: 0.0}


def test_an_unfiltered_pool_draws_uniformly_and_respects_what_is_allowed():
    pool = QuestionPool(10, filtered=False)
    pool.record(3, [1.0] * 8)
    assert np.all(pool.weights() == 1.0)
    assert set(pool.sample(3, np.random.default_rng(0), allowed=[2, 5, 7])) <= {2, 5, 7}
    assert pool.sample(5, np.random.default_rng(0), allowed=[4]) == [4] * 5  # fewer allowed than asked: repeats
    with pytest.raises(ValueError, match="no training question is allowed"):
        pool.sample(1, np.random.default_rng(0), allowed=[])
    with pytest.raises(ValueError, match="pool is empty"):
        QuestionPool(0)


def test_informative_groups_and_the_placebo_shuffle():
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    assert informative_groups(rewards, 4) == [0, 2]
    shuffled = shuffle_within_groups(rewards, 4, np.random.default_rng(0))
    for start in range(0, 12, 4):  # each group keeps its rewards, in another order
        assert sorted(shuffled[start : start + 4]) == sorted(rewards[start : start + 4])
    assert informative_groups(shuffled, 4) == [0, 2]  # the same groups count, so the same number of updates
    orders = {tuple(shuffle_within_groups(rewards, 4, np.random.default_rng(s))) for s in range(20)}
    assert len(orders) > 1  # it does move rewards between episodes


def test_expert_iteration_keeps_each_mixed_groups_best_episodes_only():
    from types import SimpleNamespace

    rewards = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.2, 0.7, 0.7, 0.0]
    ei = SimpleNamespace(config=PPOConfig(algorithm="expert-iteration", group_size=4))
    assert Trainer._selected(ei, rewards) == [0, 2, 9, 10]  # the all-right group teaches nothing new


def test_config_refuses_signal_settings_that_cannot_work():
    with pytest.raises(ValueError, match="replay"):
        PPOConfig(algorithm="grpo", replay=4)
    with pytest.raises(ValueError, match="validation"):
        PPOConfig(keep_best=True)
    with pytest.raises(ValueError, match="group_size >= 2"):
        PPOConfig(algorithm="reinforce++", group_size=1, placebo=True)
    with pytest.raises(ValueError, match="group_size >= 2"):
        PPOConfig(algorithm="expert-iteration", group_size=1)
    with pytest.raises(ValueError, match="max_rounds"):
        PPOConfig(max_rounds=0)


# -- real steps -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Brevity:
    """A reward with variance for an untrained model (fewer words score higher), so every group is mixed."""

    name: str = "brevity"

    def __call__(self, rollout) -> RewardResult:
        words = len(rollout.model_text.split())
        return RewardResult(1.0 / (1.0 + words), {"words": float(words)})


@pytest.fixture(scope="module")
def checkpoint(smollm2_dir):
    torch.set_num_threads(1)
    return smollm2_dir


def _trainer(smollm2_dir, tmp_path, **overrides):
    model, tok = load_policy(str(smollm2_dir))
    values = dict(
        algorithm="expert-iteration",
        lr=1e-4,
        prompts_per_step=1,
        group_size=2,
        mini_batch_size=4,
        micro_batch_size=2,
        max_new_tokens=6,
        max_total_tokens=400,
        trainable_layers=2,
        steps=1,
        seed=5,
    )
    config = PPOConfig(**{**values, **overrides})
    envs = make_envs(config.episodes_per_step, retriever="random", reward=Brevity(), max_turns=2)
    settings = {key: "x" for key in RUN_KEYS if key not in ("algorithm", "config")}
    log = tmp_path / "log.jsonl"
    return Trainer(model, tok, envs, config, log_path=log, output_dir=tmp_path, run_settings=settings)


@pytest.mark.slow  # real rollouts and updates of SmolLM2
def test_an_expert_iteration_step_fine_tunes_on_the_groups_best_and_logs_the_signal(checkpoint, tmp_path):
    trainer = _trainer(checkpoint, tmp_path, informative_groups=1, max_rounds=2)
    before = [p.detach().clone() for p in trainer.trained]
    metrics = trainer.step()
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.trained))
    assert metrics["ppo/trained_episodes"] >= 1 and metrics["ppo/replayed"] == 0
    assert metrics["pool/informative_fraction"] > 0 and metrics["pool/rounds"] >= 1
    assert 0.0 <= metrics["pool/pass_rate"] <= 1.0
    assert trainer.pool.played.sum() == 2 * metrics["pool/rounds"]  # the pool recorded every episode played


@pytest.mark.slow
def test_the_placebo_updates_as_often_as_the_real_run_and_best_is_kept(checkpoint, tmp_path):
    real = _trainer(checkpoint, tmp_path / "real")
    placebo = _trainer(checkpoint, tmp_path / "placebo", placebo=True)
    a, b = real.step(), placebo.step()
    assert a["ppo/trained_episodes"] == b["ppo/trained_episodes"]  # same groups, same count, other episodes

    calls = iter([{"val/em": 0.5}, {"val/em": 0.25}])
    best = _trainer(checkpoint, tmp_path / "best", validation=4, keep_best=True, eval_every=1)
    history = best.train(evaluate=lambda _: next(calls), eval_every=1)
    assert history[0]["val/best_step"] == 0 and history[-1]["val/best_em"] == 0.5  # the start stayed best
    assert read_run_settings(tmp_path / "best" / "best")["step"] == 0
    logged = [json.loads(line) for line in (tmp_path / "best" / "log.jsonl").read_text().splitlines()]
    assert [row.get("val/best_em") for row in logged] == [0.5, 0.5]
    assert not list((tmp_path / "best").glob("*.partial-*"))  # saved by rename, nothing half-written left
