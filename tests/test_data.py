"""Dataset loaders on the real files in ../shared/data."""

from __future__ import annotations

import json

import pytest

from searchenv import Corpus, load_dataset
from searchenv.data.datasets import example_from_row


def test_flashrag_jsonl(shared_data):
    examples = load_dataset(shared_data / "qa" / "nq_test_17.jsonl")
    assert len(examples) == 17
    first = examples[0]
    assert first.id == "test_0" and first.question == "who got the first nobel prize in physics"
    assert first.golden_answers == ("Wilhelm Conrad Röntgen",)
    assert load_dataset(shared_data / "qa" / "hotpotqa_100.jsonl", limit=5)[0].metadata["type"] == "bridge"


def test_searchr1_parquet_with_plain_string_ground_truth(shared_data):
    examples = load_dataset(shared_data / "parquet" / "musique_dev_searchr1.parquet")
    assert len(examples) == 2417
    assert examples[0].golden_answers == ("Miquette Giraudy",)
    assert examples[0].question == "Who is the spouse of the Green performer?"


def test_searchr1_rows_with_target_and_template_prompt():
    row = {
        "data_source": "nq",
        "prompt": [{"role": "user", "content": "Answer the given question. ... Question: who wrote hamlet?\n"}],
        "reward_model": {"style": "rule", "ground_truth": {"target": ["Shakespeare", "William Shakespeare"]}},
        "extra_info": {"split": "test", "index": 4},
    }
    example = example_from_row(row)
    assert example.question == "who wrote hamlet?"
    assert example.golden_answers == ("Shakespeare", "William Shakespeare")
    assert example.id == "4" and example.data_source == "nq"


def test_list_of_dicts_and_aliases():
    examples = load_dataset([{"question": "q?", "answers": ["a"]}, {"question": "r?", "answer": "b"}])
    assert [e.golden_answers for e in examples] == [("a",), ("b",)]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"question": "q?"}, "needs 'question'"),
        ({"question": "q?", "golden_answers": 3}, "cannot read gold answers"),
        ({"question": "  ", "golden_answers": ["a"]}, "non-empty"),
        ({"question": "q?", "golden_answers": []}, "cannot read gold answers"),
        ({"question": "q?", "golden_answers": {"answers": ["a"]}}, "cannot read gold answers"),
        (["not", "a", "dict"], "expected a mapping"),
    ],
)
def test_bad_rows_are_named(row, message):
    with pytest.raises(ValueError, match=message):
        load_dataset([row])


def test_broken_jsonl_line_is_located(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text('{"question": "q?", "golden_answers": ["a"]}\n{broken\n')
    with pytest.raises(ValueError, match=r"qa.jsonl:2"):
        load_dataset(path)


def test_hub_name_with_local_override(shared_data, tmp_path, monkeypatch):
    (tmp_path / "nq").mkdir()
    (tmp_path / "nq" / "test.jsonl").write_bytes((shared_data / "qa" / "nq_test_17.jsonl").read_bytes())
    monkeypatch.setenv("SEARCHENV_DATA_DIR", str(tmp_path))
    examples = load_dataset("nq", split="test")
    assert len(examples) == 17 and examples[0].data_source == "nq"
    with pytest.raises(ValueError, match="splits"):
        load_dataset("bamboogle", split="train")


def test_hub_name_offline_gives_actionable_error(monkeypatch):
    monkeypatch.delenv("SEARCHENV_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pytest.importorskip("huggingface_hub")
    with pytest.raises(RuntimeError, match="SEARCHENV_DATA_DIR"):
        load_dataset("popqa", split="test")


def test_corpus_jsonl_titles_and_errors(shared_data, tmp_path):
    corpus = Corpus.from_jsonl(shared_data / "corpus" / "flashrag_sample.jsonl")
    assert len(corpus) == 1000
    assert not corpus.titles[0].startswith('"') and corpus.texts[0]
    assert corpus.passage(0).contents.startswith(f'"{corpus.titles[0]}"\n')
    assert len(corpus.checksum) == 64
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"id": "1", "contents": '"T"\nbody'}) + "\n" + json.dumps({"id": "2"}) + "\n")
    with pytest.raises(ValueError, match=r"c.jsonl:2"):
        Corpus.from_jsonl(path)
    out = tmp_path / "round.jsonl"
    corpus.to_jsonl(out)
    assert Corpus.from_jsonl(out).checksum == corpus.checksum
