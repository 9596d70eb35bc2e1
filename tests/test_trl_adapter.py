"""TRL glue: GRPOTrainer with our multi-turn rollout_func, on the generated world, with real SmolLM2 weights."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

from searchenv.adapters.generation import load_policy
from searchenv.adapters.trl import env_reward, make_dataset, make_grpo_trainer, reward_from_spec

ENV_KWARGS = {"dataset": "world", "retriever": "bm25", "reward": "format", "max_turns": 2, "max_information_words": 30}


def brevity(completions, **_):
    """A reward with variance even for an untrained model, so the policy update is not zero."""
    return [1.0 / (1.0 + len(c.split())) for c in completions]


def _trainer(smollm2_dir, tmp_path, max_steps: int):
    torch.set_num_threads(1)
    model, tok = load_policy(str(smollm2_dir))
    args = trl.GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,  # TRL defaults to bf16 autocast, which is ~30x slower than fp32 on this CPU
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=64,
        max_steps=max_steps,
        learning_rate=1e-4,
        beta=0.001,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
    )
    return make_grpo_trainer(
        model, tok, args, ENV_KWARGS, max_new_tokens=16, train_limit=8, reward_funcs=[env_reward, brevity]
    )


def test_two_grpo_steps_on_the_world_complete_and_log_env_metrics(smollm2_dir, tmp_path):
    trainer = _trainer(smollm2_dir, tmp_path, max_steps=2)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 2
    logs = [row for row in trainer.state.log_history if "loss" in row]
    assert len(logs) == 2
    for key in (
        "rewards/env_reward/mean",
        "reward/format_ok",
        "reward/answer_score",
        "episode/valid_searches",
        "episode/invalid_actions",
        "episode/model_tokens",
    ):
        assert key in logs[0], f"{key} missing from {sorted(logs[0])}"
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


def test_trl_loss_ignores_environment_tokens(smollm2_dir, tmp_path):
    trainer = _trainer(smollm2_dir, tmp_path, max_steps=1)
    rows = [trainer.train_dataset[0]] * 2
    batch = trainer._generate_and_score_completions(rows)
    env = (batch["completion_mask"] * (1 - batch["tool_mask"])).bool()
    assert env.any(), "the episodes should contain an information block or a hint"
    batch["advantages"] = torch.tensor([1.0, -1.0])  # the format reward alone is 0 for both: force a gradient

    def grads(inputs):
        trainer.model.zero_grad(set_to_none=True)
        trainer.compute_loss(trainer.model, inputs).backward()
        return [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]

    base = grads(batch)
    perturbed = dict(batch)
    for key in ("ref_per_token_logps", "old_per_token_logps", "sampling_per_token_logps"):
        if key in batch:
            perturbed[key] = torch.where(env, torch.randn_like(batch[key]) * 3, batch[key])
    assert "ref_per_token_logps" in perturbed
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for a, b in zip(base, grads(perturbed)))

    # control: without env_mask TRL would train on those positions and the gradient moves
    unmasked = dict(perturbed, tool_mask=torch.ones_like(batch["tool_mask"]))
    assert not all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for a, b in zip(base, grads(unmasked)))


def test_reward_from_spec_scores_completion_text_and_logs_parts():
    from searchenv.adapters.generation import make_envs

    env = make_envs(1, retriever="random")[0]
    dataset = make_dataset(env, limit=3)
    assert dataset.column_names == ["prompt", "question", "golden_answers", "example_index"]
    row = dataset[0]
    gold = row["golden_answers"][0]
    completions = [
        f"<think> a </think>\n<answer> {gold} </answer>",
        "<think> a </think>\n<answer> nobody </answer>",
        "no tags",
    ]
    logged: dict[str, float] = {}
    score = reward_from_spec("format")
    rewards = score(
        completions,
        golden_answers=[row["golden_answers"]] * 3,
        question=[row["question"]] * 3,
        log_metric=logged.__setitem__,
    )
    assert rewards == [1.0, pytest.approx(0.2), 0.0]
    assert logged["format/em"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="rollout_func"):
        env_reward(completions)
