"""The local corpus as a document opener: a passage opens as the article it belongs to.

wiki-18 cuts each Wikipedia article into ~100-word passages that keep the article's title and sit next to one
another in corpus order; the generated world writes one passage per entity. So the article of a passage is the
run of adjacent passages that share its title, read in corpus order — found by walking from the passage, with
no index over titles (wiki-18 has 21M passages; a title index would cost minutes and gigabytes for a lookup that
reads a few hundred rows).
"""

from __future__ import annotations

from collections.abc import Sequence

from searchenv.corpus import Corpus
from searchenv.types import Document

__all__ = ["CorpusArticles"]


class CorpusArticles:
    """Opens passages of ``corpus`` by id as their articles (:class:`searchenv.types.DocumentOpener`).

    Args:
        corpus: the corpus the retriever searches (its passage ids are what search results carry).
        max_passages: the most passages one article is read from, around the opened one; a bound on the work
            of one open (the environment shows far fewer words anyway, ``max_page_words``).

    A document's ``ref`` and ``title`` are the article's title; its text is its passages' texts, one per line.
    An id the corpus does not hold is that reference's own failure (a ``KeyError`` in its place).
    """

    compute_only = True

    def __init__(self, corpus: Corpus, max_passages: int = 256):
        if not isinstance(max_passages, int) or max_passages < 1:
            raise ValueError(f"max_passages must be a positive integer, got {max_passages!r}")
        self.corpus = corpus
        self.max_passages = max_passages
        self._positions: dict[str, int] | None = None  # id -> position, built on the first id not at its own row

    def open_documents(self, refs: Sequence[str]) -> list[Document | BaseException]:
        """One entry per reference: the article of the passage with that id, or the error that says why not."""
        opened: list[Document | BaseException] = []
        for ref in refs:
            position = self._position(ref)
            if position is None:
                opened.append(KeyError(f"no passage with id {ref[:80]!r} in the corpus {self.corpus.source}"))
            else:
                opened.append(self._article(position))
        return opened

    def _position(self, ref: str) -> int | None:
        """The position of the passage with id ``ref``. wiki-18's and the world's ids are their row numbers, so
        that is tried first; any other corpus gets an id table, built once."""
        ids = self.corpus.ids
        if ref.isascii() and ref.isdigit() and len(ref) <= 18 and int(ref) < len(ids) and ids[int(ref)] == ref:
            return int(ref)
        if self._positions is None:
            self._positions = {id_: position for position, id_ in enumerate(ids)}
        return self._positions.get(ref)

    def _article(self, position: int) -> Document:
        titles, title = self.corpus.titles, self.corpus.titles[position]
        first, last = position, position
        while first > 0 and last - first + 1 < self.max_passages and titles[first - 1] == title:
            first -= 1
        while last + 1 < len(titles) and last - first + 1 < self.max_passages and titles[last + 1] == title:
            last += 1
        text = "\n".join(self.corpus.texts[i] for i in range(first, last + 1))
        return Document(ref=title, title=title, text=text)
