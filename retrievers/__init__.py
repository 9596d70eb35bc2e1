"""Search backends behind one contract: ``search(queries, k) -> list[list[Passage]]``.

:func:`make_retriever` turns a name (``"random"``, ``"bm25"``, ``"e5-exact"``, ``"e5-hnsw"``, ``"e5-ivfpq"``,
the web's ``"brave"`` (also ``"web"``), ``"searxng"``, ``"serper"``), a ``"package.module:factory"`` reference or
a URL of a running retrieval service into a retriever over a corpus. The degraded engines ``"noisy"``,
``"empty"``, ``"shuffled"`` and ``"distractor"`` wrap another (``base``, with its own ``base_options``): see
:mod:`searchenv.retrievers.degraded`. ``"simulated"`` has a model write the results
(:mod:`searchenv.retrievers.simulated`). Engines are imported only when asked for, so ``import searchenv`` never
pulls in torch, faiss or a JVM.

Every fact about an engine — its factory, its options with their checks, whether it reads a corpus, is dense or
wraps another engine — is one record of the catalogue (:mod:`searchenv.retrievers.catalogue`); the tables here
are read from it. :func:`check_retriever_options` refuses a misspelt, mistyped or out-of-range option before any
index is built (the CLI and :mod:`searchenv.components` call it first). Most code should build retrievers through
:func:`searchenv.components.build_retriever`, which also shares one instance per distinct argument set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from searchenv.checks import did_you_mean, matches_type
from searchenv.corpus import Corpus
from searchenv.imports import check_reference, is_reference, load_attr
from searchenv.retrievers.catalogue import ENGINES, engine
from searchenv.retrievers.catalogue import REMOTE_OPTIONS as REMOTE_CLIENT_OPTIONS
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
    "route_options",
]

#: name → "module:factory"; a factory is called as ``factory(corpus, **options)`` (read from the catalogue).
RETRIEVERS: dict[str, str] = {name: record.factory for name, record in ENGINES.items()}

#: Registered retrievers that search no corpus of ours (``corpus`` may be ``None`` for them).
CORPUS_FREE: frozenset[str] = frozenset(name for name, r in ENGINES.items() if not r.needs_corpus and not r.wraps)

#: The degraded engines → the options they take besides ``base`` and ``base_options``.
WRAPPERS: dict[str, tuple[str, ...]] = {
    name: tuple(key for key in record.options if key not in ("base", "base_options"))
    for name, record in ENGINES.items()
    if record.wraps
}

#: engine name → the keyword options its factory accepts and their types (see each factory's docstring).
RETRIEVER_OPTIONS: dict[str, dict[str, type]] = {name: record.option_types() for name, record in ENGINES.items()}

#: Options of the remote retriever (:class:`~searchenv.retrievers.remote.retriever.RemoteRetriever`), the client
#: used for ``http(s)://`` URLs.
REMOTE_OPTIONS: dict[str, type] = {name: option.kind for name, option in REMOTE_CLIENT_OPTIONS.items()}


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


def route_options(
    names: Sequence[str], pairs: Iterable[tuple[str, Any]], label: Callable[[str], str] = "option {!r}".format
) -> dict[str, dict[str, Any]]:
    """Each engine of ``names`` with the ``(key, value)`` options it takes, every engine's options checked.

    So one run compares BM25 with a dense engine (``encoder=minilm`` reaches only the dense ones, ``k1`` only
    BM25; a ``"module:factory"`` reference takes everything). An option no engine takes is an error naming the
    engines and the nearest option (``label(key)`` says how the user gave it), not silently dropped.
    """
    routed: dict[str, dict[str, Any]] = {name: {} for name in names}
    for key, value in pairs:
        takers = [name for name in names if (accepted := accepted_options(name)) is None or key in accepted]
        if not takers:
            known = sorted(set().union(*(accepted_options(name) or () for name in names)))
            raise ValueError(
                f"{label(key)}: none of the retrievers {', '.join(names)} takes {key!r}{did_you_mean(key, known)}; "
                f"their options are {known}"
            )
        for name in takers:
            routed[name][key] = value
    for name in names:
        check_retriever_options(name, routed[name])
    return routed


def check_retriever_options(spec: str, options: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` for an unknown engine, an option it does not take, or a value of the wrong type.

    Nothing is imported or loaded except what an engine's own rule needs (for ``bm25``'s ``engine`` option, the
    list of BM25 engines).
    A ``"module:factory"`` reference is only checked to be importable; its options are the factory's business.
    """
    if is_reference(spec):
        check_reference(spec, "retriever factory")
        return
    record = None if _is_url(spec) else engine(spec)
    accepted = REMOTE_CLIENT_OPTIONS if record is None else record.options
    what = "the HTTP retriever client" if record is None else f"retriever {spec!r}"
    for key, value in options.items():
        if key not in accepted:
            raise ValueError(
                f"{what} has no option {key!r}{did_you_mean(key, accepted)}; its options are {sorted(accepted)}"
            )
        option = accepted[key]
        if not matches_type(value, option.kind):
            raise ValueError(f"{what}: option {key!r} must be {option.kind.__name__}, got {value!r}")
        if value is not None and option.check is not None:
            option.check(value, f"{what}: option {key!r}")
    if record is not None and record.check is not None:
        record.check(spec, options)
    if record is not None and record.wraps:
        _check_base(spec, options)


def _check_base(spec: str, options: Mapping[str, Any]) -> None:
    """A degraded engine's base engine, with the base's options."""
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
        from searchenv.retrievers.remote.retriever import RemoteRetriever

        return RemoteRetriever(spec, **options)
    if corpus is None and not is_reference(spec) and ENGINES[spec].needs_corpus:
        raise ValueError(f"retriever {spec!r} needs a corpus to search")
    factory = load_attr(spec if is_reference(spec) else RETRIEVERS[spec], "retriever factory")
    try:
        return factory(corpus, **options)
    except TypeError as exc:
        raise TypeError(f"retriever {spec!r} rejected its options {sorted(options)}: {exc}") from exc
