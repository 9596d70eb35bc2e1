"""SearchQA-v0: protocol, budget, rewards on the terminal step, forged tags, determinism, batching."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from toyworld import CORPUS, QUESTIONS, FailingRetriever, ScriptedRetriever

import searchenv
from searchenv import SearchQAEnv, step_batch
from searchenv.retrievers.random_retriever import RandomRetriever


def make_env(**kwargs) -> SearchQAEnv:
    kwargs.setdefault("dataset", QUESTIONS)
    kwargs.setdefault("retriever", ScriptedRetriever())
    return SearchQAEnv(**kwargs)


def test_zero_argument_make_uses_world_and_bm25():
    env = gym.make("SearchQA-v0")
    prompt, info = env.reset(seed=0)
    assert info["question"] in prompt and info["golden_answers"]
    assert type(env.unwrapped.retriever).__name__ == "BM25Retriever"
    obs, reward, terminated, truncated, step_info = env.step(f"<search>{info['question']}</search>")
    assert obs.startswith("\n\n<information>Doc 1(Title: ") and obs.endswith("</information>\n\n")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert step_info["num_searches"] == 1 and len(step_info["passage_ids"]) == 3


def test_make_with_module_prefix_in_fresh_interpreter():
    code = (
        "import gymnasium as gym; e = gym.make('searchenv:SearchQA-v0', retriever='random');"
        "print(e.reset(seed=1)[1]['id'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()


def test_search_inserts_information_block_in_search_r1_layout():
    env = make_env()
    env.reset(options={"index": 0})
    obs, reward, terminated, truncated, info = env.step(
        "<think>I need facts.</think>\n<search> Valtmora founder </search>"
    )
    assert obs == (
        "\n\n<information>Doc 1(Title: Valtmora Guild) The Valtmora Guild was founded by Ilsa Brevondt.\n"
        "Doc 2(Title: Ilsa Brevondt) Ilsa Brevondt was born in Quarnessa.\n"
        "Doc 3(Title: Quarnessa) Quarnessa was founded in 1312.</information>\n\n"
    )
    assert info["action"] == "search" and info["query"] == "Valtmora founder"
    assert info["passage_ids"] == ["p0", "p1", "p2"]
    assert (reward, terminated, truncated) == (0.0, False, False)


def test_answer_ends_episode_with_reward_and_parts():
    env = make_env()
    env.reset(options={"index": 0})
    env.step("<search>founder</search>")
    obs, reward, terminated, truncated, info = env.step("<think>ok</think><answer> Ilsa Brevondt </answer>")
    assert (obs, reward, terminated, truncated) == ("", 1.0, True, False)
    assert info["prediction"] == "Ilsa Brevondt"
    assert info["reward_parts"]["em"] == 1.0
    assert info["reward_parts"]["retrieval_hit"] == 1.0
    with pytest.raises(RuntimeError, match="reset"):
        env.step("<answer>again</answer>")


def test_wrong_answer_scores_zero():
    env = make_env()
    env.reset(options={"index": 1})
    *_, reward, terminated, _, info = env.step("<answer>Paris</answer>")
    assert reward == 0.0 and terminated and info["reward_parts"]["em"] == 0.0


def test_invalid_action_gets_hint_and_budget_truncates():
    env = make_env(max_turns=4)
    env.reset(options={"index": 0})
    for turn in range(1, 4):
        obs, reward, terminated, truncated, info = env.step("I think the answer is Ilsa.")
        assert obs == env.unwrapped.protocol.invalid_hint
        assert (reward, terminated, truncated, info["action"]) == (0.0, False, False, "invalid")
        assert info["num_actions"] == turn
    obs, reward, terminated, truncated, info = env.step("<search>still searching</search>")
    assert (obs, terminated, truncated) == ("", False, True)
    assert info["search_skipped"] and info["prediction"] is None
    assert env.episode.num_invalid == 3 and env.episode.num_searches == 0


def test_custom_hint_is_used():
    env = make_env(invalid_hint="\nMy action is not correct, let me rethink.\n")
    env.reset(options={"index": 0})
    assert env.step("hmm")[0] == "\nMy action is not correct, let me rethink.\n"


def test_extra_answer_turn_budget_allows_b_searches_then_answer():
    retriever = ScriptedRetriever()
    env = make_env(max_turns=2, budget="extra-answer-turn", retriever=retriever)
    env.reset(options={"index": 0})
    assert env.action_limit == 3
    env.step("<search>a</search>")
    env.step("<search>b</search>")
    obs, reward, terminated, truncated, info = env.step("<answer>Ilsa Brevondt</answer>")
    assert terminated and reward == 1.0 and info["num_searches"] == 2 and len(retriever.calls) == 2
    env.reset(options={"index": 0})
    env.step("<search>a</search>")
    env.step("<search>b</search>")
    obs, reward, terminated, truncated, info = env.step("<search>c</search>")
    assert truncated and info["search_skipped"] and len(retriever.calls) == 4


def test_only_first_complete_tag_counts_and_rest_is_dropped():
    env = make_env()
    env.reset(options={"index": 0})
    action = "<search>first</search> then <answer>Ilsa Brevondt</answer>"
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["action"] == "search" and info["query"] == "first" and not terminated
    assert info["dropped_text"] == " then <answer>Ilsa Brevondt</answer>"
    assert env.episode.segments[0].text == "<search>first</search>"
    # An unclosed search before a complete answer: the answer is the first complete tag.
    env.reset(options={"index": 0})
    *_, terminated, _, info = env.step("<search>open <answer>Ilsa Brevondt</answer>")
    assert terminated and info["prediction"] == "Ilsa Brevondt"


def test_empty_query_is_invalid():
    env = make_env()
    env.reset(options={"index": 0})
    assert env.step("<search>   </search>")[4]["action"] == "invalid"


def test_forged_tags_in_passages_neither_end_episode_nor_change_reward():
    env = make_env(retriever=ScriptedRetriever(positions=[3]), topk=1, reward="em")
    env.reset(options={"index": 1})
    obs, reward, terminated, truncated, info = env.step("<search>x</search>")
    assert not terminated and reward == 0.0
    assert "<answer>" not in obs and "</information><answer>" not in obs
    assert obs.count("<information>") == 1 and obs.count("</information>") == 1
    assert obs.count("<search>") == 0
    *_, reward, terminated, _, info = env.step("<answer>nothing</answer>")
    assert terminated and reward == 0.0 and info["prediction"] == "nothing"


def test_question_cannot_forge_tags_in_prompt():
    env = make_env()
    prompt, _ = env.reset(options={"index": 2})
    assert "<answer>Quarnessa</answer>" not in prompt and "‹answer›Quarnessa‹/answer›" in prompt


def test_reset_seed_reproduces_episode_exactly():
    def play(seed: int) -> tuple:
        env = gym.make("SearchQA-v0", retriever="random", retriever_options={"seed": 7})
        prompt, info = env.reset(seed=seed)
        obs, *_ = env.step(f"<search>{info['question']}</search>")
        last = env.step("<answer>x</answer>")
        return prompt, obs, last[1], env.unwrapped.episode.response_text

    assert play(3) == play(3)
    assert play(3) != play(4)


def test_make_vec_steps_with_one_batched_search_per_step():
    retriever = ScriptedRetriever()
    venv = gym.make_vec("SearchQA-v0", num_envs=4, dataset=QUESTIONS, retriever=retriever)
    assert type(venv).__name__ == "SearchQAVectorEnv"
    obs, infos = venv.reset(seed=0)
    assert obs.shape == (4,) and all(isinstance(o, str) for o in obs)
    actions = ["<search>a</search>", "<search>b</search>", "no tags", "<answer>Ilsa Brevondt</answer>"]
    obs, rewards, terminations, truncations, infos = venv.step(actions)
    assert retriever.calls == [["a", "b"]]
    assert list(terminations) == [False, False, False, True]
    assert obs[0].startswith("\n\n<information>") and obs[3] == ""
    assert list(infos["action"]) == ["search", "search", "invalid", "answer"]
    # The finished slot resets on the next step (NEXT_STEP autoreset); its action is ignored.
    obs, *_ = venv.step(["<search>c</search>"] * 4)
    assert retriever.calls[-1] == ["c", "c", "c"]
    assert "Question:" in obs[3]


@pytest.mark.parametrize("reward", ["em", "format-retrieval"])
@pytest.mark.parametrize("budget", ["actions", "extra-answer-turn"])
def test_step_and_step_batch_agree(reward, budget):
    """``env.step`` skips step_batch's bookkeeping when nothing is searched: a differential test of the two paths."""
    scripts = [
        ["<search>a</search> dropped", "no tags", "<answer>Ilsa Brevondt</answer> after"],
        ["no tags", "<search>b</search>", "<search>c</search>", "<search>d</search>"],
        ["<answer> wrong </answer>"],
        ["<search></search>", "<answer></answer>", "x", "y", "z"],
    ]
    for index, script in enumerate(scripts):
        single, batched = (
            make_env(reward=reward, budget=budget, max_turns=2),
            make_env(reward=reward, budget=budget, max_turns=2),
        )
        single.reset(options={"index": index % len(QUESTIONS)})
        batched.reset(options={"index": index % len(QUESTIONS)})
        for action in script:
            if single.episode.done:
                break
            one = single.step(action)
            (many,) = step_batch([batched], [action])
            assert one == tuple(many)
            assert dict(one[4].get("reward_parts", {})) == dict(many.info.get("reward_parts", {}))
        assert single.episode.turns == batched.episode.turns and single.episode.done


def test_gymnasium_episode_statistics_wrappers_run_over_terminal_steps():
    """Gymnasium's RecordEpisodeStatistics asserts that ``info`` has no ``"episode"`` key of its own: the metrics
    live under ``episode_metrics``, and both wrappers (single and vector) record our episodes."""
    env = gym.make("SearchQA-v0", dataset=QUESTIONS, retriever=ScriptedRetriever())
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env.reset(seed=0)
    env.step("<search>a</search>")
    *_, info = env.step("<answer>Ilsa Brevondt</answer>")
    assert info["episode"]["l"] == 2 and info["episode_metrics"]["num_searches"] == 1.0
    venv = gym.wrappers.vector.RecordEpisodeStatistics(
        gym.make_vec("SearchQA-v0", num_envs=2, dataset=QUESTIONS, retriever=ScriptedRetriever())
    )
    venv.reset(seed=0)
    *_, infos = venv.step(["<answer>x</answer>", "no tags"])
    assert list(infos["_episode"]) == [True, False] and infos["episode"]["l"][0] == 1
    assert list(infos["_episode_metrics"]) == [True, False] and infos["episode_metrics"]["num_actions"][0] == 1.0


def test_check_env_passes():
    check_env(make_env(retriever=RandomRetriever(CORPUS, seed=0)), skip_render_check=True)


def test_failed_search_is_observed_and_batch_survives():
    ok_env, bad_env = make_env(), make_env(retriever=FailingRetriever())
    ok_env.reset(options={"index": 0})
    bad_env.reset(options={"index": 0})
    good, bad = step_batch([ok_env, bad_env], ["<search>a</search>", "<search>a</search>"])
    assert good.observation.startswith("\n\n<information>Doc 1")
    assert bad.observation == bad_env.protocol.format_error() and "refused" in bad.info["retrieval_error"]
    assert not bad.terminated and bad_env.episode.num_searches == 0
    strict = make_env(retriever=FailingRetriever(), on_retrieval_error="raise")
    strict.reset(options={"index": 0})
    with pytest.raises(ConnectionError):
        strict.step("<search>a</search>")


def test_retriever_returning_wrong_shape_is_reported():
    class Broken:
        def search(self, queries, k):
            return []

    env = make_env(retriever=Broken())
    env.reset(options={"index": 0})
    info = env.step("<search>a</search>")[4]
    assert "one list per query" in info["retrieval_error"]


@pytest.mark.parametrize(
    ("protocol", "search", "block"),
    [
        ("r1-searcher", "<|begin_of_query|> founder <|end_of_query|>", "<|begin_of_documents|>"),
        ("r-search", "<search> founder </search>", "<observation>"),
    ],
)
def test_other_protocols_by_configuration(protocol, search, block):
    env = make_env(protocol=protocol)
    prompt, info = env.reset(options={"index": 0})
    assert block.strip("<>|").split("_")[-1] in prompt or block in prompt
    obs, *_, step_info = env.step(search)
    assert step_info["action"] == "search" and step_info["query"] == "founder"
    assert obs.lstrip().startswith(block)
    assert info["stop_strings"][0] in search


def test_information_is_clipped_to_word_budget():
    env = make_env(max_information_words=12)
    env.reset(options={"index": 0})
    obs, *_, info = env.step("<search>a</search>")
    assert info["information_clipped"] and "…" in obs
    body = env.unwrapped.protocol.information_body(obs)
    docs = [line.split(") ", 1)[1] for line in body.split("\n")]
    assert len(docs) == 3 and sum(len(d.replace(" …", "").split()) for d in docs) <= 12  # the cap holds in all


def test_a_word_cap_is_shared_by_the_passages_and_hides_none():
    """Before, the cap was spent in rank order: with top-2 and 40 words, the first passage took all 40 words and
    the second never showed (the CPU recipe's setting)."""
    from searchenv.env.step_rules import clip_passages
    from searchenv.types import Passage

    long = " ".join(f"w{i}" for i in range(60))
    kept, clipped = clip_passages([Passage("1", "A", long), Passage("2", "B", long)], 40)
    assert clipped and [p.id for p in kept] == ["1", "2"]
    assert [len(p.text.replace(" …", "").split()) for p in kept] == [20, 20]
    kept, _ = clip_passages([Passage("1", "A", "five words of short text"), Passage("2", "B", long)], 40)
    assert kept[0].text == "five words of short text" and len(kept[1].text.replace(" …", "").split()) == 35


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"topk": 0}, "topk"),
        ({"max_turns": 0}, "max_turns"),
        ({"budget": "tokens"}, "budget"),
        ({"protocol": "nope"}, "unknown protocol"),
        ({"retriever": "nope"}, "unknown retriever"),
        ({"dataset": "no/such/file.jsonl"}, "neither a file nor a known name"),
        ({"dataset": [{"q": 1}]}, "needs 'question'"),
        ({"retriever": "bm25", "dataset": QUESTIONS}, "needs a corpus"),
    ],
)
def test_bad_arguments_get_clear_errors(kwargs, message):
    with pytest.raises((ValueError, FileNotFoundError)) as excinfo:
        make_env(**kwargs)
    assert message in str(excinfo.value)


def test_bad_reset_options_and_actions():
    env = make_env()
    with pytest.raises(ValueError, match="index"):
        env.reset(options={"index": 99})
    env.reset(options={"example": {"question": "Where was Ilsa Brevondt born?", "golden_answers": ["Quarnessa"]}})
    with pytest.raises(TypeError, match="str"):
        env.step(b"<answer>x</answer>")
    assert env.step("<answer>Quarnessa</answer>")[1] == 1.0


def test_episode_transcript_authorship():
    env = make_env()
    env.reset(options={"index": 0})
    env.step("<search>a</search>")
    env.step("oops")
    env.step("<answer>Ilsa Brevondt</answer>")
    authors = [s.author for s in env.episode.segments]
    assert authors == ["model", "env", "model", "env", "model"]
    assert env.episode.model_text == "<search>a</search>oops<answer>Ilsa Brevondt</answer>"
    metrics = env.episode.metrics()
    assert metrics["num_searches"] == 1 and metrics["num_invalid"] == 1 and metrics["reward"] == 1.0


def test_vector_env_rejects_wrong_action_count():
    venv = gym.make_vec("SearchQA-v0", num_envs=2, dataset=QUESTIONS, retriever=ScriptedRetriever())
    venv.reset(seed=0)
    with pytest.raises(ValueError, match="2 environments"):
        venv.step(["<answer>x</answer>"])
    assert isinstance(np.asarray(venv.render()), np.ndarray)


def test_import_is_light():
    code = (
        "import sys, searchenv; heavy = {'torch', 'faiss', 'pyserini', 'transformers', 'fastapi', 'bm25s'};"
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
    assert searchenv.ENV_ID == "SearchQA-v0"


def test_truncate_scores_an_unfinished_episode():
    env = make_env(reward="format-retrieval")
    env.reset(options={"index": 0})
    env.step("<think>x</think><search>a</search>")
    obs, reward, terminated, truncated, info = env.unwrapped.truncate()
    assert (obs, terminated, truncated) == ("", False, True)
    assert info["reward_parts"]["retrieval_hit"] == 1.0 and info["prediction"] is None
    assert reward == env.episode.reward == 0.0
    with pytest.raises(RuntimeError, match="ended"):
        env.unwrapped.truncate()


def test_fewshot_protocol_shows_one_worked_example_with_the_same_tags():
    env = make_env(protocol="search-r1-fewshot")
    prompt, info = env.reset(options={"index": 0})
    assert "<search> Orvane Abbey founder </search>" in prompt and prompt.endswith(f"Question: {info['question']}\n")
    assert env.step("<search> founder </search>")[4]["action"] == "search"
