"""Opening a search result whole: the document a passage belongs to.

* :mod:`~searchenv.documents.articles` — :class:`CorpusArticles`, the opener of a local corpus: a passage opens
  as its article (the adjacent passages that share its title, in corpus order).

Web retrievers open pages themselves (``open_documents`` on the retriever, :class:`searchenv.types.DocumentOpener`);
the environment uses the retriever's opener when it has one and a corpus opener otherwise
(:func:`searchenv.components.build_opener`).
"""

from __future__ import annotations

from searchenv.documents.articles import CorpusArticles

__all__ = ["CorpusArticles"]
