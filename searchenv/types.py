"""The small value types every layer shares: passages, questions and the retriever contract.

They live in one module so that data flows one way — dataset → episode → protocol → retriever → reward
spec → adapter — without any of those layers importing another just to name a type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "Document",
    "DocumentOpener",
    "Passage",
    "QAExample",
    "Retriever",
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


@dataclass(frozen=True, slots=True)
class Document:
    """One document opened whole: a web page's main text, or the article a corpus passage belongs to.

    Search shows passages (snippets); an agent that reads pages (ASearcher's ``<access>``, an ``open_page`` tool)
    opens one of them and is shown its document, cut by the environment to its budget.

    Attributes:
        ref: what was opened — a URL for the web, a document id (the article's title) for a local corpus.
        title: the document's title.
        text: its main text, whole; the environment cuts it to its budget, never the opener.
    """

    ref: str
    title: str
    text: str


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

    An implementation may also set ``wants_golds = True`` to be called as ``search(queries, k, golds=...)``
    with each query's episode gold answers (the ``distractor`` engine drops the passages holding them);
    :class:`~searchenv.env.SearchQAEnv` passes them, callers without golds do not.
    """

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]: ...


@runtime_checkable
class DocumentOpener(Protocol):
    """Anything that opens documents by reference (a URL, or the id of a passage it returned).

    An optional capability of a retriever: web retrievers fetch and extract pages, local corpora open the
    article a passage belongs to. One call serves a batch of references; the answer has exactly one entry per
    reference — its :class:`Document`, or the exception that says why that one could not be opened, so that
    one bad page affects only its own episode.
    """

    def open_documents(self, refs: Sequence[str]) -> list[Document | BaseException]: ...
