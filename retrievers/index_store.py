"""Indexes that remember what built them, so a stale index is refused instead of silently used.

One manifest, :class:`IndexManifest`, for every index kind: the engine and its version, the parameters baked into
the index (BM25's k1, b and analyzer; a faiss graph's parameters, metric, encoder and dimension), and the checksum
and size of the corpus. A BM25 index directory holds it as ``searchenv-index.json``; a dense index directory holds
one beside each faiss file (``hnsw-m64-efc40.json``), since several parameter sets share one directory of vectors.
Reopening with anything different raises :class:`IndexMismatchError` naming both sides and how to rebuild
(:func:`compare_manifests`, the one comparison). A build writes into a scratch sibling directory
and renames it into place only when complete, so an interrupted build never looks like a valid index; single
files that are rewritten in place (records, faiss files, embedding shards) go through :func:`replacing`, the
same rule for one file. Every index kind (BM25, dense, the embedding cache) writes through these helpers.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "MANIFEST_NAME",
    "IndexManifest",
    "IndexMismatchError",
    "build_into",
    "check_manifest",
    "compare_manifests",
    "open_or_build",
    "replacing",
    "write_json_atomic",
]

MANIFEST_NAME = "searchenv-index.json"
T = TypeVar("T")


class IndexMismatchError(ValueError):
    """An index directory was built for another corpus, engine or parameters."""


@dataclass(frozen=True)
class IndexManifest:
    """What an index directory was built from; compared field by field when the directory is reopened."""

    engine: str
    engine_version: str
    corpus_checksum: str
    corpus_size: int
    params: Mapping[str, Any] = field(default_factory=dict)
    corpus_source: str = ""
    built_at: str = ""

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "params": dict(self.params)}, indent=2, sort_keys=True)

    @classmethod
    def read(cls, directory: Path) -> IndexManifest:
        """The manifest of an index directory (``searchenv-index.json``)."""
        return cls.read_file(directory / MANIFEST_NAME)

    @classmethod
    def read_file(cls, path: Path, convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> IndexManifest:
        """A manifest file; ``convert`` maps an older layout of the file to this one's fields first."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(**(convert(data) if convert is not None else data))
        except (OSError, json.JSONDecodeError, TypeError, KeyError) as exc:
            raise IndexMismatchError(f"{path} is not a readable searchenv index manifest ({exc})") from None

    def write(self, path: Path) -> None:
        """Write this manifest, stamped with the time, atomically to ``path``."""
        stamped = IndexManifest(**{**asdict(self), "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        with replacing(path) as tmp:
            tmp.write_text(stamped.to_json(), encoding="utf-8")


def compare_manifests(found: IndexManifest, expected: IndexManifest, where: Path, rebuild: str) -> None:
    """Raise :class:`IndexMismatchError` when the index at ``where`` was built from another corpus, engine, version
    or parameters than ``expected``; the message names both sides, then ``rebuild`` (how to build it again)."""
    if found.corpus_checksum != expected.corpus_checksum:
        raise IndexMismatchError(
            f"index {where} was built from a different corpus: the index records corpus checksum "
            f"{found.corpus_checksum} ({found.corpus_size} passages, {found.corpus_source or 'unknown source'}), "
            f"the corpus given has checksum {expected.corpus_checksum} ({expected.corpus_size} passages, "
            f"{expected.corpus_source or 'unknown source'}). {rebuild}"
        )
    for name in ("engine", "engine_version"):
        if getattr(found, name) != getattr(expected, name):
            raise IndexMismatchError(
                f"index {where} was built with {name} {getattr(found, name)!r}, but {getattr(expected, name)!r} "
                f"was asked for. Use the matching engine, or rebuild: {rebuild}"
            )
    stored, wanted = dict(found.params), dict(expected.params)
    if stored != wanted:
        differ = sorted(key for key in set(stored) | set(wanted) if stored.get(key) != wanted.get(key))
        detail = "; ".join(f"{key}: stored {stored.get(key)!r}, requested {wanted.get(key)!r}" for key in differ)
        raise IndexMismatchError(
            f"index {where} was built with other parameters ({detail}); they are baked into the index. {rebuild}"
        )


def check_manifest(directory: Path, expected: IndexManifest) -> bool:
    """``True`` if ``directory`` holds a finished index matching ``expected``, ``False`` if there is nothing there.

    Raises :class:`IndexMismatchError` for an index built from something else, and for a non-empty directory that
    is not an index at all (we never write into, or delete, a directory we did not create).
    """
    if not directory.exists() or (directory.is_dir() and not any(directory.iterdir())):
        return False
    if not (directory / MANIFEST_NAME).is_file():
        raise IndexMismatchError(
            f"index_dir {directory} exists and is not empty but holds no {MANIFEST_NAME}: it is not a searchenv "
            "index. Pass an empty or new directory, or delete this one."
        )
    rebuild = f"To rebuild, delete {directory} (or pass rebuild=True) and create the retriever again."
    compare_manifests(IndexManifest.read(directory), expected, directory, rebuild)
    return True


def open_or_build(
    directory: Path, manifest: IndexManifest, build: Callable[[Path], T], load: Callable[[Path], T], rebuild: bool
) -> T:
    """Load the index at ``directory`` if it matches ``manifest``; otherwise build it there and return the result.

    ``rebuild`` replaces an existing searchenv index whatever it was built from (a foreign directory is still
    refused). ``build`` may return ``None`` to have the finished directory loaded instead.
    """
    directory = directory.absolute()
    if rebuild and (directory / MANIFEST_NAME).is_file():
        shutil.rmtree(directory)
    if check_manifest(directory, manifest):
        return load(directory)
    built = build_into(directory, manifest, build)
    return load(directory) if built is None else built


def build_into(directory: Path, manifest: IndexManifest, build: Callable[[Path], T]) -> T:
    """Run ``build(scratch_dir)``, write the manifest, then move the result to an empty or missing ``directory``
    in one rename; returns what ``build`` returned."""
    directory = directory.absolute()
    scratch = directory.with_name(f".{directory.name}.building-{os.getpid()}")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        built = build(scratch)
        manifest.write(scratch / MANIFEST_NAME)
        if directory.exists():
            directory.rmdir()  # check_manifest established it is empty
        scratch.rename(directory)
        return built
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` to write; when the block succeeds it is renamed over ``path``.

    A reader sees the old file or the new one, never half of one, and a killed or failed write leaves no
    partial ``path`` behind (the temporary file is removed). The process id in the name keeps two writers apart.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json_atomic(path: str | os.PathLike[str], data: Mapping[str, Any]) -> None:
    """Write ``data`` as indented, key-sorted JSON through :func:`replacing`."""
    with replacing(path) as tmp:
        tmp.write_text(json.dumps(dict(data), indent=1, sort_keys=True), encoding="utf-8")
