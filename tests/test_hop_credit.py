"""The per-hop credit reward (``hop-credit``): its values, the hop answers it reads, every path that builds a
rollout (environment, gym.make, text with spans, trainer rows), and its refusal of questions without hop answers."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest
from toyworld import CORPUS, ScriptedRetriever

import searchenv
from searchenv import SearchQAEnv
from searchenv.adapters.rows import row_example, search_r1_row
from searchenv.protocol import get_protocol
from searchenv.reward_specs import Rollout, load_reward
from searchenv.reward_specs.hops import hop_answers

MUSIQUE = Path(__file__).resolve().parents[2] / "shared" / "data" / "qa" / "musique_100.jsonl"
HOPS = ["Ilsa Brevondt", "Quarnessa", "1312"]
QUESTION = {
    "id": "h3",
    "question": "In which year was the birthplace of the founder of the Valtmora Guild founded?",
    "golden_answers": ["1312"],
    "data_source": "toy",
    "metadata": {"hops": 3, "hop_answers": HOPS},
}
SEARCH = "<think>x</think><search> Valtmora Guild founder </search>"


def _env(positions=(0,), **kwargs) -> SearchQAEnv:
    return SearchQAEnv(dataset=[QUESTION], retriever=ScriptedRetriever(positions), reward="hop-credit", **kwargs)


def _play(env: SearchQAEnv, answer: str) -> tuple[float, dict]:
    env.reset(options={"index": 0})
    env.step(SEARCH)
    _, reward, *_, info = env.step(f"<think>y</think><answer> {answer} </answer>")
    return reward, info


@pytest.mark.parametrize(
    ("positions", "answer", "reward", "found"),
    [
        ((0,), "Quarnessa", 0.5 * 1 / 3, 1),  # the first hop's passage shown, the answer wrong
        ((0, 1), "Quarnessa", 0.5 * 2 / 3, 2),
        ((0, 1, 2), "Quarnessa", 0.5, 3),  # every hop found and still wrong: λh, below a right answer
        ((), "Quarnessa", 0.0, 0),  # nothing shown
        ((0,), "1312", 1.0, 1),  # right: the metric, whatever was found
    ],
)
def test_a_wrong_answer_earns_lambda_h_times_the_share_of_hops_shown(positions, answer, reward, found) -> None:
    with _env(positions) as env:
        got, info = _play(env, answer)
    assert got == pytest.approx(reward)
    parts = info["reward_parts"]
    assert (parts["hops"], parts["hops_found"]) == (3.0, float(found))
    assert parts["hop_credit"] == pytest.approx(0.5 * found / 3)


def test_lambda_h_is_configurable_and_must_stay_below_one() -> None:
    with SearchQAEnv(
        dataset=[QUESTION], retriever=ScriptedRetriever((0,)), reward={"base": "hop-credit", "lambda_h": 0.9}
    ) as env:
        assert _play(env, "Quarnessa")[0] == pytest.approx(0.3)
    with pytest.raises(ValueError, match=r"lambda_h must be in \[0, 1\)"):
        load_reward("hop-credit", lambda_h=1.0)
    with pytest.raises(ValueError, match=r"metric must be one of \['em', 'cem'\]"):
        load_reward("hop-credit", metric="f1")


def test_only_text_shown_after_the_word_cap_counts() -> None:
    # Passages 0 and 1 are returned, but the 8-word cap shows only the first: the second hop was never seen.
    with _env((0, 1), max_information_words=8) as env:
        _, info = _play(env, "Quarnessa")
    assert info["reward_parts"]["hops_found"] == 1.0


def test_gym_make_and_the_text_path_agree() -> None:
    with gym.make(
        searchenv.ENV_ID, dataset=[QUESTION], retriever=ScriptedRetriever((0, 1)), reward="hop-credit"
    ) as env:
        reward, info = _play(env.unwrapped, "Quarnessa")
        episode = env.unwrapped.episode
        spans, pos = [], 0
        for segment in episode.segments:
            if segment.author == "env":
                spans.append((pos, pos + len(segment.text)))
            pos += len(segment.text)
        text = Rollout.from_text(episode.response_text, ["1312"], env_spans=spans, metadata=QUESTION["metadata"])
    result = load_reward("hop-credit")(text)
    assert (result.reward, dict(result.parts)) == (reward, info["reward_parts"])
    assert reward == pytest.approx(0.5 * 2 / 3)


def test_trainer_rows_carry_the_hop_answers_to_the_reward() -> None:
    example = SearchQAEnv(dataset=[QUESTION], retriever=ScriptedRetriever()).examples[0]
    row = search_r1_row(example, get_protocol("search-r1"), "train", 0)
    assert row["extra_info"]["hop_answers"] == HOPS
    back = row_example(row["reward_model"]["ground_truth"], row["extra_info"])
    assert hop_answers(back.metadata) == tuple(HOPS)
    pytest.importorskip("verl")
    from searchenv.adapters.verl.agent_loop import compute_score

    shown = get_protocol("search-r1").format_passages([CORPUS.passage(0)])  # the first hop's passage
    response = f"{SEARCH}{shown}<answer> Quarnessa </answer>"
    truth, info = row["reward_model"]["ground_truth"], row["extra_info"]
    scored = compute_score("toy", response, truth, info, reward="hop-credit", trust_transcript=True)
    assert scored["score"] == pytest.approx(0.5 / 3)


def test_musique_decompositions_are_hop_answers() -> None:
    if not MUSIQUE.is_file():
        pytest.skip(f"{MUSIQUE} (shared data) is not on this machine")
    row = json.loads(MUSIQUE.read_text(encoding="utf-8").splitlines()[0])
    assert hop_answers(row["metadata"]) == ("American Psychological Association", "G. Stanley Hall")
    with SearchQAEnv(dataset=[row], retriever=ScriptedRetriever(), reward="hop-credit") as env:
        env.reset(options={"index": 0})  # accepted: the decomposition carries every hop's answer


def test_musique_rows_in_its_own_layout_keep_their_decomposition() -> None:
    from searchenv.data.datasets import example_from_row

    row = {  # MuSiQue's own jsonl: the decomposition beside the question, not under "metadata"
        "id": "2hop__1",
        "question": "Who founded the publisher of X?",
        "answer": "Hall",
        "question_decomposition": [
            {"question": "publisher of X?", "answer": "APA"},
            {"question": "?", "answer": "Hall"},
        ],
    }
    assert hop_answers(example_from_row(row).metadata) == ("APA", "Hall")


def test_the_world_carries_hop_answers_for_every_question() -> None:
    from searchenv.data.world.generator import default_world

    for question in default_world().dataset("test"):
        hops = hop_answers(question.metadata)
        assert hops is not None and len(hops) == question.metadata["hops"]


@pytest.mark.parametrize(
    "metadata",
    [{}, {"hop_answers": []}, {"hop_answers": ["a", ""]}, {"hop_answers": "a"}, {"question_decomposition": [{}]}],
)
def test_a_question_without_usable_hop_answers_is_refused_when_the_env_is_built(metadata) -> None:
    row = {**QUESTION, "metadata": metadata}
    with pytest.raises(ValueError, match=r"reward 'hop-credit' needs .*question 'h3' of dataset 'toy'.*'world'"):
        SearchQAEnv(dataset=[row], retriever=ScriptedRetriever(), reward="hop-credit")


def test_a_question_without_hop_answers_is_refused_at_reset_and_on_the_text_path() -> None:
    with _env() as env, pytest.raises(ValueError, match="question 'bare' of dataset 'unknown' has none"):
        env.reset(options={"example": {"id": "bare", "question": "Who?", "golden_answers": ["x"]}})
    with pytest.raises(ValueError, match=r"metadata=example.metadata"):
        load_reward("hop-credit")(Rollout.from_text("<answer> x </answer>", ["x"]))
