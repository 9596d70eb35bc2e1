"""The engine catalogue: every engine is one record, and the record holds against the engine it describes."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
from toyworld import CORPUS

from searchenv.components import check_components, clear_cache
from searchenv.imports import check_reference, load_attr
from searchenv.retrievers import (
    CORPUS_FREE,
    RETRIEVER_OPTIONS,
    RETRIEVERS,
    WRAPPERS,
    check_retriever_options,
    make_retriever,
)
from searchenv.retrievers.catalogue import ENGINES, REMOTE_CAPABILITIES, REMOTE_OPTIONS
from searchenv.types import Closeable, capabilities_of

# The least each engine needs to be checked and built without a network, a model or an encoder, with what turns
# its flag capabilities on (a web engine asks for the questions when a summariser writes notes).
_NOTES = {"summariser": {"url": "http://127.0.0.1:9/v1", "model": "m"}}
MINIMAL: dict[str, dict[str, Any]] = {
    **{name: {"api_key": "k", **_NOTES} for name in ("web", "brave", "serper")},
    "searxng": {"url": "http://127.0.0.1:9", **_NOTES},
    **{name: {"base": "random", "p": 0.5} for name in WRAPPERS},
    "simulated": {"url": "http://127.0.0.1:9", "model": "m"},
}


def _dense_object(name: str) -> Any:
    """The object every dense factory returns, over a real faiss index of the toy corpus's size (no encoder)."""
    import faiss

    from searchenv.retrievers.dense.retriever import DenseRetriever

    index = faiss.IndexFlatIP(8)
    index.add(np.eye(len(CORPUS), 8, dtype=np.float32))
    return DenseRetriever(CORPUS, index, kind=name.removeprefix("e5-"), encoder=None)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(ENGINES))
def test_every_engine_is_one_record_that_holds(name: str) -> None:
    record = ENGINES[name]
    assert record.name == name and record.help and all(option.help for option in record.options.values())
    check_reference(record.factory, "retriever factory")  # importable, without building anything
    assert RETRIEVERS[name] == record.factory and set(RETRIEVER_OPTIONS[name]) == set(record.options)
    assert (name in CORPUS_FREE) == (not record.needs_corpus and not record.wraps)
    check_retriever_options(name, MINIMAL.get(name, {}))
    if record.dense:
        built = _dense_object(name)
    else:
        built = make_retriever(name, CORPUS if record.needs_corpus or record.wraps else None, **MINIMAL.get(name, {}))
    try:
        assert capabilities_of(built) == set(record.capabilities), f"{name}: its record says other capabilities"
    finally:
        if isinstance(built, Closeable):
            built.close()


@pytest.mark.parametrize("name", list(ENGINES))
def test_the_factory_takes_every_option_of_the_record(name: str) -> None:
    """Every option the record lists reaches a keyword of the factory (a ``**options`` factory passes them on to
    keywords of what it builds, which its own tests cover)."""
    record = ENGINES[name]
    factory = load_attr(record.factory, "factory")
    parameters = inspect.signature(factory.__init__ if inspect.isclass(factory) else factory).parameters
    own = set(record.options) - ({"base_options"} if record.wraps else set())  # make_retriever builds the base
    if not any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
        assert own <= set(parameters) - {"self", "corpus"}


def test_the_remote_client_record_holds() -> None:
    from searchenv.retrievers.remote.retriever import RemoteRetriever

    client = RemoteRetriever("http://127.0.0.1:9", check_on_start=True)
    try:
        assert capabilities_of(client) == set(REMOTE_CAPABILITIES)
        named = set(inspect.signature(RemoteRetriever.__init__).parameters) - {"self", "url"}
        assert named == set(REMOTE_OPTIONS)
    finally:
        client.close()


@pytest.mark.parametrize("name", [name for name, record in ENGINES.items() if record.dense])
def test_every_dense_engine_refuses_a_missing_encoder_folder_before_anything_loads(name: str) -> None:
    """e5-ivfpq missed this rule when "the dense engines" were a tuple of two names in the composition root."""
    clear_cache()
    with pytest.raises(FileNotFoundError, match="encoder folder './no/such/folder' not found"):
        check_components(retriever=name, retriever_options={"encoder": "./no/such/folder"})
    with pytest.raises(FileNotFoundError, match="prebuilt faiss"):
        check_components(retriever=name, retriever_options={"encoder": "minilm", "index_path": "/no/e5.index"})


def test_value_checks_run_before_anything_loads() -> None:
    with pytest.raises(ValueError, match="retriever 'e5-hnsw': option 'ef_search' must be a positive integer, got 0"):
        check_retriever_options("e5-hnsw", {"ef_search": 0})
    with pytest.raises(ValueError, match=r"option 'b' must be in \[0, 1\]"):
        check_retriever_options("bm25", {"b": 1.5})
    with pytest.raises(ValueError, match="unknown BM25 engine 'lucine' \\(did you mean 'lucene'\\?\\)"):
        check_retriever_options("bm25", {"engine": "lucine"})


def test_docs_list_every_engine_from_the_catalogue() -> None:
    from pathlib import Path

    from searchenv.retrievers.catalogue import engines_markdown

    text = (Path(__file__).resolve().parents[1] / "docs" / "retrievers.md").read_text(encoding="utf-8")
    documented = text.split("<!-- engines:start -->\n", 1)[1].split("<!-- engines:end -->", 1)[0]
    assert documented == engines_markdown(), (
        "docs/retrievers.md is out of date: paste the output of `python -c 'from searchenv.retrievers.catalogue "
        "import engines_markdown; print(engines_markdown())'` between its markers"
    )
