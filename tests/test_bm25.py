"""BM25 engines: correctness on a hand-checked corpus, agreement with Lucene on real passages, index directories.

One Lucene index of union.jsonl is built per module and shared; the JVM starts once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from searchenv.retrievers import make_retriever
from searchenv.retrievers.analysis import EnglishAnalyzer
from searchenv.retrievers.bm25 import ENGINES, BM25Retriever, tie_tolerant_agreement
from searchenv.retrievers.index_store import MANIFEST_NAME, IndexMismatchError
from searchenv.retrievers.sparse import lucene_length
from searchenv.types import Corpus, Passage

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
UNION = DATA / "corpus" / "union.jsonl"
NQ = DATA / "qa" / "nq_test_1000.jsonl"

TINY = Corpus.from_passages(
    [
        Passage("p0", "Honeybee", "Honeybees make honey from flower nectar and store it in wax combs inside the hive."),
        Passage("p1", "Volcano", "A volcano erupts when molten magma rises through the crust and pours out as lava."),
        Passage("p2", "Chess", "Chess is a board game in which a king, queens, rooks and pawns move on 64 squares."),
        Passage("p3", "Glacier", "Glaciers are slow rivers of ice that carve valleys as they creep downhill."),
        Passage("p4", "Violin", "The violin is a string instrument played with a bow; Stradivari built famous ones."),
        Passage("p5", "Saturn", "Saturn is the sixth planet from the Sun and has bright rings of ice and rock."),
        Passage("p6", "Penguin", "Penguins are flightless birds that swim in the cold Southern Ocean near Antarctica."),
        Passage("p7", "Baking", "Bread rises because yeast ferments sugar and releases carbon dioxide into the dough."),
    ]
)
# (query, the one passage a reader would pick); several match only after stemming (erupting, carving, violins).
TINY_QUERIES = [
    ("How do bees make honey?", "p0"),
    ("lava erupting from a volcano", "p1"),
    ("which board game has pawns and rooks", "p2"),
    ("glacier carving valleys", "p3"),
    ("who built famous violins", "p4"),
    ("planet with rings", "p5"),
    ("birds that cannot fly: penguins", "p6"),
    ("why does bread dough rise with yeast", "p7"),
]


@pytest.fixture(scope="module")
def union() -> Corpus:
    return Corpus.from_jsonl(UNION)


@pytest.fixture(scope="module")
def questions() -> list[str]:
    with NQ.open(encoding="utf-8") as handle:
        return [json.loads(line)["question"] for line in handle][:40]


@pytest.fixture(scope="module")
def lucene_dir(tmp_path_factory, union) -> Path:
    """The shared Lucene index of union.jsonl, persisted (and so also exercising the manifest)."""
    directory = tmp_path_factory.mktemp("bm25") / "union-lucene"
    BM25Retriever(union, engine="lucene", index_dir=directory, show_progress=False)
    return directory


@pytest.fixture(scope="module")
def lucene(union, lucene_dir) -> BM25Retriever:
    return BM25Retriever(union, engine="lucene", index_dir=lucene_dir, show_progress=False)


@pytest.fixture(scope="module")
def native_union(tmp_path_factory, union) -> BM25Retriever:
    return BM25Retriever(union, engine="native", index_dir=tmp_path_factory.mktemp("bm25") / "n", show_progress=False)


@pytest.fixture(scope="module")
def tiny() -> dict[str, BM25Retriever]:
    """One in-memory retriever per engine over TINY, built on first use."""
    return {}


def _tiny(cache: dict[str, BM25Retriever], engine: str) -> BM25Retriever:
    if engine not in cache:
        cache[engine] = make_retriever("bm25", TINY, engine=engine, show_progress=False)
    return cache[engine]


@pytest.mark.parametrize("engine", ENGINES)
def test_tiny_corpus_obvious_top1_and_descending_scores(engine, tiny):
    retriever = _tiny(tiny, engine)
    results = retriever.search([q for q, _ in TINY_QUERIES], k=3)
    assert [r[0].id for r in results] == [want for _, want in TINY_QUERIES]
    for hits in results:
        scores = [p.score for p in hits]
        assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
        assert all(isinstance(p, Passage) and p.text == TINY.passage(int(p.id[1:])).text for p in hits)


@pytest.mark.parametrize("engine", ENGINES)
def test_blank_queries_unknown_words_and_k_beyond_corpus(engine, tiny):
    retriever = _tiny(tiny, engine)
    results = retriever.search(["", "   \n", "the of and", "zyzzyva qwxj", "ice"], k=50)
    assert results[:4] == [[], [], [], []]
    # "ice" occurs in exactly two passages: k beyond the corpus returns just those, best first.
    assert sorted(p.id for p in results[4]) == ["p3", "p5"]
    assert retriever.search(["ice"], k=0) == [[]]
    assert retriever.search([], k=3) == []


def test_engines_agree_with_lucene_on_union(union, questions, lucene, native_union):
    """Tie-tolerant top-3 agreement with Lucene on real Wikipedia passages and NQ questions."""
    ref_ids, ref_scores = _ranking(union, lucene.search(questions, k=1000))
    retrievers = {
        "native": native_union,
        "bm25s": BM25Retriever(union, engine="bm25s", show_progress=False),
        "rank-bm25": BM25Retriever(union, engine="rank-bm25", show_progress=False),
    }
    for engine, retriever in retrievers.items():
        n = 12 if engine == "rank-bm25" else len(questions)  # rank-bm25 answers ~10 queries/s
        mine, _ = _ranking(union, retriever.search(questions[:n], k=3))
        agreement = tie_tolerant_agreement(mine, ref_ids[:n], ref_scores[:n])
        assert agreement >= 0.95, f"{engine}: tie-tolerant top-3 agreement with Lucene {agreement:.3f}"
        if engine == "native":  # same analyzer, norms and float order: nearly always the very same lists
            same = sum(m == r[:3] for m, r in zip(mine, ref_ids, strict=True))
            assert same >= 0.9 * len(questions)


def _ranking(corpus: Corpus, results: list[list[Passage]]) -> tuple[list[list[int]], list[list[float]]]:
    """Corpus positions and scores of every result list (union ids are not positions)."""
    where = {pid: i for i, pid in enumerate(corpus.ids)}
    return [[where[p.id] for p in hits] for hits in results], [[p.score for p in hits] for hits in results]


def test_analyzer_matches_lucene_terms(union, questions):
    from searchenv.retrievers.lucene import lucene_analyze

    texts = [union.search_text(i) for i in range(0, len(union), 40)] + questions
    ours = EnglishAnalyzer().analyze_many(texts)
    theirs = lucene_analyze(texts)
    total = sum(len(t) for t in theirs)
    same = sum(sum(min(a.count(w), b.count(w)) for w in set(b)) for a, b in zip(ours, theirs, strict=True))
    assert same / total >= 0.999, f"only {same / total:.4%} of Lucene's terms reproduced"


def test_document_length_rounding_matches_lucene_norms():
    from searchenv.retrievers.lucene import start_jvm

    small_float = start_jvm().autoclass("org.apache.lucene.util.SmallFloat")
    lengths = np.r_[np.arange(0, 3000), [10_000, 123_456, 2**31 - 1]]
    expected = [small_float.byte4ToInt(small_float.intToByte4(int(n))) for n in lengths]
    assert lucene_length(lengths).tolist() == expected


def test_index_persistence_round_trip(union, questions, native_union):
    directory = native_union.index_dir
    built = native_union
    manifest = json.loads((directory / MANIFEST_NAME).read_text())
    assert manifest["engine"] == "native" and manifest["corpus_checksum"] == union.checksum
    assert manifest["corpus_size"] == len(union) and manifest["params"]["k1"] == 0.9
    reloaded = BM25Retriever(union, engine="native", index_dir=directory, show_progress=False)
    assert reloaded.search(questions, k=3) == built.search(questions, k=3)


def test_lucene_index_reloads_and_matches_in_memory_build(lucene, lucene_dir):
    manifest = json.loads((lucene_dir / MANIFEST_NAME).read_text())
    assert manifest["engine"] == "lucene" and manifest["engine_version"].startswith("pyserini-")
    first = lucene.search(["Spanish civil war anarchism"], k=3)[0]
    assert first and first[0].title == "1936 in the Spanish Civil War"


def test_mismatched_corpus_engine_or_directory_is_refused(tmp_path, union, lucene_dir):
    with pytest.raises(IndexMismatchError) as info:
        BM25Retriever(TINY, engine="lucene", index_dir=lucene_dir, show_progress=False)
    message = str(info.value)
    assert union.checksum in message and TINY.checksum in message and "rebuild" in message
    with pytest.raises(IndexMismatchError, match="engine 'lucene'"):
        BM25Retriever(union, engine="native", index_dir=lucene_dir, show_progress=False)
    directory = tmp_path / "tiny"
    BM25Retriever(TINY, engine="native", index_dir=directory, show_progress=False)
    with pytest.raises(IndexMismatchError, match="parameters"):
        BM25Retriever(TINY, engine="native", index_dir=directory, k1=1.2, show_progress=False)
    rebuilt = BM25Retriever(TINY, engine="native", index_dir=directory, k1=1.2, show_progress=False, rebuild=True)
    assert rebuilt.search(["violin"], 1)[0][0].id == "p4"
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(IndexMismatchError, match="not a searchenv index"):
        BM25Retriever(TINY, engine="native", index_dir=foreign, show_progress=False, rebuild=True)
    assert (foreign / "notes.txt").read_text() == "mine"


def test_unknown_engine_lists_the_engines():
    with pytest.raises(ValueError, match="unknown BM25 engine 'elastic'") as info:
        make_retriever("bm25", TINY, engine="elastic")
    assert all(name in str(info.value) for name in ENGINES)


def test_one_bad_query_does_not_sink_a_lucene_batch(lucene, union):
    # Lucene refuses queries of more than 1,024 distinct terms; the other queries of the batch still answer.
    huge = " ".join(sorted({w for text in union.texts[:2000] for w in text.split() if w.isalpha()})[:3000])
    with pytest.warns(RuntimeWarning, match="returning no passages"):
        results = lucene.search(["Spanish civil war anarchism", huge], k=3)
    assert results[0] and results[1] == []


def test_lucene_needs_neither_java_home_nor_openai_key(monkeypatch, tmp_path):
    """In a fresh interpreter (so the JVM really starts here) with neither variable set, and none left behind."""
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    script = textwrap.dedent(
        f"""
        import os
        from searchenv.retrievers import make_retriever
        from searchenv.types import Corpus, Passage
        corpus = Corpus.from_passages([Passage("a", "Alps", "mountains of Europe"), Passage("b", "Nile", "a river")])
        hits = make_retriever("bm25", corpus, engine="lucene", index_dir={str(tmp_path / "idx")!r},
                              show_progress=False).search(["longest river"], k=1)
        assert [p.id for p in hits[0]] == ["b"], hits
        assert "JAVA_HOME" not in os.environ and "OPENAI_API_KEY" not in os.environ
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ), check=False
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]
