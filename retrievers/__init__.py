"""Search backends behind one contract: ``search(queries, k) -> list[list[Passage]]``.

:func:`make_retriever` turns a name (``"random"``, ``"bm25"``, ``"e5-exact"``, ``"e5-hnsw"``, ``"e5-ivfpq"``,
the web's ``"brave"`` (also ``"web"``), ``"searxng"``, ``"serper"``), a ``"package.module:factory"`` reference or
a URL of a running retrieval service into a retriever over a corpus. The degraded engines ``"noisy"``,
``"empty"``, ``"shuffled"`` and ``"distractor"`` wrap another (``base``, with its own ``base_options``): see
:mod:`searchenv.retrievers.degraded`. ``"simulated"`` has a model write the results
(:mod:`searchenv.retrievers.simulated`). Engines are imported only when asked for, so ``import searchenv`` never
pulls in torch, faiss or a JVM.

:data:`RETRIEVER_OPTIONS` lists the options every engine accepts, so that :func:`check_retriever_options`
can refuse a misspelt or mistyped option before any index is built (the CLI and
:mod:`searchenv.components` call it first). Most code should build retrievers through
:func:`searchenv.components.build_retriever`, which also shares one instance per distinct argument set.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from searchenv.checks import matches_type
from searchenv.corpus import Corpus
from searchenv.imports import check_reference, is_reference, load_attr
from searchenv.retrievers.degraded.options import WRAPPERS, check_wrapper_options
from searchenv.retrievers.simulated.options import SIMULATED_OPTIONS, check_simulated_options
from searchenv.types import Retriever

__all__ = [
    "CORPUS_FREE",
    "REMOTE_OPTIONS",
    "RETRIEVERS",
    "RETRIEVER_OPTIONS",
    "WRAPPERS",
    "accepted_options",
    "check_retriever_options",
    "make_retriever",
]

#: name → "module:factory"; a factory is called as ``factory(corpus, **options)``.
RETRIEVERS: dict[str, str] = {
    "random": "searchenv.retrievers.random_retriever:RandomRetriever",
    "bm25": "searchenv.retrievers.bm25.retriever:BM25Retriever",
    "e5-exact": "searchenv.retrievers.dense.retriever:exact_retriever",
    "e5-hnsw": "searchenv.retrievers.dense.retriever:hnsw_retriever",
    "e5-ivfpq": "searchenv.retrievers.dense.retriever:ivfpq_retriever",
    "web": "searchenv.retrievers.web.brave:BraveSearchRetriever",
    "brave": "searchenv.retrievers.web.brave:BraveSearchRetriever",
    "searxng": "searchenv.retrievers.web.searxng:SearxngRetriever",
    "serper": "searchenv.retrievers.web.serper:SerperRetriever",
    "noisy": "searchenv.retrievers.degraded.wrappers:noisy_retriever",
    "empty": "searchenv.retrievers.degraded.wrappers:empty_retriever",
    "shuffled": "searchenv.retrievers.degraded.wrappers:shuffled_retriever",
    "distractor": "searchenv.retrievers.degraded.wrappers:distractor_retriever",
    "simulated": "searchenv.retrievers.simulated.engine:simulated_retriever",
}

#: Registered retrievers that search no corpus of ours (``corpus`` may be ``None`` for them).
CORPUS_FREE: frozenset[str] = frozenset({"web", "brave", "searxng", "serper", "simulated"})

# Wrappers that read no corpus themselves (their base may): every degraded engine but ``noisy``.
_CORPUS_FREE_WRAPPERS: frozenset[str] = frozenset(WRAPPERS) - {"noisy"}

# Option types: ``int``/``float``/``bool``/``str`` are checked (``None`` always means "the engine's default");
# ``object`` accepts anything (e.g. an Encoder instance for ``encoder``). ``str`` also accepts paths.
_DENSE_OPTIONS: dict[str, type] = {
    "encoder": object,
    "index_dir": str,
    "index_path": str,
    "cache_dir": str,
    "cache": bool,
    "mmap": bool,
    "use_gpu": bool,
    "search_engine": str,
    "search_device": str,
    "shard_size": int,
    "progress": bool,
    "family": str,
    "max_length": int,
    "batch_size": int,
    "device": str,
    "fp16": bool,
    "variant": str,
    "num_threads": int,
}

# The web search backends' options (searchenv.retrievers.web.search.WebSearchRetriever); ``endpoint`` is Brave's
# older spelling of ``url``; ``pages`` and ``summariser`` hold the page reader's and note-taker's options.
_WEB_OPTIONS: dict[str, type] = {
    "url": str,
    "endpoint": str,
    "api_key": str,
    "api_key_env": str,
    "timeout": float,
    "retry_window": float,
    "retries": int,
    "backoff": float,
    "max_backoff": float,
    "concurrency": int,
    "min_interval": float,
    "params": object,
    "seed": int,
    "cache": str,
    "cache_mode": str,
    "pages": object,
    "summariser": object,
    "price_per_1k": float,
}

#: engine name → the keyword options its factory accepts and their types (see each factory's docstring).
RETRIEVER_OPTIONS: dict[str, dict[str, type]] = {
    "random": {"seed": int},
    "bm25": {
        "engine": str,
        "index_dir": str,
        "k1": float,
        "b": float,
        "show_progress": bool,
        "threads": int,
        "rebuild": bool,
        "segment_docs": int,
    },
    "e5-exact": dict(_DENSE_OPTIONS),
    "e5-hnsw": {**_DENSE_OPTIONS, "m": int, "ef_construction": int, "ef_search": int},
    "e5-ivfpq": {
        **_DENSE_OPTIONS,
        "nlist": int,
        "pq_m": int,
        "nprobe": int,
        "candidates": int,
        "train_size": int,
        "seed": int,
    },
    "web": dict(_WEB_OPTIONS),  # Brave's first name
    "brave": dict(_WEB_OPTIONS),
    "searxng": {
        name: kind for name, kind in _WEB_OPTIONS.items() if name not in ("api_key", "api_key_env", "endpoint")
    },
    "serper": {name: kind for name, kind in _WEB_OPTIONS.items() if name != "endpoint"},
    # The degraded wrappers: ``base`` is an engine name or object, ``base_options`` its options, ``p`` a
    # probability or a schedule (checked by searchenv.retrievers.degraded.options).
    **{
        name: {"base": object, "base_options": object, **dict.fromkeys(own, object), "seed": int}
        for name, own in WRAPPERS.items()
    },
    # A model writes the results (checked by searchenv.retrievers.simulated.options).
    "simulated": SIMULATED_OPTIONS,
}

#: Options of the HTTP client (:class:`~searchenv.retrievers.http.remote.RemoteRetriever`) used for ``http(s)://`` URLs.
REMOTE_OPTIONS: dict[str, type] = {
    "timeout": float,
    "retry_window": float,
    "retries": int,
    "backoff": float,
    "max_backoff": float,
    "on_error": str,
    "topk_field": str,
    "token": str,
    "pool_size": int,
    "seed": int,
    "check_on_start": bool,
}


def _is_url(spec: str) -> bool:
    return spec.startswith(("http://", "https://"))


def accepted_options(spec: str) -> frozenset[str] | None:
    """The option names ``spec`` takes; ``None`` for a ``"module:factory"`` reference, whose options are its own.

    Lets a command that builds several engines from one set of options give each only the options it takes
    (``encoder`` to the dense engines, ``k1`` to BM25). An unknown name takes nothing.
    """
    if is_reference(spec):
        return None
    if _is_url(spec):
        return frozenset(REMOTE_OPTIONS)
    return frozenset(RETRIEVER_OPTIONS.get(spec, ()))


def check_retriever_options(spec: str, options: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` for an unknown engine, an option it does not take, or a value of the wrong type.

    Nothing is imported or loaded except, for ``bm25``'s ``engine`` option, the list of BM25 engines.
    A ``"module:factory"`` reference is only checked to be importable; its options are the factory's business.
    """
    if is_reference(spec):
        check_reference(spec, "retriever factory")
        return
    if _is_url(spec):
        accepted, what = REMOTE_OPTIONS, "the HTTP retriever client"
    elif spec in RETRIEVER_OPTIONS:
        accepted, what = RETRIEVER_OPTIONS[spec], f"retriever {spec!r}"
    else:
        close = difflib.get_close_matches(spec, RETRIEVERS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"unknown retriever {spec!r}{hint}; choose one of {sorted(RETRIEVERS)}, an http(s):// URL of a "
            "retrieval server, a 'package.module:factory' reference, or an object with search(queries, k)"
        )
    for key, value in options.items():
        if key not in accepted:
            close = difflib.get_close_matches(str(key), accepted, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{what} has no option {key!r}{hint}; its options are {sorted(accepted)}")
        if not matches_type(value, accepted[key]):
            raise ValueError(f"{what}: option {key!r} must be {accepted[key].__name__}, got {value!r}")
    if spec == "bm25" and options.get("engine") is not None:
        from searchenv.retrievers.bm25.retriever import ENGINES

        if options["engine"] not in ENGINES:
            raise ValueError(f"unknown BM25 engine {options['engine']!r}; choose one of {', '.join(ENGINES)}")
    if spec in WRAPPERS:
        _check_wrapper(spec, options)
    if spec == "simulated":
        check_simulated_options(options)


def _check_wrapper(spec: str, options: Mapping[str, Any]) -> None:
    """A degraded engine's own options, then its base engine with the base's options."""
    check_wrapper_options(spec, options)
    base, base_options = options.get("base"), options.get("base_options")
    usage = (
        f"retriever {spec!r} wraps another engine: give retriever_options={{'base': 'bm25', 'base_options': {{...}}}}"
    )
    if base is None:
        raise ValueError(f"{usage}; 'base' is missing")
    if base_options is not None and not isinstance(base_options, Mapping):
        raise ValueError(f"{usage}; 'base_options' must be a mapping, got {base_options!r}")
    if isinstance(base, str):
        if base in WRAPPERS:
            raise ValueError(f"{usage}; the base must be an engine, not another degraded wrapper ({base!r})")
        check_retriever_options(base, base_options or {})
    elif not isinstance(base, Retriever):
        raise ValueError(f"{usage}; 'base' must be an engine name or an object with search(queries, k), got {base!r}")
    elif base_options:
        raise ValueError(f"{usage}; 'base_options' apply to a base given by name, not to a ready engine object")


def make_retriever(spec: str | Retriever, corpus: Corpus | None = None, **options: Any) -> Retriever:
    """Build a retriever from a name, a factory reference, a service URL, or pass a ready retriever object through.

    Args:
        spec: a name from :data:`RETRIEVERS`, ``"package.module:factory"`` (a callable taking
            ``(corpus, **options)``, so custom engines need no registration), an ``http(s)://`` URL of a
            ``/retrieve`` service, or any object with a ``search(queries, k)`` method.
        corpus: the passages to search (not needed for a URL or a ready object).
        **options: engine options, see :data:`RETRIEVER_OPTIONS` (``seed`` for ``random``,
            ``engine``/``index_dir`` for ``bm25``, ``encoder``/``index_dir``/``index_path`` for the dense engines).
    """
    if not isinstance(spec, str):
        if isinstance(spec, Retriever):
            return spec
        raise TypeError(f"retriever must be a name, a URL or an object with search(queries, k); got {type(spec)!r}")
    check_retriever_options(spec, options)
    if spec in WRAPPERS:
        base_options = options.pop("base_options", None) or {}
        if isinstance(options["base"], str):
            options["base"] = make_retriever(options["base"], corpus, **base_options)
    if _is_url(spec):
        from searchenv.retrievers.http.remote import RemoteRetriever

        return RemoteRetriever(spec, **options)
    if corpus is None and spec not in CORPUS_FREE and spec not in _CORPUS_FREE_WRAPPERS:
        raise ValueError(f"retriever {spec!r} needs a corpus to search")
    factory = load_attr(spec if is_reference(spec) else RETRIEVERS[spec], "retriever factory")
    try:
        return factory(corpus, **options)
    except TypeError as exc:
        raise TypeError(f"retriever {spec!r} rejected its options {sorted(options)}: {exc}") from exc
