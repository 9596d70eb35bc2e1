"""The one-file half of the atomic-write rule: a reader sees the old file or the new one, never a partial one."""

from __future__ import annotations

import json

import pytest

from searchenv.retrievers.index_store import replacing, write_json_atomic


def test_replacing_swaps_in_the_new_file_only_when_the_write_succeeds(tmp_path):
    path = tmp_path / "record.json"
    write_json_atomic(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    with pytest.raises(RuntimeError), replacing(path) as tmp:
        tmp.write_text("half a rec")
        raise RuntimeError("killed mid-write")
    assert json.loads(path.read_text()) == {"a": 1}  # the old file, untouched
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]  # and no temporary file left behind
    write_json_atomic(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}


def test_dense_indexes_keep_the_one_manifest_and_still_read_the_older_record(tmp_path):
    """BM25 and dense indexes are checked by one comparison (compare_manifests); a dense record written before is
    read as a manifest, so an hours-long graph build is reused, not refused."""
    import numpy as np

    from searchenv.corpus import Corpus
    from searchenv.retrievers.dense import retriever as dense
    from searchenv.retrievers.index_store import IndexManifest, IndexMismatchError

    corpus = Corpus([str(i) for i in range(40)], ["t"] * 40, [f"text {i}" for i in range(40)])
    vectors = np.random.default_rng(0).standard_normal((40, 8)).astype(np.float32)
    params = {"m": 8, "ef_construction": 16}
    record = dense._record("hnsw", params, corpus, {"name": "enc"}, 8)
    built = dense._index_from_blocks("hnsw", params, [vectors], 40, 8, tmp_path, record, False)
    stored = IndexManifest.read_file(tmp_path / "hnsw-m8-efc16.json")
    assert stored.engine == "faiss-hnsw" and stored.params["dim"] == 8 and stored.built_at
    assert dense._load_built(tmp_path, "hnsw-m8-efc16", record).ntotal == built.ntotal == 40
    with pytest.raises(IndexMismatchError, match="encoder: stored {'name': 'enc'}, requested {'name': 'other'}"):
        dense._load_built(tmp_path, "hnsw-m8-efc16", dense._record("hnsw", params, corpus, {"name": "other"}, 8))
    other = Corpus(corpus.ids[:39], corpus.titles[:39], corpus.texts[:39])
    with pytest.raises(IndexMismatchError, match="different corpus"):
        dense._load_built(tmp_path, "hnsw-m8-efc16", dense._record("hnsw", params, other, {"name": "enc"}, 8))
    older = {  # the layout written before the one manifest
        "index_type": "hnsw",
        "params": params,
        "metric": "inner_product",
        "encoder": {"name": "enc"},
        "dim": 8,
        "corpus_checksum": corpus.checksum,
        "corpus_size": 40,
    }
    (tmp_path / "hnsw-m8-efc16.json").write_text(json.dumps(older))
    assert dense._load_built(tmp_path, "hnsw-m8-efc16", record).ntotal == 40
