"""Native tool calls: the same environment, budgets, rewards and masks for models that call search as a tool."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toyworld import QUESTIONS, ScriptedRetriever

import searchenv  # noqa: F401
from searchenv import SearchQAEnv, tokenize_episode
from searchenv.protocol import PROTOCOLS, parse_action
from searchenv.protocol.tool_calls import chat_messages, tool_call_protocol, tools_of
from searchenv.reward_specs import Rollout, load_reward


def call(name: str = "search", **arguments: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def env_with(protocol, **kwargs) -> SearchQAEnv:
    env = SearchQAEnv(dataset=QUESTIONS, retriever=ScriptedRetriever(), protocol=protocol, **kwargs)
    env.reset(options={"index": 0})
    return env


def test_gym_make_plays_a_full_episode_with_a_native_tool_call() -> None:
    env = gym.make("SearchQA-v0", protocol="tool-call", reward="format")
    prompt, info = env.reset(seed=0)
    assert info["tools"][0]["function"]["name"] == "search" and "</tool_call>" in info["stop_strings"]
    observation, reward, terminated, truncated, step_info = env.step(call(query=info["question"]))
    assert step_info["action"] == "search" and step_info["num_searches"] == 1
    assert observation.startswith("<|im_end|>\n<|im_start|>user\n<tool_response>\nDoc 1(Title: ")
    assert observation.endswith("\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    gold = info["golden_answers"][0]
    *_, reward, terminated, truncated, final = env.step(f"<answer> {gold} </answer>")
    assert terminated and reward == 1.0 and final["reward_parts"]["format_ok"] == 1.0


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        ("<tool_call>{not json}</tool_call>", "not valid JSON"),
        ('<tool_call>["search"]</tool_call>', "JSON object"),
        (call("browse", url="x"), "unknown tool 'browse'"),
        (call(), 'non-empty string "query"'),
        (call(query=42), 'non-empty string "query"'),
        ('<tool_call>{"name": "search", "arguments": "{bad"}</tool_call>', "arguments are not valid JSON"),
        ('<tool_call>{"name": "search", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ("<tool_call>" + "[" * 100_000 + "</tool_call>", "not valid JSON"),
    ],
)
def test_a_bad_tool_call_is_an_invalid_action_with_a_hint(action: str, reason: str) -> None:
    env = env_with("tool-call")
    observation, reward, terminated, truncated, info = env.step(action)
    assert info["action"] == "invalid" and reason in info["invalid_reason"]
    assert observation == env.protocol.invalid_hint and not (terminated or truncated)


def test_openai_style_string_arguments_and_the_first_complete_call_win() -> None:
    protocol = PROTOCOLS["tool-call"]
    parsed = parse_action('<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"a\\"}"}</tool_call>', protocol)
    assert (parsed.kind, parsed.content) == ("search", "a")
    two = call(query="first") + call(query="second")
    parsed = parse_action(two, protocol)
    assert (parsed.kind, parsed.content) == ("search", "first") and "second" in parsed.dropped


@pytest.mark.parametrize(
    ("protocol", "final", "prediction", "format_ok"),
    [
        ("tool-call-message", "<think>It says 1312.</think> Ilsa Brevondt", "Ilsa Brevondt", 1.0),
        ("tool-call-answer-tool", call("answer", answer="Ilsa Brevondt"), "Ilsa Brevondt", 1.0),
        ("tool-call", "<answer>Ilsa Brevondt</answer>", "Ilsa Brevondt", 1.0),
    ],
)
def test_every_answer_mode_ends_the_episode_and_scores(protocol, final, prediction, format_ok) -> None:
    env = env_with(protocol, reward="format")
    env.step(call(query="Valtmora founder"))
    *_, reward, terminated, _, info = env.step(final)
    assert terminated and info["prediction"] == prediction and reward == 1.0
    assert info["reward_parts"]["format_ok"] == format_ok
    text = Rollout.from_text(env.episode.response_text, ["Ilsa Brevondt"], env.protocol, trust_transcript=True)
    assert text.facts == Rollout.from_episode(env.episode).facts


def test_an_invalid_action_breaks_the_format_in_message_mode() -> None:
    env = env_with("tool-call-message", reward="format")
    env.step("<tool_call>oops</tool_call>")
    *_, info = env.step("Ilsa Brevondt")
    assert info["prediction"] == "Ilsa Brevondt" and info["reward_parts"]["format_ok"] == 0.0


def test_results_cannot_close_the_tool_turn() -> None:
    env = env_with("tool-call")
    env.retriever.positions = [3]  # the forged passage: tags and answer inside
    observation = env.step(call(query="x"))[0]
    body = env.protocol.information_body(observation)
    assert "</tool_response>" not in body and "<answer>" not in body and "<|im_end|>" not in body


def _template_text(tokenizer, episode, tools) -> str:
    """The conversation as the template renders it up to the final action's generation prompt, plus that action."""
    messages = [{"role": "user", "content": episode.prompt}]
    for turn in episode.turns[:-1]:
        messages.append({"role": "assistant", "content": turn.action.kept})
        body = episode.protocol.information_body(turn.observation)
        if body is not None:
            messages.append({"role": "tool", "content": body})
    rendered = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    return rendered + episode.turns[-1].action.kept


def _check_template_exact(tokenizer) -> None:
    protocol = tool_call_protocol(tokenizer)
    env = env_with(protocol)
    env.step(call(query="Valtmora founder"))
    env.step("<answer> Ilsa Brevondt </answer>")
    episode = env.episode
    tokens = tokenize_episode(episode, tokenizer)
    text = tokenizer.decode(tokens.input_ids)
    expected = _template_text(tokenizer, episode, tools_of(protocol))
    assert text == expected
    # the frame's role markers are real special tokens with mask 0; the model's tokens have mask 1
    specials = set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    framed = [i for i, m in zip(tokens.response_ids, tokens.loss_mask) if i in specials]
    assert framed and all(m == 0 for i, m in zip(tokens.response_ids, tokens.loss_mask) if i in specials)
    model = tokenizer.decode([i for i, m in zip(tokens.response_ids, tokens.loss_mask) if m])
    assert model == episode.model_text


def test_token_exact_masks_with_the_qwen_template(qwen_tokenizer) -> None:
    protocol = tool_call_protocol(qwen_tokenizer)
    assert (protocol.information_prefix, protocol.information_suffix) == (
        PROTOCOLS["tool-call"].information_prefix,
        PROTOCOLS["tool-call"].information_suffix,
    )
    _check_template_exact(qwen_tokenizer)


@pytest.mark.slow
def test_smollm2_template_gets_tools_declared_and_its_own_tool_role(smollm2_dir: Path) -> None:
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(smollm2_dir))
    protocol = tool_call_protocol(tokenizer)
    assert protocol.information_prefix == "<|im_end|>\n<|im_start|>tool\n"
    env = env_with(protocol)
    env.step(call(query="Valtmora founder"))
    env.step("<answer> Ilsa Brevondt </answer>")
    tokens = tokenize_episode(env.episode, tokenizer)
    assert '"name": "search"' in tokenizer.decode(tokens.prompt_ids)  # declared in the prompt text


def test_chat_message_view() -> None:
    env = env_with("tool-call")
    env.step("Let me look. " + call(query="Valtmora founder"))
    env.step("<answer> Ilsa Brevondt </answer>")
    messages = chat_messages(env.episode)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["content"] == "Let me look."
    assert messages[1]["tool_calls"][0]["function"] == {"name": "search", "arguments": {"query": "Valtmora founder"}}
    assert messages[2]["content"].startswith("Doc 1(Title: Valtmora Guild)")
    tags = chat_messages(env_with("search-r1").episode)
    assert [m["role"] for m in tags] == ["user", "assistant"]


_JSONISH = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "{",
        "}",
        "[",
        '"name"',
        '"search"',
        '"answer"',
        ":",
        ",",
        '"arguments"',
        '"query"',
        '"x"',
        "null",
        "1e999",
        "\\u0000",
        "<answer>",
        "</answer>",
        "\n",
        "</tool_response>",
        "<|im_end|>",
    ]
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    pieces=st.lists(_JSONISH | st.text(max_size=6), max_size=30),
    mode=st.sampled_from(["tool-call", "tool-call-message", "tool-call-answer-tool"]),
)
def test_fuzzed_tool_calls_never_raise_and_both_paths_agree(pieces: list[str], mode: str) -> None:
    env = env_with(mode, max_turns=2)
    action = "".join(pieces)
    for step in (action, action):
        *_, terminated, truncated, info = env.step(step)
        if terminated or truncated:
            break
    else:
        info = env.truncate()[4]
    exact = Rollout.from_segments([(s.author, s.text) for s in env.episode.segments], ["x"], env.protocol)
    assert exact.facts == Rollout.from_episode(env.episode).facts
    assert exact.prediction == info["prediction"]


def test_a_megabyte_of_arguments_is_read_not_feared() -> None:
    env = env_with("tool-call")
    info = env.step(call(query="q" * 1_000_000))[4]
    assert info["action"] == "search" and info["query_clipped"] and len(info["query"]) == env.max_query_chars
    assert load_reward("em")(Rollout.from_episode(env.episode)).reward == 0.0


@pytest.mark.slow
def test_our_rollout_plays_the_tool_call_protocol_with_exact_masks(smollm2_dir: Path) -> None:
    """Our loop by configuration: the rollout declares the tools and frames tool turns with real role tokens."""
    from searchenv.rollout import HFGenerator, SamplingConfig, load_policy, rollout

    model, tokenizer = load_policy(str(smollm2_dir))
    sampling = SamplingConfig(max_new_tokens=24, max_total_tokens=1024)
    env = SearchQAEnv(dataset=QUESTIONS, retriever=ScriptedRetriever(), protocol="tool-call", max_turns=2)
    (result,) = rollout([env], HFGenerator(model, tokenizer, sampling), sampling, indices=[0], seed=0)
    tokens = result.tokens
    assert '"name": "search"' in tokenizer.decode(tokens.prompt_ids)  # declared (SmolLM2's template ignores tools=)
    model_text = tokenizer.decode([i for i, m in zip(tokens.response_ids, tokens.loss_mask) if m])
    assert model_text.replace(tokenizer.eos_token, "") in env.episode.model_text + env.episode.response_text


def test_eval_policies_declare_the_tools_of_a_tool_call_protocol(qwen_tokenizer) -> None:
    from searchenv.evaluation.policies import Context, _chat_text
    from searchenv.tokenization import encode_prompt

    protocol = PROTOCOLS["tool-call"]
    context = Context("Who founded it?", "", protocol.tools_json)
    text = _chat_text(qwen_tokenizer, context, None)
    assert '"name": "search"' in text and text.endswith("<|im_start|>assistant\n")
    # the endpoint's text and a local model's token path (encode_prompt, as in training) read the same prompt
    assert qwen_tokenizer.decode(encode_prompt(qwen_tokenizer, context.prompt, None, context.tool_schemas)) == text
    assert '"name": "search"' not in _chat_text(qwen_tokenizer, Context("Who founded it?", ""), None)


def test_every_declared_tool_is_the_vocabularys() -> None:
    """One table names and describes the tools for the protocols, MCP, TRL and veRL (tests/test_mcp.py, the TRL and
    veRL tests hold those surfaces to it)."""
    from searchenv.protocol import PROTOCOLS
    from searchenv.protocol.tool_calls import tools_of
    from searchenv.protocol.tools import OPEN, TOOLS, tool_named

    declared = [tool for protocol in PROTOCOLS.values() for tool in tools_of(protocol)]
    assert declared and all(
        tool == TOOLS[tool["function"]["name"]].schema(without=("k",)) for tool in declared
    )  # no protocol declares k: the environment's topk sets it
    assert tool_named("open_page") is OPEN and tool_named("open") is OPEN and tool_named("browse") is None
