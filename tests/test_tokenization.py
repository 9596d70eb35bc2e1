"""Token ids and loss masks built from authorship (real Qwen2.5 tokenizer: pad == <|endoftext|>)."""

from __future__ import annotations

import pytest
from toyworld import QUESTIONS, ScriptedRetriever

from searchenv import EpisodeTokens, SearchQAEnv, TokenizedEpisode, encode_prompt, tokenize_episode
from searchenv.tokenization import cut_at_action_end


@pytest.fixture()
def finished_episode():
    env = SearchQAEnv(dataset=QUESTIONS, retriever=ScriptedRetriever())
    env.reset(options={"index": 0})
    env.step("<think>Who founded it?</think>\n<search> Valtmora founder </search>")
    env.step("no tags here")
    env.step("<think>Found it.</think>\n<answer> Ilsa Brevondt </answer>")
    return env.episode


def test_mask_marks_model_tokens_only(finished_episode, qwen_tokenizer):
    tokens = tokenize_episode(finished_episode, qwen_tokenizer)
    assert len(tokens.loss_mask) == len(tokens.response_ids)
    # Rebuild each segment's ids independently and check the mask segment by segment.
    position = 0
    for segment in finished_episode.segments:
        ids = qwen_tokenizer(segment.text, add_special_tokens=False)["input_ids"]
        assert tokens.response_ids[position : position + len(ids)] == ids
        assert set(tokens.loss_mask[position : position + len(ids)]) == {1 if segment.author == "model" else 0}
        position += len(ids)
    assert position == len(tokens.response_ids)


def test_environment_block_keeps_leading_newlines(finished_episode, qwen_tokenizer):
    tokens = tokenize_episode(finished_episode, qwen_tokenizer)
    env_ids = [t for t, m in zip(tokens.response_ids, tokens.loss_mask) if m == 0]
    assert qwen_tokenizer.decode(env_ids).startswith("\n\n<information>")


def test_model_token_ids_are_used_verbatim_even_when_equal_to_pad(finished_episode, qwen_tokenizer):
    pad = qwen_tokenizer.pad_token_id
    assert pad == qwen_tokenizer.convert_tokens_to_ids("<|endoftext|>")
    generated = [[11, 22, pad], [33], [44, pad, 55]]  # a model may emit the pad/EOS id itself
    tokens = tokenize_episode(finished_episode, qwen_tokenizer, model_token_ids=generated)
    model_ids = [t for t, m in zip(tokens.response_ids, tokens.loss_mask) if m == 1]
    assert model_ids == [11, 22, pad, 33, 44, pad, 55]
    assert tokens.num_model_tokens == 7


def test_model_token_ids_must_match_turns(finished_episode, qwen_tokenizer):
    with pytest.raises(ValueError, match="3 model segments"):
        tokenize_episode(finished_episode, qwen_tokenizer, model_token_ids=[[1]])


def test_prompt_uses_chat_template(finished_episode, qwen_tokenizer):
    ids = encode_prompt(qwen_tokenizer, finished_episode.prompt)
    text = qwen_tokenizer.decode(ids)
    assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\n")
    plain = encode_prompt(qwen_tokenizer, finished_episode.prompt, chat_template=False)
    assert qwen_tokenizer.decode(plain) == finished_episode.prompt


def test_builder_records_logprobs_and_zero_for_env(qwen_tokenizer):
    builder = EpisodeTokens(qwen_tokenizer, [1, 2])
    builder.add_model([5, 6], [-0.5, -0.25])
    env_ids = builder.add_env("\n\n<information>x</information>\n\n")
    result = builder.result()
    assert result.logprobs == [-0.5, -0.25] + [0.0] * len(env_ids)
    assert result.input_ids == [1, 2, 5, 6, *env_ids] == builder.context_ids
    with pytest.raises(ValueError, match="logprobs"):
        builder.add_model([7], [])


def test_mask_length_is_validated():
    with pytest.raises(ValueError, match="loss_mask"):
        TokenizedEpisode(prompt_ids=[1], response_ids=[2, 3], loss_mask=[1])


def test_cut_at_action_end_drops_tokens_after_the_tag(qwen_tokenizer):
    kept = "<search> Valtmora founder </search>"
    generated = qwen_tokenizer(kept + " and then more text", add_special_tokens=False)["input_ids"]
    n = cut_at_action_end(qwen_tokenizer, generated, kept)
    assert qwen_tokenizer.decode(generated[:n]).startswith(kept)
    assert not qwen_tokenizer.decode(generated[: n - 1]).startswith(kept)
    exact = qwen_tokenizer(kept, add_special_tokens=False)["input_ids"]
    assert cut_at_action_end(qwen_tokenizer, exact, kept) == len(exact)


def test_add_action_cuts_tokens_after_the_first_complete_tag(qwen_tokenizer):
    from searchenv.protocol import PROTOCOLS

    builder = EpisodeTokens(qwen_tokenizer, [1])
    generated = qwen_tokenizer("<search> who </search> and more<|im_end|>", add_special_tokens=False)["input_ids"]
    action = builder.add_action(generated, [-1.0] * len(generated), PROTOCOLS["search-r1"])
    assert action.startswith("<search> who </search>") and "more" not in action
    assert len(builder.response_ids) == len(builder.logprobs) < len(generated)
    invalid = qwen_tokenizer("just text<|im_end|>", add_special_tokens=False)["input_ids"]
    assert builder.add_action(invalid, None, PROTOCOLS["search-r1"]) == "just text"  # EOS kept as a token, not text
    assert builder.response_ids[-1] == qwen_tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_passage_text_never_becomes_an_added_token(qwen_tokenizer):
    """Qwen's ``<tool_call>`` is an added token that is not special, so ``split_special_tokens`` keeps it whole: a
    passage holding it would hand the policy the real tool-call id under the tag protocol."""
    from searchenv.corpus import Corpus
    from searchenv.types import Passage

    text = 'Write <tool_call>{"name": "x"}</tool_call> and <tool_response> ok </tool_response>.'
    corpus = Corpus.from_passages([Passage("p1", "Tools", text)])
    env = SearchQAEnv(dataset=QUESTIONS, corpus=corpus, retriever="random", protocol="search-r1")
    env.reset(options={"index": 0})
    observation = env.step("<search> tools </search>")[0]
    assert "<tool_call>" in observation  # shown to the model as text, not defused away
    tokens = tokenize_episode(env.episode, qwen_tokenizer)
    added = set(qwen_tokenizer.added_tokens_decoder)
    env_ids = [t for t, m in zip(tokens.response_ids, tokens.loss_mask) if m == 0]
    assert not added & set(env_ids)
    assert qwen_tokenizer.decode(env_ids) == observation  # the same characters, only not the added ids


def test_an_environment_transcript_reads_token_for_token_like_the_prompts_worked_example(smollm2_tokenizer):
    """The seam after every search: an information block encoded on its own ended in SmolLM2's one ``"\\n\\n"``
    token, while the prompt's worked example (what the model imitates) has two ``"\\n"`` tokens before ``<think>``.
    An episode the environment plays with the example's own actions must give the example's ids exactly."""
    from searchenv.protocol import get_protocol
    from searchenv.types import Passage

    class ExampleRetriever:
        def search(self, queries, k):
            return [[Passage("1", "Orvane Abbey", "Orvane Abbey was founded by Tesk Mallor in 1210.")] for _ in queries]

    template = get_protocol("search-r1-fewshot").prompt_template
    example = template[template.index("<think> I do not know") : template.index("\n\nQuestion: {question}")]
    actions = [example[: example.index("</search>") + len("</search>")]]
    actions.append(example[example.index("<think> The passage") :])
    question = [{"id": "x", "question": "Who founded Orvane Abbey?", "golden_answers": ["Tesk Mallor"]}]
    env = SearchQAEnv(dataset=question, retriever=ExampleRetriever(), protocol="search-r1-fewshot", topk=1)
    env.reset(options={"index": 0})
    builder = EpisodeTokens(smollm2_tokenizer, [], env.protocol)
    for action in actions:
        ids = smollm2_tokenizer(action, add_special_tokens=False)["input_ids"]  # the model writes the example's ids
        builder.add_action(ids, None, env.protocol)
        obs, *_ = env.step(action)
        if obs:
            builder.add_env(obs)
    assert env.episode.response_text == example  # the environment writes the example's text ...
    expected = smollm2_tokenizer(example, add_special_tokens=False)["input_ids"]
    assert builder.result().response_ids == expected  # ... and its ids, token for token
    newline = smollm2_tokenizer.convert_tokens_to_ids("Ċ")
    last_turn = len(smollm2_tokenizer(actions[1])["input_ids"])
    after_block = builder.response_ids[len(builder.response_ids) - last_turn - 2 :]
    assert after_block[:2] == [newline, newline]  # two "\n" tokens before <think>, not one "\n\n"
