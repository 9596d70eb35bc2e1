"""``searchenv study`` end to end on real HotpotQA questions, through the real CLI wiring."""

from __future__ import annotations

import csv
import json

import pytest

from searchenv.cli.main import main
from searchenv.cli.study import StudyRow, answer_recall
from searchenv.corpus import Corpus
from searchenv.types import Passage, QAExample

pytest.importorskip("faiss")
pytest.importorskip("transformers")

ENGINES = ["random", "bm25", "e5-hnsw", "e5-exact"]


@pytest.fixture(scope="module")
def small_setup(shared_data, tmp_path_factory):
    """The first 12 HotpotQA questions and a 60-passage corpus holding their gold paragraphs plus distractors."""
    from searchenv.reward_specs.metrics import answer_in_passages

    questions = [json.loads(line) for line in (shared_data / "qa" / "hotpotqa_100.jsonl").open()][:12]
    full = Corpus.from_jsonl(shared_data / "corpus" / "hotpotqa_hipporag.jsonl")
    gold = {
        i
        for q in questions
        for i in range(len(full))
        if answer_in_passages(q["golden_answers"], [full.search_text(i)]) and q["golden_answers"] != ["yes"]
    }
    keep = sorted(gold)[:40] + [i for i in range(len(full)) if i not in gold][: 60 - min(len(gold), 40)]
    root = tmp_path_factory.mktemp("study")
    corpus = Corpus([full.ids[i] for i in keep], [full.titles[i] for i in keep], [full.texts[i] for i in keep])
    corpus.to_jsonl(root / "corpus.jsonl")
    return root, shared_data / "qa" / "hotpotqa_100.jsonl"


def read_rows(path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_study_writes_table_and_plot_and_reuses_its_indexes(small_setup, capsys):
    root, dataset = small_setup
    args = [
        "study",
        "--dataset",
        str(dataset),
        "--corpus",
        str(root / "corpus.jsonl"),
        "--engines",
        ",".join(ENGINES),
        "--k",
        "5,1,3",
        "--output",
        str(root / "out"),
        "--encoder",
        "minilm",
        "--limit",
        "12",
        "--index-root",
        str(root / "indexes"),
        "--latency-queries",
        "3",
    ]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert all(engine in printed for engine in ENGINES) and "R@3=" in printed
    rows = read_rows(root / "out" / "study.csv")
    assert len(rows) == len(ENGINES) * 3
    assert set(StudyRow.__dataclass_fields__) == set(rows[0])
    recall = {(r["engine"], int(r["k"])): float(r["recall"]) for r in rows}
    for engine in ENGINES:
        assert recall[engine, 1] <= recall[engine, 3] <= recall[engine, 5]
    assert all(r["dataset"] == "hotpotqa_100" and r["n_questions"] == "12" for r in rows)
    assert all(float(r["qps"]) > 0 and float(r["mean_latency_ms"]) > 0 for r in rows)
    assert recall["e5-exact", 5] >= 0.5 and recall["bm25", 5] >= 0.5
    assert recall["e5-exact", 5] > recall["random", 5] and recall["bm25", 5] > recall["random", 5]
    assert (root / "out" / "study.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (root / "out" / "study.md").read_text().splitlines()
    assert table[0].startswith("| dataset | engine | questions | R@1 | R@3 | R@5 |") and len(table) == 2 + len(ENGINES)
    built = sorted((root / "indexes").glob("*/vectors/manifest.json"))  # one embedding; HNSW graph beside it
    assert len(built) == 1 and (built[0].parent.parent / "hnsw-m64-efc40.json").exists()
    stamps = [p.stat().st_mtime_ns for p in sorted(built[0].parent.iterdir())]
    assert main([*args[:6], "e5-exact", *args[7:]]) == 0  # second run: searches only
    assert [p.stat().st_mtime_ns for p in sorted(built[0].parent.iterdir())] == stamps


def test_answer_recall_counts_a_hit_within_the_first_k_passages():
    examples = [QAExample("1", "q1", ("Paris",)), QAExample("2", "q2", ("Berlin",))]
    results = [
        [Passage("a", "France", "the capital is Paris"), Passage("b", "x", "y")],
        [Passage("c", "x", "nothing here"), Passage("d", "Germany", "capital: Berlin.")],
    ]
    assert answer_recall(examples, results, 1) == 0.5
    assert answer_recall(examples, results, 2) == 1.0


def test_study_arguments_are_checked(small_setup, capsys):
    root, dataset = small_setup
    assert main(["study", "--dataset", str(dataset), "--engines", "random", "--output", str(root / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("searchenv study: error: ") and "needs a corpus" in err and "--corpus" in err
    assert not (root / "x").exists()
    with pytest.raises(SystemExit):
        main(["study", "--dataset", str(dataset), "--k", "0,3", "--output", str(root / "x")])
    assert "every item must be a positive integer" in capsys.readouterr().err


@pytest.mark.slow
def test_study_searches_a_prebuilt_index_given_by_index_path(small_setup, shared_data, tmp_path, monkeypatch, capsys):
    """A user with a faiss file of the corpus points the dense engines at it; nothing is embedded."""
    import faiss

    from searchenv.components import load_encoder

    monkeypatch.setenv("SEARCHENV_CACHE_DIR", str(tmp_path / "cache"))
    root, dataset = small_setup
    corpus = Corpus.from_jsonl(root / "corpus.jsonl")
    vectors = load_encoder("minilm").encode_passages([corpus.search_text(i) for i in range(len(corpus))])
    flat = faiss.IndexFlatIP(vectors.shape[1])
    flat.add(vectors.astype("float32"))
    faiss.write_index(flat, str(tmp_path / "minilm_flat.index"))
    common = ["study", "--dataset", str(dataset), "--corpus", str(root / "corpus.jsonl"), "--engines", "e5-exact"]
    common += ["--encoder", "minilm", "--limit", "12", "--k", "1,3", "--latency-queries", "1"]
    built = [*common, "--index-root", str(tmp_path / "embedded"), "--output", str(tmp_path / "embedded-out")]
    assert main(built) == 0
    prebuilt = [*common, "--index-root", str(tmp_path / "unused"), "--output", str(tmp_path / "prebuilt-out")]
    assert main([*prebuilt, "--index-path", str(tmp_path / "minilm_flat.index")]) == 0
    assert not (tmp_path / "unused").exists()  # searched the file, embedded nothing
    recall = [(r["k"], r["recall"]) for r in read_rows(tmp_path / "prebuilt-out" / "study.csv")]
    assert recall == [(r["k"], r["recall"]) for r in read_rows(tmp_path / "embedded-out" / "study.csv")]
    capsys.readouterr()
    assert main([*prebuilt, "--index-path", str(tmp_path / "no.index")]) == 2  # checked before anything loads
    assert "no.index' is not a file" in capsys.readouterr().err
    other = shared_data / "corpus" / "flashrag_sample_e5_flat.index"  # another corpus's 1,000 vectors
    assert main([*prebuilt, "--index-path", str(other)]) == 2
    assert "holds 1,000 vectors but the corpus has 60 passages" in capsys.readouterr().out


def test_study_on_the_generated_world(tmp_path):
    args = [
        "study",
        "--dataset",
        "world",
        "--engines",
        "random,bm25",
        "--k",
        "1,3",
        "--limit",
        "30",
        "--output",
        str(tmp_path / "out"),
        "--index-root",
        str(tmp_path / "idx"),
        "--latency-queries",
        "2",
    ]
    assert main(args) == 0
    recall = {(r["engine"], int(r["k"])): float(r["recall"]) for r in read_rows(tmp_path / "out" / "study.csv")}
    assert recall["bm25", 3] > recall["random", 3]


@pytest.mark.slow
def test_study_keeps_finished_engines_when_a_later_one_fails(tmp_path, capsys):
    broken = tmp_path / "broken-encoder"
    broken.mkdir()
    (broken / "config.json").write_text("{}")  # found by the checks, fails when the model loads
    common = ["--dataset", "world", "--k", "1,3", "--limit", "20", "--index-root", str(tmp_path / "idx")]
    common += ["--latency-queries", "2", "--encoder", str(broken), "--engine", "bm25s"]
    out = tmp_path / "out"
    assert main(["study", *common, "--engines", "random,bm25,e5-exact", "--output", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("searchenv study: error: 1 of the runs failed (e5-exact on world")
    assert "e5-exact  FAILED" in captured.out and "Traceback" not in captured.err
    rows = read_rows(out / "study.csv")
    assert [(r["engine"], r["k"]) for r in rows] == [("random", "1"), ("random", "3"), ("bm25", "1"), ("bm25", "3")]
    assert "| world | bm25 | 20 |" in (out / "study.md").read_text()
    assert [p.name for p in (tmp_path / "idx").iterdir() if "-bm25-bm25s-" in p.name]  # the chosen BM25 engine

    nothing = tmp_path / "nothing"
    assert main(["study", *common, "--engines", "e5-exact", "--output", str(nothing)]) == 2
    assert "--engine: none of the retrievers e5-exact takes 'engine'" in capsys.readouterr().err  # not dropped
    common = common[: common.index("--engine")]
    assert main(["study", *common, "--engines", "e5-exact", "--output", str(nothing)]) == 2
    assert "no engine finished" in capsys.readouterr().err and not nothing.exists()
