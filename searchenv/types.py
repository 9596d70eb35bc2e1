"""The small value types every layer shares: passages, corpora, questions and the retriever contract.

They live in one module so that data flows one way — dataset → episode → protocol → retriever → reward
spec → adapter — without any of those layers importing another just to name a type.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "Corpus",
    "Passage",
    "QAExample",
    "Retriever",
    "checksum_update",
    "corpus_line",
    "parse_corpus_row",
    "split_contents",
]


@dataclass(frozen=True, slots=True)
class Passage:
    """One retrieved passage.

    ``id`` is the corpus id as a string (wiki-18 ids are numeric strings), ``title`` is the passage title
    without the quotes wiki-18 keeps around it, ``score`` is the engine's own score (higher is better; 0.0
    for engines without scores such as ``random``). ``stored_contents`` is the corpus row's ``contents``
    exactly as stored, when the passage came from a corpus file: Search-R1 shows the title line as stored
    (quotes and all), so reproducing its information block byte for byte needs it.
    """

    id: str
    title: str
    text: str
    score: float = 0.0
    stored_contents: str | None = field(default=None, compare=False, repr=False)  # layout only, not identity

    @property
    def contents(self) -> str:
        """The passage in Search-R1's corpus layout: as stored when known, else ``"Title"\\ntext``."""
        if self.stored_contents is not None:
            return self.stored_contents
        return f'"{self.title}"\n{self.text}'

    def stored_title_and_text(self) -> tuple[str, str]:
        """Title line and text split as Search-R1's server splits stored contents (first line / the rest).

        Without stored contents, the title and text as held: no quotes are invented.
        """
        if self.stored_contents is None:
            return self.title, self.text
        title, _, text = self.stored_contents.partition("\n")
        return title, text


def split_contents(contents: str) -> tuple[str, str]:
    """Split a corpus ``contents`` field into ``(title, text)``.

    The first line is the title; wiki-18 wraps it in double quotes, FlashRAG's samples do not, so one
    pair of surrounding quotes is removed when present.
    """
    title, _, text = contents.partition("\n")
    title = title.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return title, text.strip()


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


@dataclass(frozen=True, slots=True)
class QAExample:
    """One question with its gold answers, as every dataset loader yields it."""

    id: str
    question: str
    golden_answers: tuple[str, ...]
    data_source: str = "unknown"
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.question, str) or not self.question.strip():
            raise ValueError(f"QAExample {self.id!r}: the question must be a non-empty string")
        if isinstance(self.golden_answers, str) or not all(isinstance(a, str) for a in self.golden_answers):
            raise ValueError(
                f"QAExample {self.id!r}: golden_answers must be a sequence of strings, got {self.golden_answers!r}"
            )


class Corpus(Sequence[Passage]):
    """A passage collection with stable integer positions; this class holds it in memory.

    Retrievers index positions ``0..len-1``; :meth:`passage` turns a position (and a score) back into a
    :class:`Passage`. Titles and texts are kept in two flat lists, which costs far less memory than a
    million ``Passage`` objects. :meth:`from_jsonl` returns a disk-backed subclass with the same interface
    (:class:`searchenv.corpus_store.DiskCorpus`).
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

        By default the passages stay on disk (:class:`searchenv.corpus_store.DiskCorpus`: a cached offset
        table and a memory map, so wiki-18's 21M passages cost no RAM); ``in_memory=True`` reads them all
        into lists instead. Rows may also carry ``title`` and ``text`` instead of ``contents``. A malformed
        line raises a ``ValueError`` naming the file and line number rather than being skipped silently.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"corpus file not found: {path} (expected a jsonl of {{'id','contents'}} rows)")
        if not in_memory:
            from searchenv.corpus_store import DiskCorpus

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


@runtime_checkable
class Retriever(Protocol):
    """Anything that answers a batch of queries with the top-``k`` passages of each, best first.

    One call serves a whole batch so that vectorised environments and trainers pay one round trip (or one
    matrix product) per step, not one per episode. Implementations must return exactly ``len(queries)``
    lists, each of at most ``k`` passages.

    An implementation may set the class attribute ``compute_only = True`` when ``search`` only computes in
    this process — no network, no other process or actor, no lock another thread holds for long — so that the
    retrieval service may call a quick search directly on its event loop (absent means ``False``); the service
    also searches such an engine once before it reports ready, so one-time work (JIT compilation) is not paid
    by the first client.
    """

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]: ...
