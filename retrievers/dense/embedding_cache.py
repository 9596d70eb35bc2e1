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

from searchenv.corpus import Corpus
from searchenv.retrievers.dense.encoders import Encoder, validate_encoder
from searchenv.retrievers.index_store import IndexMismatchError, replacing, write_json_atomic

__all__ = ["IndexMismatchError", "ShardedVectors", "embed_corpus", "encode_corpus", "encoder_key", "index_dir_for"]

MANIFEST = "manifest.json"
_FORMAT = 1
#: Passages per encoder call when the encoder does not say its batch size: the progress bar's step.
_DEFAULT_CHUNK = 64


def encoder_key(description: dict[str, Any]) -> dict[str, Any]:
    """The parts of an encoder description that change the vectors (``batch_size`` etc. do not).

    The weights are identified by their ``fingerprint`` (see :class:`~searchenv.retrievers.dense.encoders.
    TransformersEncoder`), so a model folder that moves keeps its cache; an encoder without one (a custom
    :class:`~searchenv.retrievers.dense.encoders.Encoder`) is identified by its ``name``.
    """
    keys = ("backend", "query_prefix", "passage_prefix", "pooling", "normalize", "max_length", "dim", "dtype")
    key = {k: description.get(k) for k in keys}
    if description.get("fingerprint"):
        key["fingerprint"] = description["fingerprint"]
    else:
        key["name"] = description.get("name")
    return key


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

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Rows at sorted ``positions`` (e.g. a training sample) as float32, reading only the shards they fall in."""
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty((len(positions), self.dim), dtype=np.float32)
        start = 0
        for shard in self.shards():
            lo, hi = np.searchsorted(positions, [start, start + len(shard)])
            out[lo:hi] = shard[positions[lo:hi] - start]
            start += len(shard)
        return out

    def to_array(self) -> np.ndarray:
        """All vectors in one in-memory float32 array (``count × dim``)."""
        out = np.empty((self.count, self.dim), dtype=np.float32)
        row = 0
        for shard in self.shards():
            out[row : row + len(shard)] = shard
            row += len(shard)
        return out


def _encode_range(
    corpus: Corpus, encoder: Encoder, start: int, stop: int, chunk: int, advance: Callable[[int], Any]
) -> np.ndarray:
    """Passage vectors of corpus rows ``start..stop`` in row order, encoded ``chunk`` at a time, longest first.

    Longest first: the slowest batch (and any out-of-memory error) comes at once, and the progress bar's
    estimate errs late rather than early. Similar lengths per call also keep padding small.
    """
    texts = [corpus.search_text(i) for i in range(start, stop)]
    order = sorted(range(len(texts)), key=lambda j: -len(texts[j]))
    vectors = np.empty((len(texts), int(encoder.dim)), dtype=np.float32)
    for c in range(0, len(order), chunk):
        rows = order[c : c + chunk]
        vectors[rows] = encoder.encode_passages([texts[j] for j in rows])
        advance(len(rows))
    return vectors


def encode_corpus(corpus: Corpus, encoder: Encoder, *, progress: bool = True) -> np.ndarray:
    """Every passage vector in memory (no cache), with the probe, order and progress bar of :func:`embed_corpus`."""
    from tqdm.auto import tqdm

    validate_encoder(encoder)
    chunk = int(getattr(encoder, "batch_size", _DEFAULT_CHUNK) or _DEFAULT_CHUNK)
    with tqdm(total=len(corpus), desc="embedding passages", unit="passage", disable=not progress) as bar:
        return _encode_range(corpus, encoder, 0, len(corpus), chunk, bar.update)


def embed_corpus(
    corpus: Corpus,
    encoder: Encoder,
    out_dir: str | os.PathLike[str],
    *,
    shard_size: int = 2048,
    progress: bool = True,
    on_shard: Callable[[int], None] | None = None,
) -> ShardedVectors:
    """Encode every passage of ``corpus`` into ``out_dir``, resuming from any shards already there.

    Args:
        corpus: the passages (their :meth:`Corpus.search_text`, title + text, is what gets encoded).
        encoder: passage encoder; its :meth:`~Encoder.describe` is recorded and checked on resume.
        out_dir: directory for ``vectors-NNNNN.npy`` and ``manifest.json``; created when missing.
        shard_size: passages per shard — the most work a kill can lose (2,048: about four minutes of a 2-core
            CPU with MiniLM, a fraction of a second on a GPU; 21M passages make about 10,000 files). A resumed run
            keeps the shard size recorded by the run that started the directory.
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
        "encoder_name": encoder.describe().get("name"),
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
    if len(finished) < n_shards:
        validate_encoder(encoder)  # seconds, before hours of embedding
    already = sum(min(shard_size, len(corpus) - i * shard_size) for i, n in enumerate(names) if n in finished)
    chunk = int(getattr(encoder, "batch_size", _DEFAULT_CHUNK) or _DEFAULT_CHUNK)
    with tqdm(
        total=len(corpus), initial=already, desc="embedding passages", unit="passage", disable=not progress
    ) as bar:
        for number, name in enumerate(names):
            if name in finished:
                continue
            start, stop = number * shard_size, min((number + 1) * shard_size, len(corpus))
            vectors = _encode_range(corpus, encoder, start, stop, chunk, bar.update)
            with replacing(out / name) as tmp, tmp.open("wb") as handle:
                np.save(handle, vectors)
            finished.add(name)
            write_json_atomic(manifest_path, {**header, "shards": [n for n in names if n in finished]})
            if on_shard is not None:
                on_shard(number)
    if len(done) < n_shards or not manifest_path.exists():  # a cache hit leaves the directory untouched
        write_json_atomic(manifest_path, {**header, "shards": names})
    return ShardedVectors(out, tuple(names), len(corpus), int(encoder.dim))
