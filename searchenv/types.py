"""The small value types every layer shares: passages, questions, the retriever contract and its capabilities.

They live in one module so that data flows one way — dataset → episode → protocol → retriever → reward
spec → adapter — without any of those layers importing another just to name a type.

**The retriever contract** is :class:`Retriever`: ``search(queries, k)``. Everything else an engine may offer is
an optional capability, one named Protocol each, which the layers above test with ``isinstance`` (or, for the
flags, :func:`has_flag`) instead of probing attributes by name:

* :class:`ComputesInProcess` — ``compute_only = True``: ``search`` only computes in this process; the retrieval
  service may run a quick call on its event loop.
* :class:`AsyncRetriever` — ``async asearch(queries, k)``: ``step_async`` and the MCP tools await it instead of
  running ``search`` in a worker thread.
* :class:`WantsGolds` — ``wants_golds = True``: called as ``search(..., golds=...)`` with the episodes' answers.
* :class:`TakesTrainingStep` — ``set_step(step)``: a schedule over training steps
  (``SearchQAEnv.set_training_step``).
* :class:`Closeable` — ``close()``: threads, HTTP clients or files to release (``components.close_shared``).
* :class:`ChecksOnStart` — ``check_on_start`` and ``check_reachable()``: a service checked by the composition root
  before any episode waits on it.
* :class:`DocumentOpener` — ``open_documents(refs)``: results opened whole (protocols with an open action);
  :class:`AsyncDocumentOpener` — ``async aopen_documents(refs)``, awaited by ``step_async`` and MCP.
* :class:`WantsQuestions` — ``wants_questions = True``: an opener called as ``open_documents(...,
  questions=...)`` (a web page's note is written for the episode's question).

The engine catalogue (:mod:`searchenv.retrievers.catalogue`) records which of these each built-in engine has,
and a test builds the engines and holds the record against the objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "CAPABILITIES",
    "AsyncDocumentOpener",
    "AsyncRetriever",
    "ChecksOnStart",
    "Closeable",
    "ComputesInProcess",
    "Document",
    "DocumentOpener",
    "Passage",
    "QAExample",
    "Retriever",
    "TakesTrainingStep",
    "WantsGolds",
    "WantsQuestions",
    "capabilities_of",
    "has_flag",
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

    Search shows passages (snippets); an agent that reads pages (ASearcher's ``<access>``, an ``open`` tool)
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

    What an engine may offer besides ``search`` (``compute_only``, ``asearch``, ``wants_golds``, ``set_step``,
    ``close``, ...) is listed in this module's docstring, one Protocol per capability.
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


@runtime_checkable
class AsyncDocumentOpener(Protocol):
    """A :class:`DocumentOpener` whose opening can be awaited (``aopen_documents``, same contract), so an event loop
    waits on the pages instead of a worker thread."""

    async def aopen_documents(self, refs: Sequence[str]) -> list[Document | BaseException]: ...


@runtime_checkable
class AsyncRetriever(Protocol):
    """A retriever whose search can be awaited (``asearch``, the contract of :meth:`Retriever.search`).

    ``step_async`` and the MCP tools await it on the event loop; any other engine's ``search`` runs in a worker
    thread. The HTTP client (:class:`~searchenv.retrievers.remote.retriever.RemoteRetriever`) has one.
    """

    async def asearch(self, queries: Sequence[str], k: int) -> list[list[Passage]]: ...


@runtime_checkable
class ComputesInProcess(Protocol):
    """``compute_only = True``: ``search`` only computes in this process — no network, no other process or actor,
    no lock another thread holds for long — so the retrieval service may run a quick search on its event loop, and
    searches it once before it reports ready (one-time work such as JIT compilation is not paid by the first
    client). Absent or ``False``: every search runs in a worker thread."""

    compute_only: bool


@runtime_checkable
class WantsGolds(Protocol):
    """``wants_golds = True``: the engine is called as ``search(queries, k, golds=...)`` with each query's episode
    gold answers (the ``distractor`` engine drops the passages that hold them; the simulated engine steers its
    useful documents towards them). :class:`~searchenv.env.SearchQAEnv` passes them; callers without golds do
    not."""

    wants_golds: bool


@runtime_checkable
class TakesTrainingStep(Protocol):
    """``set_step(step)``: the engine (or reward spec) follows a schedule over the trainer's steps (the degraded
    engines' ``p``, the simulated engine's ``p_noisy``). ``SearchQAEnv.set_training_step`` calls it; the trainers
    call that before each rollout."""

    def set_step(self, step: int) -> None: ...


@runtime_checkable
class Closeable(Protocol):
    """``close()`` releases what the object holds (thread pools, HTTP clients, index files, a JVM searcher).

    An environment closes what it opened; engines the composition root shared are closed by
    :func:`searchenv.components.close_shared`.
    """

    def close(self) -> None: ...


@runtime_checkable
class ChecksOnStart(Protocol):
    """A service checked before any episode waits on it: when ``check_on_start`` is true, the composition root
    calls ``check_reachable()``, which raises naming the address and the fix when nothing answers."""

    check_on_start: bool

    def check_reachable(self) -> None: ...


@runtime_checkable
class WantsQuestions(Protocol):
    """``wants_questions = True``: a :class:`DocumentOpener` called as ``open_documents(refs, questions=...)`` with
    each opening episode's question (a web retriever with a summariser writes each page's note for its
    question)."""

    wants_questions: bool


_FLAGS: dict[type, str] = {
    ComputesInProcess: "compute_only",
    WantsGolds: "wants_golds",
    WantsQuestions: "wants_questions",
    ChecksOnStart: "check_on_start",
}

#: Every optional capability of a retriever (or opener), as listed in this module's docstring.
CAPABILITIES: tuple[type, ...] = (
    ComputesInProcess,
    AsyncRetriever,
    WantsGolds,
    TakesTrainingStep,
    Closeable,
    ChecksOnStart,
    DocumentOpener,
    AsyncDocumentOpener,
    WantsQuestions,
)


def has_flag(obj: object, capability: type) -> bool:
    """Whether ``obj`` has the flag capability ``capability`` (:class:`ComputesInProcess`, :class:`WantsGolds`,
    :class:`WantsQuestions`, :class:`ChecksOnStart`) *and* the flag is set: the attribute may be a property whose
    value depends on the object (a degraded wrapper computes only when its base does)."""
    if capability not in _FLAGS:
        raise TypeError(f"has_flag reads the flag capabilities, not {capability!r}")
    return isinstance(obj, capability) and bool(getattr(obj, _FLAGS[capability]))


def capabilities_of(obj: object) -> frozenset[type]:
    """The capabilities of :data:`CAPABILITIES` that ``obj`` has (a flag capability only when its flag is set)."""
    return frozenset(cap for cap in CAPABILITIES if (has_flag(obj, cap) if cap in _FLAGS else isinstance(obj, cap)))
