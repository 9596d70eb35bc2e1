"""Passage collections: :class:`Corpus` (in memory) and :class:`DiskCorpus` (on disk, through :class:`CorpusStore`).

A corpus is a jsonl of ``{"id", "contents": "\"Title\"\ntext"}`` rows (Search-R1's layout) with stable integer
positions, which every engine indexes and every search returns passages from.

wiki-18 holds 21M passages, about 13 GB of jsonl; as Python strings they would take far more RAM than a
24 GB machine can give an environment or a retrieval server. :class:`DiskCorpus` keeps none of them: the
file is memory-mapped, a table of line offsets (one int64 per passage, itself memory-mapped) finds a
passage by position, and a row is parsed only when it is read. The page cache, shared by every process
reading the same file, holds whatever is hot.

The offset table is built once per file version, in one streaming pass that also validates every row (a
malformed line is reported as ``file:line``) and computes the corpus checksum, and is cached under
``$SEARCHENV_CACHE_DIR/corpus`` (default ``~/.cache/searchenv/corpus``), keyed by the file's absolute path,
size and modification time: a changed file gets a fresh table, never a stale one.

Replace a corpus file by writing a new one and renaming it over the old (as :meth:`Corpus.to_jsonl` does);
truncating a file in place under a running reader is unsafe for any memory-mapped reader.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np

from searchenv.cache import cache_root
from searchenv.types import Passage, split_contents

__all__ = ["Corpus", "CorpusStore", "DiskCorpus", "cache_dir", "checksum_update", "corpus_line", "parse_corpus_row"]

_FORMAT = 1  # bump when the cached table's layout or meaning changes
_PROGRESS_FROM_BYTES = 64 << 20


def cache_dir() -> Path:
    """Where offset tables live: ``corpus/`` under the one cache root (:func:`searchenv.cache.cache_root`)."""
    return cache_root() / "corpus"


def corpus_line(id_: str, title: str, text: str) -> str:
    """One jsonl line of a corpus in Search-R1's layout (``contents = '"Title"\\ntext'``), newline included."""
    return json.dumps({"id": id_, "contents": f'"{title}"\n{text}'}, ensure_ascii=False) + "\n"


def parse_corpus_row(line: str | bytes, path: object, line_no: int | None) -> tuple[str, str, str, str]:
    """``(id, title, text, contents)`` of one corpus jsonl line; ``contents`` is the field exactly as stored.

    Rows may carry ``title`` and ``text`` instead of ``contents``; their ``contents`` is then composed in
    Search-R1's layout. A malformed line raises a ``ValueError`` naming ``path:line_no``.
    """
    try:
        row = json.loads(line.decode() if isinstance(line, bytes) else line)  # decoding first skips json's sniffing
        if "contents" in row:
            contents = row["contents"]
            title, text = split_contents(contents)
        else:
            title, text = str(row["title"]), str(row["text"])
            contents = f'"{title}"\n{text}'
        return str(row["id"]), title, text, contents
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as exc:
        where = f"{path}:{line_no}" if line_no is not None else str(path)
        raise ValueError(
            f"{where}: not a corpus row ({exc!r}); each line must be a JSON object with "
            "'id' and 'contents' (\"Title\\ntext\") or 'id', 'title' and 'text'"
        ) from None


def checksum_update(digest: Any, id_: str, title: str, text: str) -> None:
    """Feed one passage into a corpus checksum (sha256 over ids, titles and texts, in corpus order)."""
    digest.update(b"".join((id_.encode(), b"\x00", title.encode(), b"\x00", text.encode(), b"\x01")))


class Corpus(Sequence[Passage]):
    """A passage collection with stable integer positions; this class holds it in memory.

    Retrievers index positions ``0..len-1``; :meth:`passage` turns a position (and a score) back into a
    :class:`Passage`. Titles and texts are kept in two flat lists, which costs far less memory than a
    million ``Passage`` objects. :meth:`from_jsonl` returns a disk-backed subclass with the same interface
    (:class:`searchenv.corpus.DiskCorpus`).
    """

    __slots__ = ("_checksum", "ids", "source", "texts", "titles")

    def __init__(self, ids: Sequence[str], titles: Sequence[str], texts: Sequence[str], source: str = "<memory>"):
        if not (len(ids) == len(titles) == len(texts)):
            raise ValueError(
                f"Corpus columns differ in length: {len(ids)} ids, {len(titles)} titles, {len(texts)} texts"
            )
        self.ids = list(ids)
        self.titles = list(titles)
        self.texts = list(texts)
        self.source = source
        self._checksum: str | None = None

    @classmethod
    def from_passages(cls, passages: Iterable[Passage], source: str = "<memory>") -> Corpus:
        ids, titles, texts = [], [], []
        for p in passages:
            ids.append(p.id)
            titles.append(p.title)
            texts.append(p.text)
        return cls(ids, titles, texts, source=source)

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike[str], *, in_memory: bool = False) -> Corpus:
        """Open a FlashRAG / Search-R1 corpus: one ``{"id", "contents"}`` object per line.

        By default the passages stay on disk (:class:`searchenv.corpus.DiskCorpus`: a cached offset
        table and a memory map, so wiki-18's 21M passages cost no RAM); ``in_memory=True`` reads them all
        into lists instead. Rows may also carry ``title`` and ``text`` instead of ``contents``. A malformed
        line raises a ``ValueError`` naming the file and line number rather than being skipped silently.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"corpus file not found: {path} (expected a jsonl of {{'id','contents'}} rows)")
        if not in_memory:
            return DiskCorpus(path)
        ids, titles, texts = [], [], []
        with path.open(encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, 1):
                if line.strip():
                    id_, title, text, _ = parse_corpus_row(line, path, line_no)
                    ids.append(id_)
                    titles.append(title)
                    texts.append(text)
        if not ids:
            raise ValueError(f"corpus file {path} holds no passages")
        return cls(ids, titles, texts, source=str(path))

    def to_jsonl(self, path: str | os.PathLike[str]) -> None:
        """Write the corpus in Search-R1's layout (``contents = '"Title"\\ntext'``).

        Written under a temporary name and renamed over ``path``, so a reader that has the old file mapped
        keeps reading the old file and never sees a half-written one.
        """
        path = Path(path)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        with partial.open("w", encoding="utf-8") as handle:
            handle.writelines(corpus_line(p.id, p.title, p.text) for p in self)
        partial.replace(path)

    def passage(self, position: int, score: float = 0.0) -> Passage:
        return Passage(self.ids[position], self.titles[position], self.texts[position], float(score))

    def search_text(self, position: int) -> str:
        """The text a retriever indexes: title and passage, as Search-R1's indexes do."""
        return f"{self.titles[position]}\n{self.texts[position]}"

    def contents(self, position: int) -> str:
        """The passage's ``contents`` field as the corpus file stores it (title quotes included or not);
        for passages built in memory, Search-R1's layout ``"Title"\\ntext``."""
        return f'"{self.titles[position]}"\n{self.texts[position]}'

    @property
    def checksum(self) -> str:
        """A content hash (sha256 over ids, titles and texts) that index directories record."""
        if self._checksum is None:
            digest = hashlib.sha256()
            for i, t, x in zip(self.ids, self.titles, self.texts, strict=True):
                checksum_update(digest, i, t, x)
            self._checksum = digest.hexdigest()
        return self._checksum

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, position: int) -> Passage:  # type: ignore[override]
        if isinstance(position, slice):
            raise TypeError("Corpus does not support slicing; use corpus.passage(i) in a loop")
        return self.passage(position)

    def __iter__(self) -> Iterator[Passage]:
        for i in range(len(self)):
            yield self.passage(i)

    def __repr__(self) -> str:
        return f"Corpus({len(self)} passages from {self.source})"


class CorpusStore:
    """The raw rows of one corpus jsonl by position: ``row(i)`` -> ``(id, title, text, contents)``."""

    def __init__(self, path: str | os.PathLike[str], *, progress: bool | None = None):
        self.path = Path(path).resolve()
        if not self.path.is_file():
            raise FileNotFoundError(
                f"corpus file not found: {self.path} (expected a jsonl of {{'id','contents'}} rows)"
            )
        stat = self.path.stat()
        self._stem = hashlib.sha256(str(self.path).encode()).hexdigest()[:16]
        self._key = key = f"{self._stem}-{stat.st_size}-{stat.st_mtime_ns}"
        self.table_path = cache_dir() / f"{key}.offsets.npy"
        meta_path = cache_dir() / f"{key}.json"
        if not (self.table_path.is_file() and meta_path.is_file()):
            self._build(meta_path, stat.st_size, progress)
        meta = json.loads(meta_path.read_text())
        self.checksum: str = meta["checksum"]
        # a plain ndarray view of the mapped table: indexing an np.memmap goes through Python-level code
        self.offsets = np.asarray(np.load(self.table_path, mmap_mode="r"))
        self._count = len(self.offsets)
        if self._count == 0:
            raise ValueError(f"corpus file {self.path} holds no passages")
        with self.path.open("rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)

    def __len__(self) -> int:
        return self._count

    def line(self, position: int) -> bytes:
        """The raw jsonl line of the passage at ``position`` (no newline)."""
        start = int(self.offsets[position])
        end = self._map.find(b"\n", start)
        return self._map[start : end if end >= 0 else len(self._map)]

    def row(self, position: int) -> tuple[str, str, str, str]:
        """``(id, title, text, contents)`` of the passage at ``position``; ``contents`` exactly as stored."""
        count = self._count
        if not -count <= position < count:
            raise IndexError(f"corpus position {position} out of range for {count:,} passages")
        return parse_corpus_row(self.line(position % count), self.path, None)

    def _build(self, meta_path: Path, size: int, progress: bool | None) -> None:
        """One pass over the file: validate every row, record where each starts, hash the corpus.

        Both cache files are written under temporary names and renamed, so a concurrent reader sees either
        no table or a whole one (processes opening the same new file at once each build it, harmlessly);
        tables of older versions of the same path are removed.
        """
        from tqdm.auto import tqdm

        show = size >= _PROGRESS_FROM_BYTES if progress is None else progress
        starts = array("q")  # 8 bytes a passage while building, not a Python int each
        digest = hashlib.sha256()
        position = 0
        with (
            self.path.open("rb") as handle,
            tqdm(total=size, desc=f"indexing {self.path.name}", unit="B", unit_scale=True, disable=not show) as bar,
        ):
            for line_no, line in enumerate(handle, 1):
                if line.strip():
                    id_, title, text, _ = parse_corpus_row(line, self.path, line_no)
                    checksum_update(digest, id_, title, text)
                    starts.append(position)
                position += len(line)
                if line_no % 65536 == 0:
                    bar.update(position - bar.n)
            bar.update(position - bar.n)
        if not starts:
            raise ValueError(f"corpus file {self.path} holds no passages")
        meta_path.parent.mkdir(parents=True, exist_ok=True)
        for old in meta_path.parent.glob(f"{self._stem}-*"):
            if not old.name.startswith(f"{self._key}."):  # other versions only: a concurrent build of this one stays
                old.unlink(missing_ok=True)
        suffix = f".{os.getpid()}.tmp"
        with open(f"{self.table_path}{suffix}", "wb") as out:
            np.save(out, np.frombuffer(starts, dtype=np.int64))
        os.replace(f"{self.table_path}{suffix}", self.table_path)
        meta = {"format": _FORMAT, "path": str(self.path), "size": size, "count": len(starts)}
        meta["checksum"] = digest.hexdigest()
        Path(f"{meta_path}{suffix}").write_text(json.dumps(meta))
        os.replace(f"{meta_path}{suffix}", meta_path)


class _FieldView(Sequence[str]):
    """One field of every passage (ids, titles, texts or contents), read from disk on access."""

    def __init__(self, store: CorpusStore, field: int):
        self._store, self._field = store, field

    def __len__(self) -> int:
        return len(self._store)

    @overload
    def __getitem__(self, position: int) -> str: ...
    @overload
    def __getitem__(self, position: slice) -> list[str]: ...
    def __getitem__(self, position: int | slice) -> str | list[str]:
        if isinstance(position, slice):
            return [self._store.row(i)[self._field] for i in range(*position.indices(len(self)))]
        return self._store.row(position)[self._field]

    def __iter__(self) -> Iterator[str]:
        for i in range(len(self)):
            yield self._store.row(i)[self._field]


class DiskCorpus(Corpus):
    """A :class:`Corpus` whose passages stay in their jsonl file; only the offset table is mapped in.

    ``ids``, ``titles`` and ``texts`` are read-only sequence views that parse rows on access; the checksum
    comes from the offset table's cache, so opening a 21M-passage corpus a second time reads nothing.
    """

    __slots__ = ("store",)

    def __init__(self, path: str | os.PathLike[str], *, progress: bool | None = None):
        self.store = CorpusStore(path, progress=progress)
        self.ids = _FieldView(self.store, 0)
        self.titles = _FieldView(self.store, 1)
        self.texts = _FieldView(self.store, 2)
        self.source = str(self.store.path)
        self._checksum = self.store.checksum

    def __reduce__(self):
        """Pickle as the path: a worker process reopens the file (its offset table is cached) and maps it."""
        return (DiskCorpus, (self.store.path,))

    def passage(self, position: int, score: float = 0.0) -> Passage:
        id_, title, text, contents = self.store.row(position)
        return Passage(id_, title, text, float(score), contents)  # as stored: Search-R1's block shows it verbatim

    def search_text(self, position: int) -> str:
        _, title, text, _ = self.store.row(position)
        return f"{title}\n{text}"

    def contents(self, position: int) -> str:
        return self.store.row(position)[3]

    def __len__(self) -> int:
        return len(self.store)
