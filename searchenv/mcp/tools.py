"""The MCP server's two tools, ``search`` and ``open`` (:mod:`searchenv.protocol.tools` names and describes them),
over one retriever and its document opener.

They go through the step rules' own calls (:func:`~searchenv.env.step_rules.arun_search`,
:func:`~searchenv.env.step_rules.arun_open`), so an engine's answer is checked against the same contract as in an
episode and a page is cut by the same rule (:func:`~searchenv.env.step_rules.clip_words`). A failed search or open
raises: the SDK turns the exception into a tool result with ``isError`` set, which is the failing call's alone.
There is no episode here, so ``open`` takes an id or URL that a search returned, not a result number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from searchenv.checks import integer
from searchenv.env.step_rules import arun_open, arun_search, clip_words
from searchenv.types import Document, DocumentOpener, Retriever

__all__ = ["SearchTools"]


@dataclass
class SearchTools:
    """``search`` and ``open`` as async methods returning plain JSON-ready dicts.

    Attributes:
        retriever: the engine searched.
        opener: what opens a result's document (:func:`searchenv.components.build_opener`); ``None``: ``open``
            says that this engine cannot open documents.
        topk: results of a search when the caller gives no ``k``; ``max_k`` bounds what a caller may ask.
        max_page_words: words of an opened document returned (``None``: whole).
    """

    retriever: Retriever
    opener: DocumentOpener | None = None
    topk: int = 3
    max_k: int = 50
    max_page_words: int | None = 1_000

    async def search(self, query: str, k: int | None = None) -> dict[str, Any]:
        """The top ``k`` results for ``query``, best first: rank, id, title, text and score of each."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        k = integer(self.topk if k is None else k, "k", 1, self.max_k)  # k=True is refused, not taken as 1
        (found,) = await arun_search(self.retriever, [query], k, raise_errors=True)
        passages = found if isinstance(found, list) else []
        results = [
            {"rank": rank, "id": p.id, "title": p.title, "text": p.text, "score": p.score}
            for rank, p in enumerate(passages, 1)
        ]
        return {"query": query, "results": results}

    async def open(self, ref: str) -> dict[str, Any]:
        """The document of a result: the ``ref`` asked for (the id or URL a search returned), its title and text,
        cut to ``max_page_words`` (``clipped`` says whether it was)."""
        if not isinstance(ref, str) or not ref.strip():
            raise ValueError("ref must be the id or URL of a search result")
        (found,) = await arun_open(self.opener, [ref.strip()], raise_errors=True)
        if not isinstance(found, Document):  # this reference's own failure (a failed call has raised already)
            raise LookupError(f"could not open {ref[:200]!r}: {found}")
        text, clipped = clip_words(found.text, self.max_page_words)
        return {"ref": ref.strip(), "title": found.title, "text": text, "clipped": clipped}
