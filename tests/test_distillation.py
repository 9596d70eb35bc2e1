"""Distillation on one's own transcripts (``searchenv eval`` a teacher → ``train-sft --transcripts`` → ``eval``):
held-out questions never get in, by label or by content; every record is checked before a model loads; the
checkpoint records the environment the transcripts were played in, and ``eval`` says what it replays."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from searchenv.adapters.sft.demonstrations import transcript_demonstrations
from searchenv.cli.main import main
from searchenv.data.world.generator import default_world

TEACHER = {"protocol": "search-r1", "chat_template": False, "max_turns": 3, "budget": "actions", "topk": 3}
TEACHER |= {"max_information_words": 120, "max_new_tokens": 40, "max_total_tokens": 1024, "reward": "em"}


def record(question: str, *, reward: float = 1.0, split: str | None = "train", **changes) -> dict:
    """One record as ``searchenv eval`` writes it (the fields train-sft reads)."""
    segments = [
        {"author": "model", "text": f"<search> {question} </search>"},
        {"author": "env", "text": "\n\n<information> Doc 1 (Title: A) a passage </information>\n\n"},
        {"author": "model", "text": "<answer> x </answer>"},
    ]
    row = {"policy": "teacher", "method": "agent", "retriever": "bm25", "dataset": "world", "split": split}
    row |= {"source": None, "id": question[:12], "question": question, "prompt": f"Question: {question}\n"}
    row |= {"segments": segments, "reward": reward, "settings": dict(TEACHER)}
    return row | changes


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def train_questions() -> list[str]:
    return [q.question for q in default_world().dataset("train")[:4]]


def test_transcripts_keep_rewarded_episodes_of_the_chosen_policies(tmp_path, train_questions):
    rows = [record(train_questions[0]), record(train_questions[1], reward=0.0)]
    rows.append(record(train_questions[2], policy="other"))
    path = write(tmp_path / "t.jsonl", rows)
    found = transcript_demonstrations(path)
    assert [d.id for d in found.demonstrations] == [rows[0]["id"], rows[2]["id"]]
    assert found.demonstrations[0].segments[1] == ("env", rows[0]["segments"][1]["text"])
    assert transcript_demonstrations(path, policies=["teacher"]).counts == {
        "read": 3,
        "kept": 1,
        "below_reward": 1,
        "other_policy": 1,
    }
    assert len(transcript_demonstrations(path, min_reward=0.0).demonstrations) == 3
    assert transcript_demonstrations(path).settings == {**TEACHER, "retriever": "bm25", "dataset": "world"}
    (tmp_path / "bad.jsonl").write_text('{"prompt": "no segments"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1: not a transcript record"):
        transcript_demonstrations(tmp_path / "bad.jsonl")


def test_held_out_questions_are_refused_by_label_and_by_content_in_one_line(tmp_path, train_questions):
    test_question = default_world().dataset("test")[0].question
    rows = [record(q) for q in train_questions]
    rows.append(record(train_questions[0], split="test"))  # labelled held out
    rows.append(record("  " + test_question.upper()))  # labelled train, but a world test question by content
    with pytest.raises(ValueError) as refused:
        transcript_demonstrations(write(tmp_path / "t.jsonl", rows))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("2 of 6 transcript records are held-out questions (1 labelled with a split other than")
    assert "1 more whose question is in the world's test split" in message
    # an older record that names its split only in its settings is refused too
    older = record(train_questions[0], split=None, settings={**TEACHER, "split": "test"})
    with pytest.raises(ValueError, match="1 of 1 transcript records are held-out"):
        transcript_demonstrations(write(tmp_path / "t.jsonl", [older]))


def test_a_world_folders_test_questions_are_held_out_whatever_the_record_says(tmp_path):
    from searchenv.data.datasets import load_dataset
    from searchenv.data.world.generator import write_world

    folder = write_world(tmp_path / "world", 300, seed=3)
    train = load_dataset(folder / "train.jsonl")[0].question
    test = load_dataset(folder / "test.jsonl")[0].question
    source = str(folder / "train.jsonl")
    rows = [record(train, split=None, source=source), record(test, split=None, source=source)]
    with pytest.raises(ValueError, match="1 of 2 transcript records are held-out"):
        transcript_demonstrations(write(tmp_path / "t.jsonl", rows))
    found = transcript_demonstrations(write(tmp_path / "t.jsonl", rows[:1]))
    assert found.counts == {"read": 1, "kept": 1, "below_reward": 0, "other_policy": 0}


def test_eval_records_name_the_split_and_file_of_their_questions(tmp_path):
    import argparse

    from searchenv.cli.evaluation import add_eval_arguments
    from searchenv.evaluation import suite

    parser = argparse.ArgumentParser()
    add_eval_arguments(parser)
    (tmp_path / "mine.jsonl").write_text(json.dumps({"id": "a", "question": "Q?", "golden_answers": ["x"]}) + "\n")
    args = parser.parse_args(["--datasets", f"world,{tmp_path / 'mine.jsonl'}", "--retrievers", "http://x"])
    found = suite._datasets(args, 2)
    assert (found["world"].split, found["world"].source) == ("test", None)
    assert (found["mine"].split, found["mine"].source) == (None, str((tmp_path / "mine.jsonl").resolve()))
    args = parser.parse_args(["--datasets", "world", "--split", "train"])
    assert suite._datasets(args, 2)["world"].split == "train"


def test_every_record_gets_the_split_and_source_of_its_cell(tmp_path):
    import gymnasium as gym

    import searchenv
    from searchenv.evaluation.runner import Cell, episode_record

    example = default_world().dataset("test")[0]
    env = gym.make(searchenv.ENV_ID, split="test", max_turns=2)
    prompt, _ = env.reset(options={"index": 0})
    env.step("<answer> x </answer>")
    cell = Cell("p", "agent", "bm25", "world", [(example.id, example)], {}, split="test", source=None)
    row = episode_record(cell, example.id, env, prompt, 3)
    assert (row["split"], row["source"], row["question"]) == ("test", None, example.question)
    env.close()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"reward": float("nan")}, "reward is nan, not a number"),
        ({"segments": [{"author": "env", "text": "passages"}]}, "needs at least one 'model' segment"),
        ({"segments": [{"author": "user", "text": "hi"}, {"author": "model", "text": "x"}]}, "only 'model' or"),
        ({"question": "drop"}, "not a transcript record (missing or malformed: 'question')"),  # no content check
    ],
)
def test_a_bad_record_is_named_before_any_model_loads(tmp_path, train_questions, capsys, change, message):
    rows = [record(q) for q in train_questions]
    rows[2] = {key: value for key, value in {**rows[2], **change}.items() if value != "drop"}
    path = write(tmp_path / "t.jsonl", rows)
    argv = ["train-sft", "--no-world", "--transcripts", str(path), "--model", "no-such-model-dir"]
    assert main(argv) == 2
    err = capsys.readouterr().err  # the model check comes first: a missing model is named before the records
    assert "no model at 'no-such-model-dir'" in err
    assert main([*argv[:-1], "smollm2-135m", "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "t.jsonl:3: " in err and message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


@pytest.fixture
def tokenizer_only(smollm2_dir, tmp_path) -> Path:
    """A folder with SmolLM2's config and tokenizer but no weights: a command that loaded the model would fail
    on it with transformers' own error, so a check that passes here ran before the weights."""
    folder = tmp_path / "tokenizer-only"
    folder.mkdir()
    for path in smollm2_dir.iterdir():
        if not path.name.endswith((".safetensors", ".bin")):
            shutil.copy(path, folder / path.name)
    return folder


def test_filters_and_lengths_are_checked_with_the_tokenizer_alone(tmp_path, train_questions, tokenizer_only, capsys):
    rows = [record(q, reward=0.0) for q in train_questions] + [record(train_questions[0], reward=float("inf"))]
    argv = ["train-sft", "--no-world", "--model", str(tokenizer_only), "--output-dir", str(tmp_path / "out")]
    path = write(tmp_path / "t.jsonl", rows[:4])
    assert main([*argv, "--transcripts", str(path)]) == 2
    said, err = capsys.readouterr()
    assert "0 demonstrations of 4 transcript records (4 below --min-reward 1)" in said
    assert "none of the 4 transcript records has a reward of --min-reward 1 or more" in err
    assert main([*argv, "--transcripts", str(write(tmp_path / "t.jsonl", rows))]) == 2
    assert "reward is inf, not a number" in capsys.readouterr().err
    long = record(train_questions[1])
    long["segments"][0]["text"] = "<think> " + "word " * 20_000 + "</think>"
    assert main([*argv, "--transcripts", str(write(tmp_path / "t.jsonl", [long]))]) == 2
    err = capsys.readouterr().err
    assert f"demonstration {long['id']!r} has" in err and "tokens, over the limit of 4096 (--max-tokens)" in err
    assert not (tmp_path / "out").exists()


def test_mixed_settings_are_refused(tmp_path, train_questions, capsys):
    rows = [record(q) for q in train_questions]
    rows[1]["settings"] = {**TEACHER, "topk": 5}
    with pytest.raises(ValueError, match=r"played under 2 different settings \(3 with .*topk 3.*; 1 with .*topk 5"):
        transcript_demonstrations(write(tmp_path / "t.jsonl", rows))
    # the world's demonstrations would be played under train-sft's own settings: refused, not mixed
    path = write(tmp_path / "t.jsonl", [record(q) for q in train_questions])
    assert main(["train-sft", "--transcripts", str(path), "--output-dir", ""]) == 2
    err = capsys.readouterr().err
    assert "the transcripts were played with --max-turns 3 --topk 3 --max-information-words 120" in err
    assert "or --no-world to learn from the transcripts alone" in err


def test_the_checkpoint_records_the_transcripts_settings_and_eval_says_it_replays_them(
    smollm2_dir, tmp_path, train_questions, capsys
):
    import argparse

    from searchenv.cli.evaluation import add_eval_arguments
    from searchenv.evaluation import suite
    from searchenv.rollout import read_run_settings

    path = write(tmp_path / "t.jsonl", [record(q) for q in train_questions])
    out = tmp_path / "sft"
    argv = ["train-sft", "--no-world", "--transcripts", str(path), "--model", str(smollm2_dir), "--steps", "1"]
    argv += ["--batch-size", "1", "--micro-batch-size", "1", "--trainable-layers", "1", "--no-bf16"]
    assert main([*argv, "--output-dir", str(out)]) == 0
    said = capsys.readouterr().out
    assert "4 demonstrations of 4 transcript records (0 below --min-reward 1)" in said
    assert "the transcripts' settings are recorded for eval to replay: --max-turns 3 --topk 3" in said
    saved = read_run_settings(out / "final")
    for key, value in TEACHER.items():
        assert saved[key] == value, key  # the teacher's environment, not train-sft's defaults (topk 2, 6 turns)
    parser = argparse.ArgumentParser()
    add_eval_arguments(parser)
    args = parser.parse_args(["--model", str(out / "final"), "--topk", "4"])
    spec = suite.ModelSpec.parse(str(out / "final"))
    settings, mismatches, _ = suite._settings(args, spec, suite.DEFAULTS)
    assert (
        settings["max_turns"] == 3
        and settings["topk"] == 4
        and mismatches == ["topk: trained with 3, evaluated with 4"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "searchenv eval: final replays its searchenv_run.json: protocol search-r1, chat_template False, max_turns 3, "
        "budget actions, max_information_words 120, max_new_tokens 40, max_total_tokens 1024"
    ]


def test_eval_refuses_a_missing_model_before_anything_loads_and_leaves_nothing(tmp_path, capsys):
    output = tmp_path / "out"
    assert main(["eval", "--model", str(tmp_path / "nope"), "--output", str(output), "--no-plot"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no model at" in err and "building retriever" not in err
    assert not output.exists()
    (tmp_path / "empty").mkdir()
    assert main(["eval", "--model", str(tmp_path / "empty"), "--output", str(output)]) == 2
    assert "holds no config.json" in capsys.readouterr().err


def test_an_evaluation_that_fails_before_its_first_episode_leaves_no_folder(tmp_path):
    from searchenv.evaluation.runner import exclusive_output

    output = tmp_path / "out"
    with pytest.raises(RuntimeError, match="boom"), exclusive_output(output):
        raise RuntimeError("boom")
    assert not output.exists()
    output.mkdir()
    (output / "transcripts.jsonl").write_text("")
    with exclusive_output(output):
        pass
    assert sorted(p.name for p in output.iterdir()) == [".lock", "transcripts.jsonl"]  # a run's folder stays whole


def test_train_sft_help_names_the_distillation_workflow(capsys):
    with pytest.raises(SystemExit) as done:
        main(["train-sft", "--help"])
    assert done.value.code == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "Distillation: evaluate a teacher on training questions (searchenv eval --split train" in said
    assert "docs/evaluation.md ('Distillation') has the workflow, the record format" in said
    assert "--max-tokens" in said


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_hop_cap_below_one_is_refused_before_anything_runs(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as exited:
        main(["train-sft", "--max-hops", value, "--output-dir", str(tmp_path / "out")])
    assert exited.value.code == 2
    assert "--max-hops" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
