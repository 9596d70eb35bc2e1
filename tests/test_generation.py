"""The shared multi-turn rollout: token-in/token-out ids, loss masks, batched retrieval, real SmolLM2 sampling."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from searchenv.rollout import (
    GeneratedTurn,
    HFGenerator,
    SamplingConfig,
    load_policy,
    make_envs,
    rollout,
)
from tests.toyworld import CORPUS, QUESTIONS, ScriptedRetriever

torch = pytest.importorskip("torch")


class ScriptedGenerator:
    """A TurnGenerator that replays fixed token ids per question (for tokenizers without a model, e.g. Qwen's).

    It records every turn it returned, so tests can compare the episode's ids with what was "generated".
    """

    def __init__(self, tokenizer, scripts: dict[str, list[list[int]]]):
        self.tokenizer = tokenizer
        self.scripts = scripts
        self.returned: dict[str, list[list[int]]] = {q: [] for q in scripts}

    def generate(self, contexts: Sequence[Sequence[int]], stop_strings, max_new_tokens) -> list[GeneratedTurn]:
        turns = []
        for context, cap in zip(contexts, max_new_tokens):
            text = self.tokenizer.decode(list(context))
            question = next(q for q in self.scripts if q in text)
            ids = self.scripts[question][len(self.returned[question])][:cap]
            self.returned[question].append(ids)
            turns.append(GeneratedTurn(ids, [-0.5] * len(ids)))
        return turns


class RecordingGenerator(HFGenerator):
    """The real HF engine, recording each (context, sampled ids) pair."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records: list[tuple[list[int], list[int]]] = []

    def generate(self, contexts, stop_strings, max_new_tokens):
        turns = super().generate(contexts, stop_strings, max_new_tokens)
        self.records.extend((list(c), t.token_ids) for c, t in zip(contexts, turns))
        return turns


def _toy_envs(n: int, retriever) -> list:
    return make_envs(n, dataset=QUESTIONS, corpus=CORPUS, retriever=retriever, reward="em", max_turns=3)


def test_qwen_masks_ids_and_one_search_call_per_turn(qwen_tokenizer):
    tok = qwen_tokenizer
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    assert tok.pad_token_id == eos  # the trap: padding and end-of-text share one id

    def enc(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"]

    q0, q1 = QUESTIONS[0]["question"], QUESTIONS[1]["question"]
    scripts = {
        # runs past the closing tag: the tail must be cut with the text the environment drops
        q0: [
            enc("<think> look it up </think><search> Valtmora Guild founder </search> and more words"),
            enc("<answer> Ilsa Brevondt </answer>") + [eos],
        ],
        # an invalid turn ending in EOS (== pad id), then a search, then the answer
        q1: [
            enc("I am not sure.") + [eos],
            enc("<search> Ilsa Brevondt </search>"),
            enc("<answer> Quarnessa </answer>"),
        ],
    }
    retriever = ScriptedRetriever()
    envs = _toy_envs(2, retriever)
    generator = ScriptedGenerator(tok, scripts)
    results = rollout(envs, generator, SamplingConfig(max_new_tokens=64), indices=[0, 1], seed=0)

    # one batched search call per turn that had searches: turn 1 (q0) and turn 2 (q1)
    assert [len(c) for c in retriever.calls] == [1, 1]
    assert [r.reward for r in results] == [1.0, 1.0]
    first = results[0].tokens
    cut = enc("<think> look it up </think><search> Valtmora Guild founder </search>")
    assert generator.returned[q0][0][: len(cut)] == cut
    # the EOS after </answer> is dropped with the text after the tag, like the words after </search>
    expected_model_ids = {
        q0: cut + generator.returned[q0][1][:-1],
        q1: [t for turn in generator.returned[q1] for t in turn],
    }
    for result, question in zip(results, (q0, q1)):
        tokens = result.tokens
        assert len(tokens.loss_mask) == len(tokens.response_ids) == len(tokens.logprobs)
        # model tokens are exactly the generated ids (cut after the closing tag), never re-encoded
        assert [t for t, m in zip(tokens.response_ids, tokens.loss_mask) if m] == expected_model_ids[question]
        assert all(lp == (-0.5 if m else 0.0) for lp, m in zip(tokens.logprobs, tokens.loss_mask))
    # EOS/pad ids that the model generated are model tokens (mask 1), not padding
    second = results[1].tokens
    eos_positions = [i for i, t in enumerate(second.response_ids) if t == eos]
    assert eos_positions and all(second.loss_mask[i] == 1 for i in eos_positions)
    # the environment block starts right after the model's </search> with its newlines intact
    boundary = first.loss_mask.index(0)
    env_len = first.loss_mask[boundary:].index(1)
    env_text = tok.decode(first.response_ids[boundary : boundary + env_len])
    assert env_text.startswith("\n\n<information>") and env_text.endswith("</information>\n\n")
    assert first.response_ids[boundary : boundary + env_len] == enc(env_text)
    assert results[1].metrics["num_invalid"] == 1.0 and results[1].metrics["num_searches"] == 1.0
    assert results[1].metrics["end_reason/answer"] == 1.0


def test_token_budget_truncates_without_reward(qwen_tokenizer):
    tok = qwen_tokenizer
    words = tok("<think> " + "word " * 40, add_special_tokens=False)["input_ids"]
    q0 = QUESTIONS[0]["question"]
    envs = _toy_envs(1, ScriptedRetriever())
    generator = ScriptedGenerator(tok, {q0: [words, words, words]})
    sampling = SamplingConfig(max_new_tokens=30, max_response_tokens=50)
    (result,) = rollout(envs, generator, sampling, indices=[0])
    assert result.metrics["end_reason/context_limit"] == 1.0 and result.reward == 0.0
    assert envs[0].episode.end_reason == "context_limit"
    assert result.metrics["rollout/model_tokens"] <= 50
    assert len(result.tokens.loss_mask) == len(result.tokens.response_ids)


def test_smollm2_rollout_is_deterministic_and_keeps_sampled_ids(smollm2_dir):
    torch.set_num_threads(1)
    model, tok = load_policy(str(smollm2_dir))
    assert tok.pad_token_id == tok.eos_token_id  # SmolLM2 pads with its end-of-turn token
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=16, max_total_tokens=400)
    envs = make_envs(2, retriever="random", max_turns=2, max_information_words=30)

    def run():
        generator = RecordingGenerator(model, tok, sampling)
        return generator, rollout(envs, generator, sampling, indices=[0, 1], seed=7)

    gen_a, first = run()
    gen_b, second = run()
    assert [r.tokens.response_ids for r in first] == [r.tokens.response_ids for r in second]
    assert gen_a.records == gen_b.records
    stop_strings = envs[0].unwrapped.protocol.stop_strings
    for result in first:
        tokens = result.tokens
        assert len(tokens.loss_mask) == len(tokens.response_ids)
        full = tokens.prompt_ids + tokens.response_ids
        turns = [(c, ids) for c, ids in gen_a.records if full[: len(c)] == c]
        assert len(turns) == result.metrics["num_actions"]
        for context, sampled in turns:
            start = len(context) - len(tokens.prompt_ids)
            run_length = next(
                (i for i, m in enumerate(tokens.loss_mask[start:]) if m == 0), len(tokens.loss_mask) - start
            )
            kept = tokens.response_ids[start : start + run_length]
            # the model's turn is the sampled ids themselves, cut only right after a closing tag
            assert kept == sampled[: len(kept)]
            if len(kept) < len(sampled):
                assert any(tok.decode(kept).endswith(s) for s in stop_strings)
        assert all(lp <= 0.0 for lp, m in zip(tokens.logprobs, tokens.loss_mask) if m)
        assert all(lp == 0.0 for lp, m in zip(tokens.logprobs, tokens.loss_mask) if not m)
        assert result.metrics["rollout/model_tokens"] == sum(tokens.loss_mask)
        eos_at = [i for i, t in enumerate(tokens.response_ids) if t == tok.eos_token_id]
        assert all(tokens.loss_mask[i] == 1 for i in eos_at)  # pad == EOS, yet generated EOS stays a model token


def test_padding_after_a_stop_string_is_not_an_unsampled_eos(smollm2_dir):
    """Rows that stop at a stop string are padded with pad == EOS while others go on; that EOS is not kept."""
    torch.set_num_threads(1)
    model, tok = load_policy(str(smollm2_dir))
    assert tok.pad_token_id == tok.eos_token_id
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=12)
    generator = HFGenerator(model, tok, sampling)
    torch.manual_seed(0)
    context = tok("The sea is", add_special_tokens=False)["input_ids"]
    turns = generator.generate([context] * 6, ["e"], [12] * 6)  # "e" stops rows after different numbers of tokens
    lengths = {len(t.token_ids) for t in turns}
    assert len(lengths) > 1, "rows should stop at different lengths, so the shorter ones are padded"
    for turn in turns:
        assert len(turn.logprobs) == len(turn.token_ids)
        text = tok.decode(turn.token_ids)
        if "e" in text:  # stopped at the stop string: it is the end, nothing the model did not sample follows
            assert turn.token_ids[-1] != tok.eos_token_id
    # the vocabulary scan behind a stop-string criterion runs once per stop set, not once per turn
    assert generator.stop_criterion(["e"]) is generator.stop_criterion(["e"])
    assert generator.stop_criterion(["e"]) is not generator.stop_criterion(["e", "x"])


def test_sampled_length_tells_a_sampled_eos_from_padding(smollm2_tokenizer):
    from searchenv.rollout import sampled_length

    tok = smollm2_tokenizer
    eos = tok.eos_token_id
    action = tok("<search> Brosara </search>", add_special_tokens=False)["input_ids"]
    stops = ["</search>", "</answer>"]
    assert sampled_length(action + [eos, eos], {eos}, eos, stops, tok) == len(action)  # padding
    words = tok("I am not sure.", add_special_tokens=False)["input_ids"]
    assert sampled_length(words + [eos, eos], {eos}, eos, stops, tok) == len(words) + 1  # sampled EOS is kept
    assert sampled_length(words, {eos}, eos, stops, tok) == len(words)  # ran to the cap
    assert sampled_length(words + [0, 0], {eos}, 0, stops, tok) == len(words)  # pad differs from EOS


def test_load_policy_gives_float32_master_weights_for_a_bf16_checkpoint(smollm2_tokenizer, tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = smollm2_tokenizer
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert '"bfloat16"' in (tmp_path / "config.json").read_text()
    model, _ = load_policy(str(tmp_path))
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    model, _ = load_policy(str(tmp_path), dtype=None)  # the checkpoint's own dtype, for inference
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_run_settings_round_trip_and_reject_incomplete_settings(tmp_path):
    from searchenv.rollout import RUN_KEYS, read_run_settings, write_run_settings

    settings = {key: f"value-{key}" for key in RUN_KEYS} | {"retriever_options": {"nprobe": 8}, "max_turns": 2}
    write_run_settings(tmp_path, settings, step=3)
    assert read_run_settings(tmp_path) == settings | {"step": 3}
    with pytest.raises(ValueError, match="reward"):
        write_run_settings(tmp_path / "other", {k: v for k, v in settings.items() if k != "reward"})
    with pytest.raises(FileNotFoundError, match="searchenv_run.json"):
        read_run_settings(tmp_path / "missing")


def test_a_rollout_tells_the_environment_the_training_step_its_schedules_read(qwen_tokenizer):
    """A degraded engine's schedule follows the trainer's step (``policy_version``), not its search calls."""
    from searchenv.retrievers.degraded.wrappers import NoisyRetriever

    tok = qwen_tokenizer
    q0 = QUESTIONS[0]["question"]
    noisy = NoisyRetriever(ScriptedRetriever(), CORPUS, p=[[0, 0.0], [10, 1.0]], seed=0)
    envs = make_envs(1, dataset=QUESTIONS, corpus=CORPUS, retriever=noisy, reward="em", max_turns=3)
    answer = tok("<answer> x </answer>", add_special_tokens=False)["input_ids"]
    rollout(envs, ScriptedGenerator(tok, {q0: [answer]}), SamplingConfig(max_new_tokens=16), indices=[0])
    assert noisy.step == 0  # no policy version: nothing told
    rollout(envs, ScriptedGenerator(tok, {q0: [answer]}), SamplingConfig(), indices=[0], policy_version=5)
    assert noisy.step == 5 and noisy.p == 0.5
