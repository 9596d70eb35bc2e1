"""Corpus embedding that survives being killed: fixed-size shards on disk plus a manifest.

Embedding wiki-18 (21M passages) takes hours even on a GPU, so the work is cut into shards of
``shard_size`` passages, each written atomically as ``vectors-00000.npy``; ``manifest.json`` records the
encoder recipe, the corpus checksum and the finished shards. A restart reads the manifest, checks that
encoder and corpus are the same (refusing otherwise — mixing vectors of two recipes in one index is a
silent recall bug) and encodes only the missing shards. Readers open shards with ``np.load(mmap_mode="r")``
so an index can be built from more vectors than fit in memory alongside it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from searchenv.retrievers.encoder import Encoder
from searchenv.retrievers.index_store import IndexMismatchError
from searchenv.types import Corpus

__all__ = ["IndexMismatchError", "ShardedVectors", "embed_corpus", "encoder_key", "index_dir_for"]

MANIFEST = "manifest.json"
_FORMAT = 1


def encoder_key(description: dict[str, Any]) -> dict[str, Any]:
    """The parts of an encoder description that change the vectors (``batch_size`` etc. do not)."""
    keys = ("backend", "name", "query_prefix", "passage_prefix", "pooling", "normalize", "max_length", "dim")
    return {k: description.get(k) for k in keys}


def index_dir_for(root: str | os.PathLike[str], corpus: Corpus, encoder: Encoder) -> Path:
    """A cache directory name that is unique per (corpus content, encoder recipe), under ``root``."""
    key = json.dumps(encoder_key(encoder.describe()), sort_keys=True)
    tag = hashlib.sha256(f"{corpus.checksum}\x00{key}".encode()).hexdigest()[:12]
    stem = re.sub(r"[^A-Za-z0-9]+", "-", Path(corpus.source).stem).strip("-") or "corpus"
    return Path(root) / f"{stem}-{len(corpus)}-{tag}"


def check_same(what: str, where: Path, recorded: Any, wanted: Any) -> None:
    """Raise :class:`IndexMismatchError` naming the differing field when ``recorded != wanted``."""
    if recorded == wanted:
        return
    if isinstance(recorded, dict) and isinstance(wanted, dict):
        diff = {
            k: (recorded.get(k), wanted.get(k))
            for k in sorted(set(recorded) | set(wanted))
            if recorded.get(k) != wanted.get(k)
        }
        detail = "; ".join(f"{k}: stored {a!r}, requested {b!r}" for k, (a, b) in diff.items())
    else:
        detail = f"stored {recorded!r}, requested {wanted!r}"
    raise IndexMismatchError(
        f"{where} was built with a different {what} ({detail}). Use another index directory, or delete {where} "
        "to rebuild it for the current settings."
    )


@dataclass(frozen=True)
class ShardedVectors:
    """Finished passage vectors on disk, row ``i`` = corpus position ``i``, read shard by shard."""

    directory: Path
    files: tuple[str, ...]
    count: int
    dim: int

    def shards(self) -> Iterator[np.ndarray]:
        """Memory-mapped shards in corpus order (nothing is read until a row is touched)."""
        for name in self.files:
            yield np.load(self.directory / name, mmap_mode="r")

    def to_array(self) -> np.ndarray:
        """All vectors in one in-memory float32 array (``count × dim``)."""
        out = np.empty((self.count, self.dim), dtype=np.float32)
        row = 0
        for shard in self.shards():
            out[row : row + len(shard)] = shard
            row += len(shard)
        return out


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def embed_corpus(
    corpus: Corpus,
    encoder: Encoder,
    out_dir: str | os.PathLike[str],
    *,
    shard_size: int = 8192,
    progress: bool = True,
    on_shard: Callable[[int], None] | None = None,
) -> ShardedVectors:
    """Encode every passage of ``corpus`` into ``out_dir``, resuming from any shards already there.

    Args:
        corpus: the passages (their :meth:`Corpus.search_text`, title + text, is what gets encoded).
        encoder: passage encoder; its :meth:`~Encoder.describe` is recorded and checked on resume.
        out_dir: directory for ``vectors-NNNNN.npy`` and ``manifest.json``; created when missing.
        shard_size: passages per shard — the most work a kill can lose. A resumed run keeps the shard size
            recorded by the run that started the directory.
        progress: show a tqdm bar over passages.
        on_shard: called with the shard number after each shard is safely on disk (progress hooks; tests
            raise from it to simulate a kill).

    Raises:
        IndexMismatchError: ``out_dir`` holds vectors of another encoder recipe or corpus.
    """
    from tqdm.auto import tqdm

    if shard_size < 1:
        raise ValueError(f"shard_size must be positive, got {shard_size}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    header = {
        "format": _FORMAT,
        "encoder": encoder_key(encoder.describe()),
        "corpus_checksum": corpus.checksum,
        "corpus_size": len(corpus),
        "shard_size": int(shard_size),
        "dim": int(encoder.dim),
    }
    manifest_path = out / MANIFEST
    done: list[str] = []
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        for key in ("encoder", "corpus_checksum", "corpus_size", "dim", "format"):
            check_same(key.replace("_", " "), out, manifest.get(key), header[key])
        # Shard boundaries are fixed by the first run; a resumed run keeps them whatever it was asked.
        shard_size = header["shard_size"] = int(manifest["shard_size"])
        done = [name for name in manifest["shards"] if (out / name).exists()]
    n_shards = -(-len(corpus) // shard_size)
    names = [f"vectors-{i:05d}.npy" for i in range(n_shards)]
    finished = set(done)
    bar = tqdm(total=len(corpus), desc=f"embedding {out.name}", unit="passage", disable=not progress)
    for number, name in enumerate(names):
        start, stop = number * shard_size, min((number + 1) * shard_size, len(corpus))
        if name not in finished:
            vectors = encoder.encode_passages([corpus.search_text(i) for i in range(start, stop)])
            tmp = out / (name + ".tmp")
            with tmp.open("wb") as handle:
                np.save(handle, np.ascontiguousarray(vectors, dtype=np.float32))
            os.replace(tmp, out / name)
            finished.add(name)
            _write_json_atomic(manifest_path, {**header, "shards": [n for n in names if n in finished]})
            if on_shard is not None:
                on_shard(number)
        bar.update(stop - start)
    bar.close()
    _write_json_atomic(manifest_path, {**header, "shards": names})
    return ShardedVectors(out, tuple(names), len(corpus), int(encoder.dim))
