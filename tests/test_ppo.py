"""The built-in PPO / GRPO / REINFORCE++ loop: advantages, masking of environment tokens, real update steps."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")

from searchenv.adapters.ppo.batch import collate, split_micro_batches, token_logprobs
from searchenv.adapters.ppo.losses import (
    explained_variance,
    gae_advantages,
    grpo_advantages,
    policy_loss,
    reinforce_pp_advantages,
    token_rewards,
)
from searchenv.adapters.ppo.trainer import PPOConfig, Trainer
from searchenv.reward_specs import RewardResult
from searchenv.rollout import RUN_KEYS, load_policy, make_envs, read_run_settings
from searchenv.tokenization import EpisodeTokens, encode_prompt


# -- advantages (pure tensor maths) -----------------------------------------------------------------------
def test_grpo_advantages_are_normalised_within_each_group_on_model_tokens_only():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    mask = torch.tensor([[1, 1, 0, 1]] * 8, dtype=torch.float32)
    adv = grpo_advantages(rewards, 4, mask)
    first = adv[:4, 0]
    assert first[0] > 0 > first[1] and torch.allclose(first.mean(), torch.tensor(0.0), atol=1e-6)
    assert torch.allclose(first.std(), torch.tensor(1.0), atol=1e-4)
    assert torch.all(adv[4:] == 0)  # a group with equal rewards teaches nothing
    assert torch.all(adv[:, 2] == 0)  # the environment token gets no advantage


def test_gae_with_unit_gamma_lambda_is_return_minus_value_and_skips_env_tokens():
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 0.0]])
    values = torch.tensor([[0.2, 0.3, 9.0, 9.0, 0.5, 9.0]]) * mask
    rewards = token_rewards(torch.tensor([1.0]), mask, kl=None, kl_coef=0.0)
    assert rewards.tolist() == [[0, 0, 0, 0, 1, 0]]  # the outcome lands on the last model token
    adv, ret = gae_advantages(rewards, values, mask, gamma=1.0, lam=1.0)
    assert torch.allclose(adv, torch.tensor([[0.8, 0.7, 0, 0, 0.5, 0]]))
    assert torch.allclose(ret, torch.tensor([[1.0, 1.0, 0, 0, 1.0, 0]]))


def test_reinforce_pp_returns_carry_across_env_tokens_and_are_whitened_over_the_batch():
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    kl = torch.tensor([[0.5, 7.0, 0.5, 7.0], [0.0, 0.0, 7.0, 7.0]])
    rewards = token_rewards(torch.tensor([1.0, 0.0]), mask, kl=kl, kl_coef=0.1)
    assert torch.allclose(rewards, torch.tensor([[-0.05, 0, 0.95, 0], [0, 0, 0, 0]]))  # KL only on model tokens
    adv = reinforce_pp_advantages(rewards, mask, gamma=1.0)
    # raw returns: row 0 -> [0.9, ., 0.95, .], row 1 -> [0, 0, ., .]; whitening keeps their order
    assert adv[0, 2] > adv[0, 0] > adv[1, 0] == adv[1, 1]
    assert torch.allclose((adv * mask).sum(), torch.tensor(0.0), atol=1e-5)
    assert torch.all(adv[mask == 0] == 0)


# -- the loss does not see environment tokens ----------------------------------------------------------------
@pytest.fixture(scope="module")
def policy(smollm2_dir):
    torch.set_num_threads(1)
    return load_policy(str(smollm2_dir))


def _episode(tokenizer, question: str, parts: list[tuple[str, str]]):
    builder = EpisodeTokens(tokenizer, encode_prompt(tokenizer, question))
    for author, text in parts:
        if author == "model":
            builder.add_model(tokenizer(text, add_special_tokens=False)["input_ids"], None)
        else:
            builder.add_env(text)
    return builder.result()


def _grads(model, batch, old, ref, adv) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    logprobs = token_logprobs(model, batch)
    loss, _ = policy_loss(logprobs, old, adv, batch.loss_mask, 0.2, ref, 0.001)
    loss.backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.slow  # SmolLM2 de-quantised (about 48 s)
def test_policy_gradient_is_independent_of_environment_tokens(policy):
    model, tok = policy
    episodes = [
        _episode(
            tok,
            "Q one?",
            [
                ("model", "<search> a </search>"),
                ("env", "\n\n<information>x y z</information>\n\n"),
                ("model", "<answer> b </answer>"),
            ],
        ),
        _episode(tok, "Question two?", [("model", "hmm"), ("env", "\nMy previous action is invalid.\n")]),
    ]
    batch = collate(episodes, [1.0, 0.0], tok.pad_token_id)
    mask = batch.loss_mask
    env = (batch.response_mask > 0) & (mask == 0)
    assert env.any() and (mask > 0).any()
    with torch.no_grad():
        old = token_logprobs(model, batch) + 0.05 * mask
        ref = old - 0.1
    adv = torch.tensor([[1.0], [-1.0]]).expand_as(mask).clone()
    base = _grads(model, batch, old, ref, adv)

    # perturb everything that lives on environment positions: stored logprobs, advantages, and the ids of the
    # trailing hint of episode 2 (no model token follows it, so it only ever appears as a target)
    noise = torch.randn_like(old) * 3
    perturbed = collate(episodes, [1.0, 0.0], tok.pad_token_id)
    tail = env[1].nonzero().flatten() + perturbed.prompt_width
    perturbed.input_ids[1, tail] = torch.randint(100, 5000, (len(tail),))
    moved = _grads(
        model, perturbed, torch.where(env, noise, old), torch.where(env, noise, ref), torch.where(env, noise, adv)
    )
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for a, b in zip(base, moved))

    # control: the same perturbation on a model token does change the gradient
    first_model = mask[0].nonzero()[0, 0]
    adv_changed = adv.clone()
    adv_changed[0, first_model] = 5.0
    changed = _grads(model, batch, old, ref, adv_changed)
    assert not all(torch.allclose(a, b, atol=1e-6, rtol=1e-5) for a, b in zip(base, changed))


# -- a few real steps change the weights ---------------------------------------------------------------------
@dataclass(frozen=True)
class WordCountReward:
    """A user-supplied reward with variance even for an untrained model: fewer words score higher."""

    name: str = "brevity"

    def __call__(self, rollout) -> RewardResult:
        words = len(rollout.model_text.split())
        return RewardResult(1.0 / (1.0 + words), {"words": float(words)})


@pytest.mark.slow  # SmolLM2 de-quantised (about 48 s) and real update steps
@pytest.mark.parametrize("algorithm", ["grpo", "ppo", "reinforce++"])
def test_a_step_of_each_algorithm_updates_the_policy(smollm2_dir, tmp_path, algorithm):
    torch.set_num_threads(1)
    model, tok = load_policy(str(smollm2_dir))
    config = PPOConfig(
        algorithm=algorithm,
        lr=1e-4,
        critic_lr=1e-3,
        prompts_per_step=2 if algorithm != "grpo" else 1,
        group_size=2 if algorithm == "grpo" else 1,
        mini_batch_size=2,
        micro_batch_size=1,
        max_new_tokens=8,
        max_total_tokens=400,
        steps=1,
        seed=3,
    )
    envs = make_envs(
        config.episodes_per_step, retriever="random", reward=WordCountReward(), max_turns=2, max_information_words=20
    )
    before = [p.detach().clone() for p in model.parameters()]
    settings = {key: "x" for key in RUN_KEYS if key not in ("algorithm", "config")}
    trainer = Trainer(
        model, tok, envs, config, log_path=tmp_path / "log.jsonl", output_dir=tmp_path, run_settings=settings
    )
    critic_before = trainer.critic.head.bias.detach().clone() if trainer.critic is not None else None
    (metrics,) = trainer.train()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.reference.parameters()))  # reference is frozen
    if critic_before is not None:
        assert not torch.equal(critic_before, trainer.critic.head.bias)
    logged = json.loads((tmp_path / "log.jsonl").read_text().splitlines()[0])
    keys = ["reward", "rollout/model_tokens", "num_searches", "num_invalid", "reward/words", "end_reason/answer"]
    keys += ["ppo/kl", "ppo/loss", "ppo/entropy", "ppo/approx_kl", "ppo/clipfrac", "ppo/grad_norm"]
    keys += ["ppo/rollout_tokens_per_s", "ppo/update_tokens_per_s"]
    keys += ["ppo/explained_variance", "ppo/value_loss"] if algorithm == "ppo" else []
    for key in keys:
        assert key in logged and logged[key] == pytest.approx(metrics[key], nan_ok=True)
    assert logged["ppo/loss"] == logged["ppo/loss"] and logged["ppo/entropy"] > 0  # not NaN
    # the checkpoint is saved by default at the end, with what replaying it needs
    saved = read_run_settings(tmp_path / "final")
    assert saved["algorithm"] == algorithm and saved["config"]["group_size"] == config.group_size
    assert saved["config"]["value_clip"] == 0.5 and (tmp_path / "final" / "model.safetensors").exists()


def test_config_and_trainer_reject_inconsistent_settings(policy):
    with pytest.raises(ValueError, match="group_size >= 2"):
        PPOConfig(algorithm="grpo", group_size=1)
    with pytest.raises(ValueError, match="algorithm"):
        PPOConfig(algorithm="dpo")  # type: ignore[arg-type]
    model, tok = policy
    with pytest.raises(ValueError, match="one environment per episode"):
        Trainer(model, tok, make_envs(1, retriever="random"), PPOConfig(prompts_per_step=1, group_size=2))


def test_cli_options_reach_the_config_and_the_log_plots(tmp_path):
    import argparse

    from searchenv.adapters.ppo import train as train_ppo
    from searchenv.cli.parsers import CommandParser

    commands = argparse.ArgumentParser().add_subparsers(dest="command", parser_class=CommandParser)
    train_ppo.add_parser(commands)
    words = ["--algorithm", "reinforce++", "--group-size", "1", "--chat-template", "off", "--lr", "2e-6"]
    for parser in (commands.choices["train-ppo"], train_ppo.build_parser()):  # `searchenv train-ppo`, python -m
        args = parser.parse_args(words)
        assert (args.algorithm, args.group_size, args.chat_template, args.lr) == ("reinforce++", 1, "off", 2e-6)
    log = tmp_path / "log.jsonl"
    log.write_text(
        "".join(
            json.dumps({"step": s, "reward": s / 4, "num_searches": 1, "rollout/model_tokens": 9}) + "\n"
            for s in range(1, 5)
        )
    )
    train_ppo.plot_log(log, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- log-probabilities without the full-vocabulary tensor -----------------------------------------------------
@pytest.mark.slow  # SmolLM2 de-quantised (about 48 s)
def test_chunked_logprobs_and_entropy_equal_the_full_log_softmax(policy):
    model, tok = policy
    episodes = [
        _episode(tok, "Q one?", [("model", "<search> a </search>"), ("env", "<information>x</information>")]),
        _episode(tok, "Question two?", [("model", "hmm <answer> b </answer>")]),
    ]
    batch = collate(episodes, [1.0, 0.0], tok.pad_token_id)
    width = batch.input_ids.shape[1] - batch.prompt_width
    with torch.no_grad():
        positions = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=positions).logits
        logits = logits[:, batch.prompt_width - 1 : -1].float() / 0.7
        full = logits.log_softmax(-1)
        expected = full.gather(-1, batch.input_ids[:, batch.prompt_width :].unsqueeze(-1)).squeeze(-1)
        expected_entropy = -(full.exp() * full).sum(-1)
        got, entropy = token_logprobs(model, batch, temperature=0.7, chunk=7, with_entropy=True)
    assert got.shape == (2, width)
    real = batch.loss_mask > 0  # the model's own tokens; environment tokens and padding read 0
    assert torch.allclose(got[real], expected[real], atol=1e-4) and not got[batch.loss_mask == 0].any()
    # entropy sums p·log p over the whole vocabulary: float32 rounding grows with it (relative, not absolute)
    assert torch.allclose(entropy[real], expected_entropy[real], rtol=1e-3, atol=1e-3)
    # with autograd the chunks are recomputed in the backward pass; gradients flow to the weights
    model.zero_grad(set_to_none=True)
    token_logprobs(model, batch, chunk=5)[real].sum().backward()
    assert model.get_output_embeddings().weight.grad.abs().sum() > 0
    model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("bf16", [False, True])
def test_log_probabilities_entropy_and_their_gradients_equal_autograd_through_the_full_softmax(bf16):
    """The lm head's own backward pass (logits computed again, one sweep for both outputs) gives the gradients that
    autograd through the full log-softmax gives, for the log-probabilities and the entropy, with a temperature, a
    head bias, and under bf16 autocast."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from searchenv.tokenization import TokenizedEpisode

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=97, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2
    )
    model = LlamaForCausalLM(config)
    model.lm_head.bias = torch.nn.Parameter(torch.randn(97) * 0.1)
    episodes = [
        TokenizedEpisode([5, 6, 7], [8, 9, 10, 11, 12], [1, 1, 0, 1, 1]),
        TokenizedEpisode([5, 6], [13, 14, 15], [1, 0, 1]),
    ]
    batch = collate(episodes, [1.0, 0.0], 0)
    weights = torch.rand(batch.loss_mask.shape)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)

    def gradients(logprobs, entropy):
        model.zero_grad(set_to_none=True)
        ((logprobs * weights).sum() + (entropy * weights.flip(-1) * batch.loss_mask).sum()).backward()
        return [p.grad.clone() for p in model.parameters()]

    with autocast:
        got = token_logprobs(model, batch, temperature=0.7, chunk=3, with_entropy=True)
    with autocast:
        positions = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=positions).logits
    full = (logits[:, batch.prompt_width - 1 : -1].float() / 0.7).log_softmax(-1)
    chosen = full.gather(-1, batch.input_ids[:, batch.prompt_width :, None]).squeeze(-1) * batch.loss_mask
    expected = (chosen, -(full.exp() * full).sum(-1) * batch.loss_mask)
    tolerance = 2e-2 if bf16 else 1e-5
    for value, want in zip(got, expected):
        assert torch.allclose(value, want, atol=tolerance)
    for grad, want in zip(gradients(*got), gradients(*expected)):
        assert torch.allclose(grad, want, atol=tolerance * max(1.0, float(want.abs().max())))


def test_a_shared_prompt_runs_once_with_the_logprobs_and_gradients_of_separate_passes(policy):
    """A GRPO group shares its prompt: one pass over it, keys and values copied to each episode, gives the per-token
    log-probabilities and the gradient of one full pass per episode."""
    model, tok = policy
    episodes = [
        _episode(
            tok,
            "Who founded Orvane Abbey?",
            [("model", "<search> a </search>"), ("env", "\n\n<information>x y"), ("model", "b")],
        ),
        _episode(tok, "Who founded Orvane Abbey?", [("model", "<answer> Tesk Mallor </answer>")]),
        _episode(tok, "Q two?", [("model", "hmm"), ("env", "\nMy previous action is invalid.\n")]),
    ]
    batch = collate(episodes, [1.0, 0.0, 0.5], tok.pad_token_id)
    positions = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)

    def separate_passes():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=positions).logits
        logp = logits[:, batch.prompt_width - 1 : -1].float().log_softmax(-1)
        return logp.gather(-1, batch.input_ids[:, batch.prompt_width :, None]).squeeze(-1) * batch.loss_mask

    def gradient(logprobs):
        model.zero_grad(set_to_none=True)
        (logprobs * torch.linspace(0.5, 1.5, logprobs.numel()).view_as(logprobs)).sum().backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        model.zero_grad(set_to_none=True)
        return grads

    expected = separate_passes()
    shared = token_logprobs(model, batch)
    assert torch.allclose(shared, expected, atol=1e-4)
    for got, want in zip(gradient(token_logprobs(model, batch)), gradient(separate_passes())):
        assert torch.allclose(got, want, atol=1e-3 * max(1.0, float(want.abs().max())))


def test_micro_batches_take_the_order_that_runs_fewer_token_positions():
    """Short prompts and responses of very different lengths: rows by length (less padding) beat groups kept
    together; long prompts and similar responses: the group order (each prompt once) wins."""
    from searchenv.tokenization import TokenizedEpisode

    def rows_of(prompts: list[list[int]], lengths: list[int]) -> list[list[int]]:
        episodes = [TokenizedEpisode(p, [7] * n, [1] * n) for p, n in zip(prompts, lengths)]
        batch = collate(episodes, [0.0] * len(episodes), 0)
        return [part.tolist() for part in split_micro_batches(batch, torch.arange(len(episodes)), 2)]

    short = [[1, 2], [1, 2], [3, 4], [3, 4]]
    assert rows_of(short, [1, 50, 2, 60]) == [[0, 2], [1, 3]]  # by length: 2·2 + 2·60 (+ 4 prompt tokens a part)
    long = [[1] * 40, [1] * 40, [2] * 40, [2] * 40]
    assert rows_of(long, [10, 12, 11, 13]) == [[0, 1], [2, 3]]  # by group: one prompt a part


def test_micro_batches_keep_groups_together_and_drop_only_columns_every_row_pads(policy):
    """Rows sharing a prompt go to one micro-batch, shortest response first; a micro-batch whose rows all pad a
    column (a shorter prompt, shorter responses than the batch's longest) gives the log-probabilities the whole
    batch gives those rows, at the batch's response width."""
    model, tok = policy
    long_question = "Which river runs through the old capital of the northern province, and who named it?"
    episodes = [
        _episode(tok, "Q two?", [("model", "<answer> b </answer>")]),
        _episode(
            tok,
            long_question,
            [("model", "<search> a </search>"), ("env", "\n<information>x y z w v u t s r q p"), ("model", "b c")],
        ),
        _episode(tok, "Q two?", [("model", "hmm <search> b </search>"), ("env", "\n<information>q</information>")]),
        _episode(tok, long_question, [("model", "<answer> c </answer>")]),
    ]
    batch = collate(episodes, [1.0, 0.0, 0.5, 0.0], tok.pad_token_id)
    parts = split_micro_batches(batch, torch.tensor([3, 2, 1, 0]), 2)
    assert [part.tolist() for part in parts] == [[0, 2], [3, 1]]
    with torch.no_grad():
        whole = token_logprobs(model, batch)
        short = batch.select(parts[0])  # shorter prompts and responses: padding columns in every row
        assert not short.attention_mask[:, 0].any() and not short.response_mask[:, -1].any()
        got = token_logprobs(model, short)
    assert got.shape == (2, whole.shape[1])
    assert torch.allclose(got, whole[parts[0]], atol=1e-4) and got[short.loss_mask > 0].ne(0).all()


def test_explained_variance_is_one_for_a_perfect_critic_and_zero_for_a_constant_one():
    mask = torch.tensor([[1.0, 1.0, 0.0, 1.0]])
    returns = torch.tensor([[1.0, 2.0, 50.0, 3.0]])
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(returns, 2.0), returns, mask) == pytest.approx(0.0)


# -- configuration ------------------------------------------------------------------------------------------
def test_paper_config_has_search_r1_batch_value_clip_and_entropy():
    grpo = PPOConfig.paper("grpo")
    assert (grpo.prompts_per_step, grpo.group_size, grpo.episodes_per_step) == (512, 5, 2560)
    assert grpo.mini_batch_size == 256 * 5 and grpo.lr == 5e-7 and grpo.bf16
    ppo = PPOConfig.paper("ppo")
    assert (ppo.prompts_per_step, ppo.group_size, ppo.mini_batch_size, ppo.micro_batch_size) == (512, 1, 256, 64)
    assert ppo.value_clip == 0.5 and ppo.entropy_coef == 0.001 and ppo.lr == 1e-6


def test_trainer_refuses_low_precision_master_weights(policy):
    model, tok = policy
    half = copy.deepcopy(model).to(torch.bfloat16)
    with pytest.raises(ValueError, match="float32"):
        Trainer(
            half, tok, make_envs(1, retriever="random"), PPOConfig(prompts_per_step=1, group_size=1, algorithm="ppo")
        )


def test_curriculum_draws_one_hop_questions_first(policy):
    model, tok = policy
    config = PPOConfig(prompts_per_step=4, group_size=1, algorithm="reinforce++", curriculum_steps=2, kl_coef=0.0)
    trainer = Trainer(model, tok, make_envs(4, retriever="random"), config)
    hops = [ex.metadata["hops"] for ex in trainer.examples]
    assert {hops[i] for _ in range(5) for i in trainer.sample_indices()} == {1}
    trainer.global_step = 2
    assert max(hops[i] for _ in range(20) for i in trainer.sample_indices()) == 2


def test_min_hops_and_validation_shape_what_is_sampled(policy):
    model, tok = policy
    config = PPOConfig(prompts_per_step=8, group_size=1, algorithm="reinforce++", min_hops=3, validation=100)
    trainer = Trainer(model, tok, make_envs(8, retriever="random"), config)
    drawn = {i for _ in range(20) for i in trainer.sample_indices()}
    assert all(trainer.examples[i].metadata["hops"] >= 3 for i in drawn)
    assert max(drawn) < len(trainer.examples) - 100  # the validation questions are never trained on
    with pytest.raises(ValueError, match="leave some to train on"):
        Trainer(
            model,
            tok,
            make_envs(8, retriever="random"),
            PPOConfig(prompts_per_step=8, group_size=1, algorithm="reinforce++", validation=900),
        )


def test_grpo_leaves_out_groups_whose_rewards_are_all_equal():
    """An all-equal group has zero advantage everywhere: before, it was updated on the entropy bonus alone."""
    from types import SimpleNamespace

    rewards = [1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5]
    grpo = SimpleNamespace(config=PPOConfig(algorithm="grpo", group_size=4, drop_uniform_groups=True))
    assert Trainer._selected(grpo, rewards) == list(range(8))  # the third group is all 0.5
    kept = SimpleNamespace(config=PPOConfig(algorithm="grpo", group_size=4, drop_uniform_groups=False))
    assert Trainer._selected(kept, rewards) == list(range(12))


def test_cpu_recipe_is_the_default_and_paper_switches_every_default(tmp_path):
    from searchenv.adapters.ppo import train as train_ppo

    args = train_ppo.build_parser().parse_args([])
    assert (args.reward, args.demonstration, args.chat_template) == ("r1-searcher-stage1", True, "off")
    assert args.curriculum_steps > 0 and args.output_dir
    assert train_ppo.env_kwargs(args)["protocol"] == "search-r1-fewshot"
    words = ["--paper", "--algorithm", "grpo", "--model", "/models/qwen", "--topk", "5"]
    args = train_ppo.build_parser().parse_args(words)
    assert (args.reward, args.demonstration, args.chat_template, args.max_turns) == ("em", False, "auto", 4)
    assert (args.prompts_per_step, args.group_size, args.topk, args.bf16) == (512, 5, 5, True)
    settings = train_ppo.run_settings(args, "grpo", {"lr": args.lr})
    assert set(RUN_KEYS) <= set(settings) and settings["protocol"] == "search-r1"
    assert settings["max_new_tokens"] == 500  # the per-turn budget `searchenv eval` replays


def test_two_stage_recipe_trains_search_first_then_answers():
    from searchenv.adapters.ppo import train as train_ppo

    args = train_ppo.build_parser().parse_args(["--recipe", "two-stage", "--steps", "5"])
    assert (args.max_turns, args.max_new_tokens, args.steps) == (3, 40, 5)  # room to answer after a search
    (first_name, first), (second_name, second) = train_ppo.stages(args)
    assert (first_name, first.reward, first.steps) == ("stage1", "r1-searcher-stage1", args.stage1_steps)
    assert (second_name, second.reward, second.steps) == ("stage2", "r1-searcher-stage2", 5)
    assert train_ppo.stages(train_ppo.build_parser().parse_args([])) == [("", train_ppo.build_parser().parse_args([]))]
    with pytest.raises(ValueError, match="--stage1-steps"):
        train_ppo.stages(train_ppo.build_parser().parse_args(["--stage1-steps", "-1"]))


@pytest.mark.slow
def test_two_stage_run_logs_both_stages_and_saves_each_checkpoint(tmp_path, smollm2_dir):
    from searchenv.adapters.ppo import train as train_ppo

    log = tmp_path / "log.jsonl"
    words = ["--recipe", "two-stage", "--model", str(smollm2_dir), "--retriever", "random", "--stage1-steps", "1"]
    words += ["--steps", "1", "--prompts-per-step", "1", "--group-size", "2", "--mini-batch-size", "2"]
    words += ["--micro-batch-size", "2", "--max-turns", "1", "--max-new-tokens", "2"]
    words += ["--output-dir", str(tmp_path / "out"), "--log", str(log)]
    train_ppo.run(train_ppo.build_parser().parse_args(words))
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [1, 2]
    rewards = [read_run_settings(tmp_path / "out" / s / "final")["reward"] for s in ("stage1", "stage2")]
    assert rewards == ["r1-searcher-stage1", "r1-searcher-stage2"]
