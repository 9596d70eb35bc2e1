"""Run Search-R1's own retrieval server (BM25 mode) the way its users do, for same-run comparisons.

Search-R1's code is not part of searchenv: fetch the repository (github.com/PeterGriffinJin/Search-R1) and pass
the path of its ``search_r1/search/retrieval_server.py``. Two steps, as its README describes them:

    # 1. its index builder's BM25 step: Anserini IndexCollection over the corpus jsonl, 1 thread, no stored docs
    #    (--store-raw: documents stored in the index, as in pyserini's prebuilt indexes)
    python bench/search_r1_peer.py index --corpus union.jsonl --index /tmp/sr1-bm25
    # 2. its server: `retrieval_server.py --retriever_name bm25 --index_path ... --corpus_path ... --topk 3`
    python bench/search_r1_peer.py serve --server PATH/retrieval_server.py --corpus union.jsonl \
        --index /tmp/sr1-bm25 --port 8001

Only two things differ from running ``python retrieval_server.py`` directly, neither on the request path: the
JVM is started by searchenv's :func:`~searchenv.retrievers.bm25.lucene.start_jvm` (pyserini's own JVM options ask
for a module the bundled Java 21 runtime lacks), and uvicorn binds the given loopback port instead of its
hard-coded ``0.0.0.0:8000``. Its ``Config``, ``get_retriever`` and FastAPI ``app`` are used as they are.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType


def build_index(corpus: Path, index: Path, store_raw: bool = False) -> None:
    """Search-R1's ``index_builder.py --retrieval_method bm25``: the corpus file as a JsonCollection, 1 thread.

    ``store_raw`` adds Anserini's ``-storeRaw`` (as prebuilt pyserini indexes have): the server then reads each
    hit's document from the index instead of from the corpus loaded with ``datasets``.
    """
    from searchenv.retrievers.bm25.lucene import start_jvm

    jnius = start_jvm()
    with tempfile.TemporaryDirectory(prefix="sr1-collection-") as collection:
        shutil.copyfile(corpus, Path(collection) / "temp.jsonl")
        args = jnius.autoclass("io.anserini.index.IndexCollection$Args")()
        args.input, args.index = collection, str(index)
        args.collectionClass, args.generatorClass = "JsonCollection", "DefaultLuceneDocumentGenerator"
        args.threads, args.quiet, args.storeRaw = 1, True, store_raw
        jnius.autoclass("io.anserini.index.IndexCollection")(args).run()


def import_file(path: Path, name: str) -> ModuleType:
    """Import one of Search-R1's source files by path: its repository is not an installable package."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def serve(server: Path, corpus: Path, index: Path, port: int, topk: int) -> None:
    """Import Search-R1's server module and run its app exactly as its ``__main__`` block does (BM25 config)."""
    import uvicorn

    from searchenv.retrievers.bm25.lucene import start_jvm

    start_jvm()
    os.environ.setdefault("OPENAI_API_KEY", "unused")  # pyserini.encode builds an OpenAI client at import time
    module = import_file(server, "search_r1_retrieval_server")
    module.config = module.Config(
        retrieval_method="bm25",
        index_path=str(index),
        corpus_path=str(corpus),
        retrieval_topk=topk,
        faiss_gpu=False,
        retrieval_model_path="unused-for-bm25",
        retrieval_pooling_method="mean",
        retrieval_query_max_length=256,
        retrieval_use_fp16=True,
        retrieval_batch_size=512,
    )
    module.retriever = module.get_retriever(module.config)
    uvicorn.run(module.app, host="127.0.0.1", port=port, log_level="warning")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    index = sub.add_parser("index")
    index.add_argument("--corpus", type=Path, required=True)
    index.add_argument("--index", type=Path, required=True)
    index.add_argument("--store-raw", action="store_true", help="store raw documents in the index (-storeRaw)")
    run = sub.add_parser("serve")
    run.add_argument("--server", type=Path, required=True, help="Search-R1's search_r1/search/retrieval_server.py")
    run.add_argument("--corpus", type=Path, required=True)
    run.add_argument("--index", type=Path, required=True)
    run.add_argument("--port", type=int, required=True)
    run.add_argument("--topk", type=int, default=3)
    args = parser.parse_args()
    if args.command == "index":
        build_index(args.corpus, args.index, args.store_raw)
    else:
        serve(args.server, args.corpus, args.index, args.port, args.topk)


if __name__ == "__main__":
    sys.exit(main())
