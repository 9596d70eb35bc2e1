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


@pytest.fixture(scope="module")
def smollm2(smollm2_dir):
    torch.set_num_threads(1)
    return load_policy(str(smollm2_dir))


def _teacher_forced_logprobs(model, context: list[int], sampled: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([context + sampled])).logits[0, len(context) - 1 : -1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(sampled)[:, None]).squeeze(-1).tolist()


def test_the_engine_decodes_as_transformers_does_with_exact_logprobs(smollm2):
    """Rows of different lengths in one batch (padding inside the cache) decode exactly as each alone through
    ``model.generate``, and each sampled token's log-probability is the model's for it."""
    model, tok = smollm2
    texts = ["The capital of France is", "Once upon a time, in a land far away, there lived", "1, 2, 3,"]
    contexts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    engine = HFGenerator(model, tok, SamplingConfig(temperature=0, max_new_tokens=12))
    turns = engine.generate(contexts, ["."], [12, 12, 5])
    assert len(turns[2].token_ids) <= 5  # each row has its own cap
    for context, turn in zip(contexts, turns):
        alone = model.generate(
            torch.tensor([context]), max_new_tokens=len(turn.token_ids), do_sample=False, pad_token_id=tok.pad_token_id
        )
        assert turn.token_ids == alone[0, len(context) :].tolist()
        assert turn.logprobs == pytest.approx(_teacher_forced_logprobs(model, context, turn.token_ids), abs=1e-4)
        assert "." not in tok.decode(turn.token_ids[:-1])  # a row stops at the token that completes a stop string


def test_a_later_turn_feeds_only_what_is_new_and_gives_what_a_fresh_engine_gives(smollm2):
    """The KV cache kept between the turns of an episode: the second turn feeds the model the environment's text
    and the last sampled token, not the whole context again, with the same result as a fresh engine."""
    model, tok = smollm2
    fed: list[int] = []
    hook = model.get_input_embeddings().register_forward_pre_hook(lambda _, args: fed.append(args[0].numel()))
    try:
        sampling = SamplingConfig(temperature=0, max_new_tokens=10)
        engine = HFGenerator(model, tok, sampling)
        texts = ["Say hello to", "Paris is the capital of", "The capital of France is", "1, 2, 3,"]
        contexts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
        first = engine.generate(contexts, ["."], [10, 10, 10, 3])  # rows end at different steps: some are parked
        assert len({len(t.token_ids) for t in first}) > 1
        inserted = tok("\n\n<information>Doc 1(Title: X) y</information>\n\n", add_special_tokens=False)["input_ids"]
        later = [c + t.token_ids + inserted for c, t in zip(contexts, first)]
        fed.clear()
        cached = engine.generate(later, [], [8] * 4)
        fed_cached = sum(fed)
        fed.clear()
        fresh = HFGenerator(model, tok, sampling).generate(later, [], [8] * 4)
        fed_fresh = sum(fed)
    finally:
        hook.remove()
    assert [t.token_ids for t in cached] == [t.token_ids for t in fresh]
    assert [t.logprobs for t in cached] == [pytest.approx(t.logprobs, abs=1e-4) for t in fresh]
    assert fed_cached < fed_fresh - 2 * len(contexts[0])  # the prompts and first turns were not fed again


def test_the_cache_is_dropped_when_the_weights_change(smollm2_dir):
    model, tok = load_policy(str(smollm2_dir))
    engine = HFGenerator(model, tok, SamplingConfig(temperature=0, max_new_tokens=6))
    context = tok("The sea is", add_special_tokens=False)["input_ids"]
    first = engine.generate([context], [], [6])[0]
    with torch.no_grad():
        for layer in model.model.layers:  # an optimizer step, in place: every cached key and value is stale
            layer.self_attn.k_proj.weight.mul_(0.5)
            layer.self_attn.v_proj.weight.mul_(2.0)
    again = engine.generate([context + first.token_ids], [], [6])[0]
    fresh = HFGenerator(model, tok, engine.sampling).generate([context + first.token_ids], [], [6])[0]
    assert again.token_ids == fresh.token_ids and again.logprobs == pytest.approx(fresh.logprobs, abs=1e-4)


def test_weights_synced_from_outside_are_never_sampled_stale(smollm2_tokenizer):
    """An external weight sync: new storage (``p.data = w``) is detected; an in-place write through ``p.data``
    changes no counter, and :meth:`HFGenerator.refresh` drops the KV cache and the bf16 copy (both were kept)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = smollm2_tokenizer
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2
    )

    def weights(seed: int) -> list[torch.Tensor]:
        torch.manual_seed(seed)
        return [p.detach().clone() for p in LlamaForCausalLM(config).parameters()]

    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    sampling = SamplingConfig(temperature=0, max_new_tokens=6)
    engine = HFGenerator(model, tok, sampling, dtype=torch.bfloat16)
    context = tok("The sea is", add_special_tokens=False)["input_ids"]
    first = engine.generate([context], [], [6])[0]
    follow = context + first.token_ids

    def fresh() -> object:
        return HFGenerator(model, tok, sampling, dtype=torch.bfloat16).generate([follow], [], [6])[0]

    for parameter, new in zip(model.parameters(), weights(1)):
        parameter.data = new  # new storage
    again, expected = engine.generate([follow], [], [6])[0], fresh()
    assert again.token_ids == expected.token_ids and again.logprobs == pytest.approx(expected.logprobs, abs=1e-4)
    for parameter, new in zip(model.parameters(), weights(2)):
        parameter.data.copy_(new)  # in place, through .data: no version counter moves
    engine.refresh()
    again, expected = engine.generate([follow], [], [6])[0], fresh()
    assert again.token_ids == expected.token_ids and again.logprobs == pytest.approx(expected.logprobs, abs=1e-4)
    assert expected.logprobs != pytest.approx(first.logprobs, abs=1e-3)  # the weights did change what is sampled


def test_sampled_rows_stop_at_their_own_stop_string_and_report_sampler_logprobs(smollm2):
    """Temperature and top-p: rows stop at different lengths; each log-probability is the sampled token's under the
    processed (tempered, nucleus-cut) distribution, so it is never above the unprocessed model's by chance."""
    model, tok = smollm2
    sampling = SamplingConfig(temperature=0.7, top_p=0.9, max_new_tokens=12)
    engine = HFGenerator(model, tok, sampling)
    torch.manual_seed(0)
    context = tok("The sea is", add_special_tokens=False)["input_ids"]
    turns = engine.generate([context] * 6, ["e"], [12] * 6)
    assert len({len(t.token_ids) for t in turns}) > 1
    for turn in turns:
        assert len(turn.logprobs) == len(turn.token_ids) and all(lp <= 0 for lp in turn.logprobs)
        text = tok.decode(turn.token_ids)
        assert "e" not in tok.decode(turn.token_ids[:-1]) and ("e" in text or len(turn.token_ids) == 12)
    torch.manual_seed(0)
    assert [t.token_ids for t in HFGenerator(model, tok, sampling).generate([context] * 6, ["e"], [12] * 6)] == [
        t.token_ids for t in turns
    ]  # seeded sampling repeats


def test_draw_samples_each_token_at_its_probability_and_never_a_cut_one():
    """The sampler's one-uniform-per-row draw: frequencies match the distribution, a token of probability 0 (cut by
    top-p) never comes up, and seeded draws repeat."""
    from searchenv.rollout.engines import draw

    probabilities = torch.tensor([0.5, 0.0, 0.3, 0.2])
    torch.manual_seed(0)
    tokens = draw(probabilities.log().expand(40_000, 4))
    counts = torch.bincount(tokens, minlength=4) / 40_000
    assert counts[1] == 0
    assert counts.tolist() == pytest.approx(probabilities.tolist(), abs=0.01)
    torch.manual_seed(0)
    assert draw(probabilities.log().expand(1000, 4)).tolist() == tokens[:1000].tolist()  # seeded draws repeat


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


def test_a_bf16_sampler_decodes_from_a_copy_and_copies_again_after_an_update(smollm2_dir):
    """Rollouts sample from a bf16 copy of the float32 masters (a bf16 inference engine beside the trainer's
    weights); an optimizer step, in place, makes a new copy."""
    import copy

    model, tok = load_policy(str(smollm2_dir))
    engine = HFGenerator(model, tok, SamplingConfig(temperature=0, max_new_tokens=6), dtype=torch.bfloat16)
    context = tok("The capital of France is", add_special_tokens=False)["input_ids"]

    def bf16_greedy() -> list[int]:
        reference = copy.deepcopy(model).to(torch.bfloat16)
        out = reference.generate(
            torch.tensor([context]), max_new_tokens=6, do_sample=False, pad_token_id=tok.pad_token_id
        )
        return out[0, len(context) :].tolist()

    assert engine.generate([context], [], [6])[0].token_ids == bf16_greedy()
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # the masters stay float32
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.down_proj.weight.mul_(-1.0)
    assert engine.generate([context], [], [6])[0].token_ids == bf16_greedy()


def test_rows_with_no_budget_get_empty_turns_and_the_cache_stays_right(smollm2):
    """Every row's cap 0 crashed the engine (an empty float index); a row of cap 0 beside decoding rows is parked
    from the start and merged back with the rest, and the next turn still gives what a fresh engine gives."""
    model, tok = smollm2
    sampling = SamplingConfig(temperature=0, max_new_tokens=10)
    engine = HFGenerator(model, tok, sampling)
    texts = ["Say hello to", "Paris is the capital of", "The capital of France is", "1, 2, 3,"]
    contexts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    assert engine.generate(contexts[:2], ["."], [0, 0]) == [GeneratedTurn([], []), GeneratedTurn([], [])]
    first = engine.generate(contexts, ["."], [0, 10, 10, 3])  # one row idle, the others end at different steps
    assert first[0] == GeneratedTurn([], []) and len({len(t.token_ids) for t in first[1:]}) > 1
    later = [c + t.token_ids for c, t in zip(contexts, first)]
    cached = engine.generate(later, [], [6] * 4)
    fresh = HFGenerator(model, tok, sampling).generate(later, [], [6] * 4)
    assert [t.token_ids for t in cached] == [t.token_ids for t in fresh]
