"""BM25 engines: correctness on a hand-checked corpus, agreement with Lucene on real passages, index directories.

One Lucene index of union.jsonl is built per module and shared; the JVM starts once.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from searchenv.corpus import Corpus
from searchenv.retrievers import make_retriever
from searchenv.retrievers.bm25.analyzer import EnglishAnalyzer
from searchenv.retrievers.bm25.native import engine as native_search
from searchenv.retrievers.bm25.native.builder import build_native_index
from searchenv.retrievers.bm25.native.engine import SEED_FROM_BLOCKS, NativeEngine
from searchenv.retrievers.bm25.native.index_format import lucene_length
from searchenv.retrievers.bm25.retriever import ENGINES, BM25Retriever, tie_tolerant_agreement
from searchenv.retrievers.index_store import MANIFEST_NAME, IndexMismatchError
from searchenv.types import Passage

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
def union(shared_data) -> Corpus:
    return Corpus.from_jsonl(shared_data / "corpus" / "union.jsonl")


@pytest.fixture(scope="module")
def questions(shared_data) -> list[str]:
    with (shared_data / "qa" / "nq_test_1000.jsonl").open(encoding="utf-8") as handle:
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


@pytest.mark.slow
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


def test_seeded_and_unseeded_walks_return_the_same_passages(shared_data, native_union):
    """Queries of up to SEED_FROM_BLOCKS blocks skip the seeded cut-off; forcing it on must not change a result."""
    with (shared_data / "qa" / "nq_test_1000.jsonl").open(encoding="utf-8") as handle:
        questions = [json.loads(line)["question"] for line in handle][:300]
    engine = NativeEngine(native_union.index_dir, threads=1)
    assert engine.seed_from_blocks == SEED_FROM_BLOCKS > 0  # union's queries are all short: none is seeded
    engine.term_at_a_time = False  # union is small enough to be searched term at a time: walk it here
    for k in (3, 10):
        plain = engine.search(questions, k)
        engine.seed_from_blocks = 0  # every query seeded
        seeded = engine.search(questions, k)
        engine.seed_from_blocks = SEED_FROM_BLOCKS
        assert [docs.tolist() for docs, _ in seeded] == [docs.tolist() for docs, _ in plain]
        for (_, mine), (_, theirs) in zip(seeded, plain, strict=True):
            assert mine.tolist() == pytest.approx(theirs.tolist(), rel=1e-6)


def test_term_at_a_time_and_the_walk_return_the_same_passages(shared_data, native_union):
    """A small index is searched term at a time over its decoded postings; the MaxScore walk over the blocks
    must give the very same lists and scores (same impacts, summed in double), for every k and batch shape."""
    with (shared_data / "qa" / "nq_test_1000.jsonl").open(encoding="utf-8") as handle:
        questions = [json.loads(line)["question"] for line in handle][:300]
    questions += ["", "the of and", "zzzzqqq unknownword", "einstein einstein einstein"]  # no term, stopwords, repeats
    engine = NativeEngine(native_union.index_dir, threads=2)
    assert engine.term_at_a_time  # 19.6k passages: well under TERM_AT_A_TIME_POSTINGS
    for k in (1, 3, 10):
        by_terms = engine.search(questions, k)
        engine.term_at_a_time = False
        walked = engine.search(questions, k)
        engine.term_at_a_time = True
        for (docs, scores), (want_docs, want_scores) in zip(by_terms, walked, strict=True):
            assert np.array_equal(docs, want_docs) and np.array_equal(scores, want_scores)
    assert [len(docs) for docs, _ in by_terms[-4:-1]] == [0, 0, 0]
    assert len(by_terms[-1][0]) > 0  # a repeated term is one term, boosted


def test_decoded_postings_keep_every_posting_and_a_large_index_is_walked(native_union):
    """Below TERM_AT_A_TIME_POSTINGS the decoded arrays hold every posting of every term, in order, with the
    impact the block bounds were written from; above it the index is not decoded and is walked."""
    engine = NativeEngine(native_union.index_dir, threads=1)
    starts, docs, impacts = engine._decoded_postings()
    data, term_blocks, _, block_offset, block_max, *_ = engine._arrays
    counts = data[block_offset[:-1].astype(np.int64) + 2].astype(np.int64) + 1
    assert starts[-1] == len(docs) == len(impacts) == counts.sum()
    assert (impacts > 0).all()
    for t in (0, len(starts) // 2, len(starts) - 2):  # each term's documents ascend; its best impact is its bound
        assert (np.diff(docs[starts[t] : starts[t + 1]]) > 0).all()
        assert impacts[starts[t] : starts[t + 1]].max() == block_max[term_blocks[t] : term_blocks[t + 1]].max()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native_search, "TERM_AT_A_TIME_POSTINGS", len(docs) - 1)
        assert not NativeEngine(native_union.index_dir, threads=1).term_at_a_time


def test_batched_search_over_threads_equals_one_thread(shared_data, native_union):
    """A batch is searched in jobs of consecutive queries that free threads take from a queue (the last job
    shorter); every query still gets the answer a one-thread search gives it, in the order asked."""
    with (shared_data / "qa" / "nq_test_1000.jsonl").open(encoding="utf-8") as handle:
        questions = [json.loads(line)["question"] for line in handle][:203]
    one, three = NativeEngine(native_union.index_dir, threads=1), NativeEngine(native_union.index_dir, threads=3)
    for k, walk in ((1, False), (3, False), (10, False), (3, True)):
        one.term_at_a_time = three.term_at_a_time = not walk
        expected = one.search(questions, k)
        # 203 queries: 67 jobs of 3 and one of 2; 5 queries: jobs of 2, 2 and 1; 1 query: this thread alone
        for batch in (questions, questions[:5], questions[:1]):
            found = three.search(batch, k)
            assert len(found) == len(batch)
            for (docs, scores), (want_docs, want_scores) in zip(found, expected, strict=False):
                assert np.array_equal(docs, want_docs) and np.array_equal(scores, want_scores)
    assert three.search([], 3) == [] and one.search([], 3) == []


def _ranking(corpus: Corpus, results: list[list[Passage]]) -> tuple[list[list[int]], list[list[float]]]:
    """Corpus positions and scores of every result list (union ids are not positions)."""
    where = {pid: i for i, pid in enumerate(corpus.ids)}
    return [[where[p.id] for p in hits] for hits in results], [[p.score for p in hits] for hits in results]


def test_analyzer_matches_lucene_terms(union, questions):
    from searchenv.retrievers.bm25.lucene import lucene_analyze

    texts = [union.search_text(i) for i in range(0, len(union), 40)] + questions
    ours = EnglishAnalyzer().analyze_many(texts)
    theirs = lucene_analyze(texts)
    total = sum(len(t) for t in theirs)
    same = sum(sum(min(a.count(w), b.count(w)) for w in set(b)) for a, b in zip(ours, theirs, strict=True))
    assert same / total >= 0.999, f"only {same / total:.4%} of Lucene's terms reproduced"


def test_document_length_rounding_matches_lucene_norms():
    from searchenv.retrievers.bm25.lucene import start_jvm

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


@pytest.mark.slow
def test_lucene_needs_neither_java_home_nor_openai_key(monkeypatch, tmp_path):
    """In a fresh interpreter (so the JVM really starts here) with neither variable set, and none left behind."""
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    script = textwrap.dedent(
        f"""
        import os
        from searchenv.retrievers import make_retriever
        from searchenv.corpus import Corpus
        from searchenv.types import Passage
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


# ------------------------------------------------------------------------------ streaming build, on-disk index
def test_streamed_build_in_tiny_segments_equals_one_shot_build(tmp_path, union, questions):
    """Segments of 97 passages and merges of 20,000 postings give byte-identical files and the same results."""
    part = Corpus(union.ids[:3000], union.titles[:3000], union.texts[:3000], source="union[:3000]")
    one_shot, streamed = tmp_path / "one", tmp_path / "streamed"
    build_native_index(part, one_shot, 0.9, 0.4, segment_docs=len(part), show_progress=False)
    pairs = ((part.ids[i], part.search_text(i)) for i in range(len(part)))  # an iterator, read once
    assert build_native_index(pairs, streamed, 0.9, 0.4, segment_docs=97, merge_postings=20_000, show_progress=False)
    names = sorted(p.name for p in one_shot.iterdir())
    assert names == sorted(p.name for p in streamed.iterdir()) and "postings.bin" in names
    assert all((one_shot / n).read_bytes() == (streamed / n).read_bytes() for n in names)
    engine = NativeEngine(streamed, threads=2)
    assert isinstance(engine._arrays[0].base, np.memmap)  # searched from the mapped file, not a copy
    hits = engine.search(questions, 3)
    reference = NativeEngine(one_shot, threads=1).search(questions, 3)
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(hits, reference, strict=True))


def test_build_with_forgetful_workers_writes_the_same_index(tmp_path, union, monkeypatch):
    """Workers that start their token tables afresh between segments (a bounded memory) change no byte."""
    import functools

    from searchenv.retrievers.bm25.native import builder as build
    from searchenv.retrievers.bm25.native.segments import SegmentAnalyser

    texts = [union.search_text(i) for i in range(1500)]
    build_native_index(texts, tmp_path / "plain", 0.9, 0.4, segment_docs=200, show_progress=False)
    monkeypatch.setattr(build, "SegmentAnalyser", functools.partial(SegmentAnalyser, max_tokens=2000))
    build_native_index(texts, tmp_path / "forgetful", 0.9, 0.4, segment_docs=200, show_progress=False)
    names = sorted(p.name for p in (tmp_path / "plain").iterdir())
    assert all((tmp_path / "plain" / n).read_bytes() == (tmp_path / "forgetful" / n).read_bytes() for n in names)


def test_parallel_build_equals_serial_build(tmp_path):
    texts = [f"passage {i} about topic{i % 97} and item{i % 13} with word{i % 5} " * (1 + i % 3) for i in range(60_000)]
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    build_native_index(texts, serial, 0.9, 0.4, workers=1, segment_docs=20_000, show_progress=False)
    build_native_index(iter(texts), parallel, 0.9, 0.4, workers=2, segment_docs=20_000, show_progress=False)
    assert all((serial / n).read_bytes() == (parallel / n).read_bytes() for n in ("postings.bin", "terms.txt"))


@pytest.mark.slow
def test_merge_of_single_term_ranges_over_many_segments_equals_one_shot_build(tmp_path, union):
    """Merge ranges of one term each, read slice by slice from 37 segments whose term ids interleave, change no byte."""
    texts = [union.search_text(i) for i in range(400)]
    build_native_index(texts, tmp_path / "one", 0.9, 0.4, segment_docs=len(texts), show_progress=False)
    build_native_index(texts, tmp_path / "sliced", 0.9, 0.4, segment_docs=11, merge_postings=1, show_progress=False)
    names = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "sliced").iterdir())
    assert all((tmp_path / "one" / n).read_bytes() == (tmp_path / "sliced" / n).read_bytes() for n in names)


class _DictTerms:
    """The term lookup the engine had before its mapped table: a dictionary of every term (the reference)."""

    def __init__(self, directory: Path):
        text = (directory / "terms.txt").read_text(encoding="utf-8")
        self.term_ids = {term: i for i, term in enumerate(text.split("\n") if text else [])}

    def ids(self, terms: list[str]) -> np.ndarray:
        return np.array([self.term_ids.get(term, -1) for term in terms], dtype=np.int64)


def test_mapped_term_table_finds_what_a_dictionary_finds(tmp_path, union, questions):
    """Every indexed term (non-ASCII ones included) gets its id, absent ones none, and searches are identical."""
    texts = [union.search_text(i) for i in range(2000)] + [_FRAGMENTS]
    build_native_index(texts, tmp_path, 0.9, 0.4, show_progress=False)
    engine = NativeEngine(tmp_path, threads=2)
    reference = _DictTerms(tmp_path)
    vocabulary = list(reference.term_ids)
    assert isinstance(engine.terms.text, np.memmap) and not hasattr(engine, "vocabulary")
    assert sum(not term.isascii() for term in vocabulary) > 20  # Москва, straße, 東京, …
    absent = ["", "zzqxv", "\n", "ü", "東京東京東京", *(t + "é" for t in vocabulary[::50])]
    absent += [t[:-1] for t in vocabulary]  # prefixes: the binary search's nearest misses
    probes = vocabulary + [t for t in absent if t not in reference.term_ids]
    assert engine.terms.ids(probes) == reference.ids(probes).tolist()
    assert engine.terms.ids(probes[::-1]) == reference.ids(probes[::-1]).tolist()  # remembered ids too
    queries = [*questions, "Москва straße naïve café 東京 zzqxv", "zzqxv qqwwee", "", "ΟΔΟΣ Ελλάδα ½ ① 한국어"]
    hits = engine.search(queries, 10)
    engine.terms = reference
    expected = engine.search(queries, 10)
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(hits, expected, strict=True))
    assert len(hits[-4][0]) and not len(hits[-3][0]) and not len(hits[-2][0])


def test_index_without_the_term_table_gets_it_once(tmp_path, monkeypatch):
    """An index written before the lookup files existed gets them derived, the same bytes a build writes."""
    from searchenv.retrievers.bm25.native import term_lookup

    build_native_index([TINY.search_text(i) for i in range(len(TINY))], tmp_path, 0.9, 0.4, show_progress=False)
    table = {name: (tmp_path / name).read_bytes() for name in ("term_starts.npy", "term_order.npy")}
    queries = [q for q, _ in TINY_QUERIES]
    expected = NativeEngine(tmp_path, threads=1).search(queries, 3)
    for name in table:
        (tmp_path / name).unlink()

    def read_only(path, array):
        raise PermissionError(f"read-only: {path}")

    monkeypatch.setattr(term_lookup, "_save", read_only)
    with pytest.raises(ValueError, match="predates the term lookup files.*rebuild the index"):
        NativeEngine(tmp_path, threads=1)
    monkeypatch.undo()
    hits = NativeEngine(tmp_path, threads=1).search(queries, 3)
    assert {name: (tmp_path / name).read_bytes() for name in table} == table
    assert {(tmp_path / name).stat().st_mode for name in table} == {(tmp_path / "idf.npy").stat().st_mode}
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(hits, expected, strict=True))


def test_corrupt_index_is_refused(tmp_path):
    directory = tmp_path / "tiny"
    BM25Retriever(TINY, engine="native", index_dir=directory, show_progress=False)
    postings = directory / "postings.bin"
    postings.write_bytes(postings.read_bytes()[:-3])
    with pytest.raises(ValueError, match="corrupt native BM25 index"):
        BM25Retriever(TINY, engine="native", index_dir=directory, show_progress=False)
    (directory / "idf.npy").unlink()
    with pytest.raises(ValueError, match="not a complete native BM25 index"):
        BM25Retriever(TINY, engine="native", index_dir=directory, show_progress=False)


def test_index_of_an_older_format_is_refused(tmp_path):
    directory = tmp_path / "tiny"
    BM25Retriever(TINY, engine="native", index_dir=directory, show_progress=False)
    manifest = json.loads((directory / MANIFEST_NAME).read_text())
    (directory / MANIFEST_NAME).write_text(json.dumps({**manifest, "engine_version": "searchenv-native-1"}))
    with pytest.raises(IndexMismatchError, match="engine_version 'searchenv-native-1'"):
        BM25Retriever(TINY, engine="native", index_dir=directory, show_progress=False)


# ------------------------------------------------------------------------------------------ analysis parity
_FRAGMENTS = (
    "The Beatles' O'Neil's don't U.S.A. e-mail wi-fi foo@bar.com http://x.org/a?b=c 3.14 1,000.5 10:30 2019–2020 "
    "C# C++ $5 ½ ² x_y _under_ naïve café Ǆemal İstanbul ΟΔΟΣ ﬁnance Ⅻ ① ⓐ ÄÖÜ straße Москва Ελλάδα עִבְרִית שלום "
    "العربية हिन्दी தமிழ் ภาษาไทย ພາສາລາວ မြန်မာ ខ្មែរ 東京 日本語の テキスト カタカナ ひらがな 한국어 中华人民共和国 "
    "♭ ♮ ♯ ★ ☆ © ® ™ € → ∞ ∑ ✓ ✔ ❤️ 😀 👍🏽 👨\u200d👩\u200d👧 🇫🇷 #️⃣ 1️⃣ ‼ ⁉ ⌚ ♀ ♂ ☺ — … «quote» “smart” ‘single’ "
    "(paren) [bracket] a.b.c x:y 3,4;5 12'34 éé'éé tab\tsep line\nbreak ゃ ー ・ 〆 〇 々 Ⅷ ǅ ℹ Ⓜ 🅰 🏻 🧑🏿\u200d🚀 ↔ "
    "⌘ ☀ running generalization archaeology possibly is the and Cats analysing"
).split(" ")


def _mixed_script_strings(count: int, seed: int) -> list[str]:
    """Random concatenations of the fragments above, glued by spaces, nothing, or word-break punctuation."""
    rng = random.Random(seed)
    strings = []
    for _ in range(count):
        parts = rng.choices(_FRAGMENTS, k=rng.randint(1, 8))
        glue = rng.choices([" ", " ", " ", "", ", ", "-", "/", "."], k=len(parts))
        strings.append("".join(p + g for p, g in zip(parts, glue, strict=True)).strip())
    return strings


def test_analyzer_matches_real_lucene_on_mixed_scripts_symbols_and_emoji():
    """Exactly Lucene's terms for every fragment alone and for 400 random mixed-script strings."""
    from searchenv.retrievers.bm25.lucene import lucene_analyze

    texts = _FRAGMENTS + _mixed_script_strings(400, seed=0) + ["ÄÖÜ 東京 ♭ ♮"]
    ours = EnglishAnalyzer().analyze_many(texts)
    theirs = lucene_analyze(texts)
    wrong = [(t, a, b) for t, a, b in zip(texts, ours, theirs, strict=True) if a != b]
    assert not wrong, f"{len(wrong)} of {len(texts)} differ, e.g. {wrong[:3]}"
    assert theirs[-1] == ["äöü", "東", "京", "♭", "♮"]


def test_symbols_lucene_keeps_are_found_natively():
    corpus = Corpus.from_passages([Passage("a", "Music", "B♭ and C♮ notes"), Passage("b", "Tokyo", "東京 ÄÖÜ")])
    native = BM25Retriever(corpus, engine="native", show_progress=False)
    assert {p.id for p in native.search(["ÄÖÜ 東京 ♭ ♮"], k=3)[0]} == {"a", "b"}


def test_jsonl_stream_gives_the_corpus_search_texts(tmp_path, shared_data):
    from searchenv.retrievers.bm25.native.builder import jsonl_search_texts

    path = shared_data / "corpus" / "union.jsonl"
    corpus = Corpus.from_jsonl(path)
    first = list(itertools.islice(jsonl_search_texts(path), 500))
    assert first == [corpus.search_text(i) for i in range(500)]


# ------------------------------------------------------------------------- the build's compiled analysis path
_PLAIN_FRAGMENTS = (
    "Zoë’s café naïve Ærø O’Brien’s l·l Ελλάδα ΣΟΦΟΣ İzmir Straße Москва’s 12’34 über_alles ÉCOLE 3’4 a’b "
    "_é_ é__ x’ ’y ·z Łódź Þór ð ß ﬁ ª º µ"
).split(" ")


def _reference_postings(texts: list[str]) -> tuple[list[str], list[list[tuple[str, int]]]]:
    """The segment postings, straight from ``EnglishAnalyzer.analyze``: terms in order of first appearance, and
    each passage's (term, tf) pairs."""
    analyzer = EnglishAnalyzer()
    vocabulary: dict[str, None] = {}
    per_passage = []
    for text in texts:
        terms = analyzer.analyze(text)
        vocabulary.update(dict.fromkeys(terms))
        per_passage.append(sorted({t: terms.count(t) for t in terms}.items()))
    return list(vocabulary), per_passage


def _segment_result(analysed, worker_terms: dict[str, list[str]]) -> tuple[list[str], list[list[tuple[str, int]]]]:
    """A :class:`SegmentPostings` as (its terms in order, each passage's sorted (term, tf) pairs)."""
    names = worker_terms.setdefault(analysed.analyser, [])
    assert len(names) == analysed.first_new
    names.extend(analysed.new_terms)
    vocabulary = [names[t] for t in analysed.terms.tolist()]
    pairs: list[list[tuple[str, int]]] = [[] for _ in analysed.lengths]
    for i, term in enumerate(vocabulary):
        lo, hi = analysed.starts[i], analysed.starts[i + 1]
        assert np.all(np.diff(analysed.docs[lo:hi]) > 0)  # passages ascending within a term
        for doc, tf in zip(analysed.docs[lo:hi].tolist(), analysed.tfs[lo:hi].tolist(), strict=True):
            pairs[doc].append((term, tf))
    return vocabulary, [sorted(p) for p in pairs]


def test_compiled_segment_analysis_gives_exactly_the_analyzer_terms(monkeypatch):
    """ASCII passages (compiled scan), plain non-ASCII ones (compiled, by code point) and the rest (the analyzer's
    full Unicode rules), interleaved and over several chunks: the same terms, tfs, lengths and term numbering —
    also from a worker that forgets its tables between segments."""
    from searchenv.retrievers.bm25.native import segments as segment_postings
    from searchenv.retrievers.bm25.native.segments import SegmentAnalyser

    rng = random.Random(1)
    ascii_texts = ["".join(rng.choice("aB_z09.:',;- \n\t\"Zy1") for _ in range(rng.randint(0, 80))) for _ in range(300)]
    plain = [" ".join(rng.choices(_PLAIN_FRAGMENTS + ["the", "Running", "cats'", "U.S.A."], k=6)) for _ in range(300)]
    texts = ascii_texts + plain + _mixed_script_strings(300, seed=2) + [w for f in _FRAGMENTS for w in (f, f.upper())]
    texts += ["x" * 300 + " supercalifragilistic " * 3, "", "   ", "a" * 9 + " " + "a" * 8]
    rng.shuffle(texts)
    monkeypatch.setattr(segment_postings, "_CHUNK", 97)
    analyser, forgetful = SegmentAnalyser(), SegmentAnalyser(max_tokens=50)
    names: dict[str, list[str]] = {}
    for segment in (texts[:700], texts[700:]):  # the second segment reuses the worker's tables (or starts afresh)
        analysed = analyser.analyse(segment)
        vocabulary, pairs = _segment_result(analysed, names)
        expected_vocabulary, expected = _reference_postings(segment)
        assert vocabulary == expected_vocabulary and pairs == expected
        assert analysed.lengths.tolist() == [sum(f for _, f in p) for p in expected]
        assert _segment_result(forgetful.analyse(segment), names) == (vocabulary, pairs)
    assert len(analyser._ascii) and len(analyser._unicode) and analyser._other_terms  # all three paths ran


def test_token_table_grows_and_keeps_every_token_apart():
    """From a table of 4 slots: the ASCII scan gives the analyzer's raw tokens, each distinct token one id."""
    from searchenv.retrievers.bm25.analyzer import _ASCII_TOKEN
    from searchenv.retrievers.bm25.native.token_table import TokenTable

    rng = random.Random(3)
    texts = ["".join(rng.choice("aB_z09.:',;- Zy1") for _ in range(rng.randint(0, 60))) for _ in range(3000)]
    texts += ["abcdefgh abcdefghi " * 5, "x" * 1000]
    table = TokenTable(capacity=4)
    seen: dict[str, int] = {}
    for lo in range(0, len(texts), 500):
        ids, counts = table.scan(texts[lo : lo + 500])
        words = table.tokens(0, len(table))
        expected = [_ASCII_TOKEN.findall(t.lower()) for t in texts[lo : lo + 500]]
        assert [words[i] for i in ids.tolist()] == [w for tokens in expected for w in tokens]
        assert counts.tolist() == [len(tokens) for tokens in expected]
        for i in ids.tolist():
            assert seen.setdefault(words[i], i) == i
    assert len(set(words)) == len(words)


def test_disk_corpus_build_reads_the_search_texts(tmp_path, monkeypatch):
    """A build over a DiskCorpus (its segments read straight from the file, blank lines and both row layouts
    included) writes the same index as one over the corpus's search texts."""
    from searchenv.corpus import DiskCorpus

    monkeypatch.setenv("SEARCHENV_CACHE_DIR", str(tmp_path / "cache"))
    rows = [{"id": str(i), "contents": f'"Title {i}"\nSome text number {i}, naïve café 東京.'} for i in range(250)]
    rows[7] = {"id": "7", "title": "Own layout", "text": "title and text fields ✓"}
    lines = [json.dumps(row, ensure_ascii=i % 2 == 0) for i, row in enumerate(rows)]
    lines.insert(100, "   ")
    (tmp_path / "corpus.jsonl").write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    corpus = DiskCorpus(tmp_path / "corpus.jsonl")
    from_disk, from_texts = tmp_path / "disk", tmp_path / "texts"
    build_native_index(corpus, from_disk, 0.9, 0.4, segment_docs=64, show_progress=False)
    texts = [corpus.search_text(i) for i in range(len(corpus))]
    build_native_index(texts, from_texts, 0.9, 0.4, segment_docs=64, show_progress=False)
    names = sorted(p.name for p in from_disk.iterdir())
    assert all((from_disk / n).read_bytes() == (from_texts / n).read_bytes() for n in names) and len(names) > 5


@pytest.mark.parametrize("bits", [0, 1, 3, 7, 8, 9, 16, 17, 25, 31, 32])
def test_postings_unpack_reads_every_width_mid_file_and_at_the_very_end(bits):
    """Values packed at every width come back, whether the fast reader may look past the run (mid-file) or the
    run ends the data (the byte-by-byte path)."""
    from searchenv.retrievers.bm25.native.postings import _pack, _unpack

    rng = np.random.default_rng(bits)
    values = rng.integers(0, 2**bits, size=128, dtype=np.int64) if bits else np.zeros(128, np.int64)
    packed = np.zeros(128 * 4 + 8, np.uint8)
    end = _pack(values, 128, bits, packed, 3)
    for data in (packed, packed[:end]):  # room after the run / the run ends the data
        out = np.full(128, -1, np.int64)
        assert _unpack(data, 3, 128, bits, out) == end
        np.testing.assert_array_equal(out, values)


def test_per_query_agreement_fails_a_query_on_one_wrong_passage_but_lets_ties_swap():
    from searchenv.retrievers.bm25.retriever import per_query_agreement

    lucene_ids = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
    lucene_scores = [[3.0, 2.0, 1.0, 0.5], [3.0, 2.0, 2.0, 1.0], [3.0, 2.0, 1.0, 0.5]]
    mine = [[1, 2, 3], [5, 7, 6], [9, 10, 12]]  # identical; a tie swapped; a wrong third passage
    exact, tolerant = per_query_agreement(mine, lucene_ids, lucene_scores)
    assert (exact, tolerant) == (pytest.approx(1 / 3), pytest.approx(2 / 3))
    # The slot-level figure of the same hits hides the wrong query (8 of 9 slots).
    assert tie_tolerant_agreement(mine, lucene_ids, lucene_scores) == pytest.approx(8 / 9)
    assert per_query_agreement([[1, 2]], [[1, 2, 3]], [[3.0, 2.0, 1.0]]) == (0.0, 0.0)  # a missing passage


_FIRST_RUN = textwrap.dedent(
    """
    import sys
    from searchenv import Corpus
    from searchenv.retrievers import make_retriever
    n = range(300)
    corpus = Corpus([str(i) for i in n], [f"T{i}" for i in n], [f"word{i % 7} common text {i}" for i in n])
    print(make_retriever("bm25", corpus, index_dir=sys.argv[1]).search(["word3 common"], 3)[0][0].id)
    """
)


def test_the_first_run_says_once_that_the_kernels_compile_and_later_runs_say_nothing(tmp_path: Path) -> None:
    """The first run after installing compiles the numba kernels (tens of seconds at scale) in silence: it now
    prints one line on stderr while it does; a run that finds numba's cache prints nothing."""
    from searchenv.retrievers.bm25.native.compile_notice import NOTICE

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}  # an empty cache: a fresh install
    env.pop("SEARCHENV_KERNELS_ANNOUNCED", None)
    runs = [
        subprocess.run(
            [sys.executable, "-c", _FIRST_RUN, str(tmp_path / f"index{i}")],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        for i in range(2)
    ]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr
    assert runs[0].stderr.count(NOTICE) == 1 and runs[0].stdout.strip() == runs[1].stdout.strip()
    assert NOTICE not in runs[1].stderr
