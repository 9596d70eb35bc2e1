"""The rules of one step, shared by ``SearchQAEnv.step`` and the batch steps of :mod:`.stepping`.

A step has three phases, kept apart so that a batch can run each phase for every episode before the next:

1. *Plan* (:func:`plan_step`): read and check the action; nothing changes yet, so misuse raises before any
   episode of a batch moves. An open's reference is resolved here (:func:`resolve_ref`: result N of the latest
   executed search → its id or URL).
2. *Search* (:func:`run_search`, :func:`read_search`): one engine call for the queries of a (retriever, k);
   a failure becomes the message the searching episodes are shown, or is raised, as the env was told. A failure
   stays the failing episode's: a failed call is searched again in halves until the queries that cause it stand
   alone, unless the service itself is down (:func:`isolates` has the rule), and what an engine returns is
   checked, so a contract breach is a failed search of the query it concerns, not an exception out of ``step``.
   Opens go the same way (:func:`run_open`): one ``open_documents`` call per opener, each reference's failure
   its own episode's.
3. *Outcome* (:func:`step_outcome`), then *apply* (:func:`apply_outcome`): the new turn, observation, info
   and, on the terminal step, the reward are computed first and only then written to the episode, so a reward
   spec that raises leaves every episode of the batch as it was. The reward comes from :func:`score_outcomes`,
   which scores the episodes a batch ends together (a spec's ``score_batch``, when it has one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from searchenv.episode.episode import Episode
from searchenv.episode.reward_contract import RewardResult, Rollout
from searchenv.episode.turns import Facts, Turn
from searchenv.http.retry import RetrievalUnavailable
from searchenv.protocol import ParsedAction, parse_action
from searchenv.protocol import Protocol as ActionProtocol
from searchenv.types import (
    AsyncDocumentOpener,
    AsyncRetriever,
    Document,
    DocumentOpener,
    Passage,
    Retriever,
    WantsGolds,
    WantsQuestions,
    has_flag,
)

__all__ = [
    "Found",
    "StepOutcome",
    "StepPlan",
    "StepResult",
    "StepRules",
    "apply_outcome",
    "arun_open",
    "clip_passages",
    "clip_words",
    "plan_step",
    "resolve_ref",
    "open_options",
    "run_open",
    "SERVICE_DOWN_KINDS",
    "arun_search",
    "isolates",
    "read_search",
    "run_search",
    "score_outcomes",
    "service_down",
    "search_options",
    "step_outcome",
]


#: What one query's search came to: its passages, or the message of its failure (see :func:`read_search`); for
#: an open, the document, or the message of its failure (see :func:`read_open`).
Found = list[Passage] | Document | str


class StepResult(NamedTuple):
    """The Gymnasium step 5-tuple."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class StepRules(Protocol):
    """The settings a step follows; :class:`~searchenv.env.search_qa.SearchQAEnv` has them as attributes."""

    @property
    def protocol(self) -> ActionProtocol: ...
    @property
    def max_turns(self) -> int: ...
    @property
    def budget(self) -> str: ...
    @property
    def action_limit(self) -> int: ...
    @property
    def max_query_chars(self) -> int: ...
    @property
    def max_information_words(self) -> int | None: ...
    @property
    def max_page_words(self) -> int | None: ...
    @property
    def invalid_hint(self) -> str: ...
    @property
    def reward_spec(self) -> Callable[[Rollout], RewardResult]: ...


# The step's internal records are slotted dataclasses: built and read at every step, they cost less than a
# NamedTuple, whose fields Python 3.11 reads through an unspecialised descriptor (see transcript.Turn).
@dataclass(slots=True)
class StepPlan:
    """One action read and checked, nothing changed yet: the query to run (if any) and whether the budget ends.

    An open has either ``open_ref`` (the id or URL to open) or ``open_missing`` (why its reference names no
    document); neither when the budget skips it.
    """

    parsed: ParsedAction
    query: str | None
    final: bool
    open_ref: str | None = None
    open_missing: str | None = None


@dataclass(slots=True)
class StepOutcome:
    """What a step will do to its episode: the turn to append, the end flag, the reward (terminal step only)."""

    turn: Turn
    truncated: bool
    reward: RewardResult | None
    facts: Facts | None  # the episode's facts after this step, on the terminal step
    info: dict[str, Any]
    rollout: Rollout | None = None  # what the terminal step is scored on (see score_outcomes)


def plan_step(rules: StepRules, episode: Episode, action: object) -> StepPlan:
    """Read one action without changing anything; raises on misuse (an ended episode, an action not text)."""
    if episode.done:
        raise RuntimeError("the episode has ended; call reset() before step()")
    if not isinstance(action, str):
        raise TypeError(f"an action is the text the model generated (str), got {type(action).__name__}")
    number = len(episode.turns) + 1
    final = number >= rules.action_limit
    parsed = parse_action(action, rules.protocol)
    # an action that calls a tool (search or open) runs it while the budget allows
    may_act = not final and not (rules.budget == "extra-answer-turn" and number > rules.max_turns)
    if parsed.kind == "search":
        query = parsed.content[: rules.max_query_chars] if may_act else None  # type: ignore[index]
        return StepPlan(parsed, query, final)
    if parsed.kind == "open" and may_act:
        ref, missing = resolve_ref(episode.turns, parsed.content[: rules.max_query_chars])  # type: ignore[index]
        return StepPlan(parsed, None, final, ref, missing)
    return StepPlan(parsed, None, final)


def resolve_ref(turns: Sequence[Turn], ref: str) -> tuple[str | None, str | None]:
    """What an open names: ``(id or URL to open, None)``, or ``(None, why it names nothing)``.

    A number N is the N-th result shown by the latest executed search (an opened page is not a result list, so
    it does not change what N means); its id is what the opener receives — a corpus passage id, or the URL a web
    retriever gives as its results' ids. Any other text is taken as an id or URL itself.
    """
    if not (ref.isascii() and ref.isdigit()):  # "²" is a digit to str.isdigit, not to int()
        return ref, None
    latest = next((t for t in reversed(turns) if t.searched), None)
    if latest is None:
        return None, f"result {ref} named, but no search has shown results yet"
    number = int(ref) if len(ref) <= 9 else 0  # a longer number names no result (and int() of it may refuse)
    if not 1 <= number <= len(latest.shown_ids):
        shown = len(latest.shown_ids)
        return None, f"result {ref} named, but the latest search showed {shown} result{'s' * (shown != 1)}"
    return latest.shown_ids[number - 1], None


def search_options(retriever: Retriever, golds: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Keyword arguments of one search call: the episodes' gold answers for an engine that sets ``wants_golds``
    (the ``distractor`` engine drops the passages holding them), nothing for any other."""
    return {"golds": [list(g) for g in golds]} if has_flag(retriever, WantsGolds) else {}


def run_search(
    retriever: Retriever, queries: Sequence[str], k: int, raise_errors: bool, golds: Sequence[Sequence[str]] = ()
) -> list[Found]:
    """``search`` for ``queries`` in one call, read by :func:`read_search`: per query, its passages or the message
    of its failure. A failure that may be one query's own is narrowed down to the queries that cause it (see
    :func:`isolates`); ``golds`` are the searching episodes' gold answers, handed only to engines that ask."""
    outcome = _call(retriever, queries, k, golds)
    if isolates(outcome, len(queries), raise_errors):
        half = len(queries) // 2
        return run_search(retriever, queries[:half], k, False, golds[:half]) + run_search(
            retriever, queries[half:], k, False, golds[half:]
        )
    return read_search(outcome, queries, retriever, raise_errors)


async def arun_search(
    retriever: Retriever, queries: Sequence[str], k: int, raise_errors: bool, golds: Sequence[Sequence[str]] = ()
) -> list[Found]:
    """:func:`run_search` for event loops: ``asearch`` is awaited where the engine has one (the HTTP client), any
    other engine's ``search`` runs in a worker thread; the halves of a failed call are searched concurrently."""
    outcome = await _acall(retriever, queries, k, golds)
    if isolates(outcome, len(queries), raise_errors):
        half = len(queries) // 2
        first, second = await asyncio.gather(
            arun_search(retriever, queries[:half], k, False, golds[:half]),
            arun_search(retriever, queries[half:], k, False, golds[half:]),
        )
        return first + second
    return read_search(outcome, queries, retriever, raise_errors)


def _call(retriever: Retriever, queries: Sequence[str], k: int, golds: Sequence[Sequence[str]]) -> object:
    try:
        return retriever.search(list(queries), k, **search_options(retriever, golds))
    except Exception as exc:  # noqa: BLE001 - isolated, shown to the episodes or raised, as the caller decides
        return exc


async def _acall(retriever: Retriever, queries: Sequence[str], k: int, golds: Sequence[Sequence[str]]) -> object:
    options = search_options(retriever, golds)
    try:
        if isinstance(retriever, AsyncRetriever):
            return await retriever.asearch(list(queries), k, **options)
        return await asyncio.to_thread(retriever.search, list(queries), k, **options)
    except Exception as exc:  # noqa: BLE001 - as in _call
        return exc


def _failure(outcome: object) -> BaseException | None:
    """The error of a failed call: the exception it raised, or the one a client's marked empty result carries."""
    if isinstance(outcome, BaseException):
        return outcome
    marked = getattr(outcome, "retrieval_error", None)
    return marked if isinstance(marked, BaseException) else None


#: The HTTP clients' failure kinds that say the service is away or refuses everyone, not that a query is bad.
SERVICE_DOWN_KINDS = frozenset({"unreachable", "timeout", "overloaded", "unauthorized"})


def service_down(error: BaseException) -> bool:
    """Whether ``error`` says the whole service cannot answer: ``RetrievalUnavailable`` of a kind in
    :data:`SERVICE_DOWN_KINDS` (the HTTP clients, after their retry window), or Python's ``ConnectionError`` /
    ``TimeoutError`` (what a custom client raises when its backend is away)."""
    if isinstance(error, RetrievalUnavailable):
        return error.kind in SERVICE_DOWN_KINDS
    return isinstance(error, (ConnectionError, TimeoutError))


def isolates(outcome: object, n: int, raise_errors: bool) -> bool:
    """Whether a call's failure is searched again in halves to find the queries that cause it.

    The rule: one query that makes a shared engine raise (or that an HTTP body cannot carry) must not fail the
    other episodes of the batch. So a call of more than one query that failed is split in two and each half
    searched again, recursively, until the failing queries stand alone: ``b`` bad queries among ``n`` cost
    O(b·log n) extra calls, and a batch without failures keeps its single call. A service that is down is not
    searched again query by query — that would turn one retry window (60 s for the HTTP client) into ``n`` —
    so a failure :func:`service_down` recognises fails the whole call at once. Under
    ``on_retrieval_error="raise"`` the first failure is raised as it is.
    """
    if n < 2 or raise_errors:
        return False
    error = _failure(outcome)
    return error is not None and not service_down(error)


def read_search(outcome: object, queries: Sequence[str], retriever: Retriever, raise_errors: bool) -> list[Found]:
    """What ``search`` returned for ``queries`` (or the exception it raised) as, per query, its passages or the
    message its episode sees when the search failed (raised instead when ``raise_errors``).

    What an engine returns is checked against the contract: one list per query, of :class:`Passage` objects
    with ``str`` fields. A breach is a failed search whose message names the engine and the fix — of every
    query when the whole answer has the wrong shape, of one query when only its list is wrong. A client told to
    return empty results on failure (``RemoteRetriever(on_error="empty")``) marks them: the search still failed,
    and is recorded as such, not as a search that found nothing. A failed search does not count as a search.
    """
    error = _failure(outcome)
    if error is None and (not isinstance(outcome, list) or len(outcome) != len(queries)):
        size = len(outcome) if hasattr(outcome, "__len__") else "?"
        error = TypeError(
            f"{type(retriever).__name__}.search returned {type(outcome).__name__} of length {size} for "
            f"{len(queries)} queries; it must return one list per query"
        )
    if error is not None:
        if raise_errors:
            raise error
        return [_message(error)] * len(queries)
    found: list[Found] = []
    for query, passages in zip(queries, outcome):  # type: ignore[call-overload]
        wrong = _wrong_part(passages)
        if wrong is None:
            found.append(passages if isinstance(passages, list) else list(passages))
            continue
        breach = TypeError(
            f"{type(retriever).__name__}.search returned {wrong} for the query {query[:80]!r}; it must return "
            "searchenv.Passage objects (id, title, text as str), one list of them per query"
        )
        if raise_errors:
            raise breach
        found.append(_message(breach))
    return found


def _wrong_part(passages: object) -> str | None:
    """The part of one query's result that breaks the contract, in words; ``None`` when none does."""
    if not isinstance(passages, (list, tuple)):
        return f"a {type(passages).__name__}"
    for p in passages:
        if not isinstance(p, Passage):
            return f"a {type(p).__name__}"
        if not (isinstance(p.id, str) and isinstance(p.title, str) and isinstance(p.text, str)):
            name = next(name for name in ("id", "title", "text") if not isinstance(getattr(p, name), str))
            return f"a Passage whose {name} is {type(getattr(p, name)).__name__}"
        if not (p.stored_contents is None or isinstance(p.stored_contents, str)):
            return f"a Passage whose stored_contents is {type(p.stored_contents).__name__}"
    return None


def open_options(opener: DocumentOpener, questions: Sequence[str]) -> dict[str, Any]:
    """Keyword arguments of one ``open_documents`` call: the opening episodes' questions for an opener that sets
    ``wants_questions`` (a web retriever with a summariser writes each page's note for its question), nothing for
    any other."""
    return {"questions": list(questions)} if has_flag(opener, WantsQuestions) else {}


def run_open(
    opener: DocumentOpener | None, refs: Sequence[str], raise_errors: bool, questions: Sequence[str] = ()
) -> list[Found]:
    """``open_documents`` for ``refs`` in one call, read by :func:`read_open`: per reference, its document or the
    message of its failure. A call that raises is opened again in halves, as a search is (:func:`isolates`);
    ``questions`` are the opening episodes' questions, handed only to openers that ask."""
    outcome = _open_call(opener, refs, questions)
    if opener is not None and isolates(outcome, len(refs), raise_errors):
        half = len(refs) // 2
        return run_open(opener, refs[:half], False, questions[:half]) + run_open(
            opener, refs[half:], False, questions[half:]
        )
    return read_open(outcome, refs, opener, raise_errors)


async def arun_open(
    opener: DocumentOpener | None, refs: Sequence[str], raise_errors: bool, questions: Sequence[str] = ()
) -> list[Found]:
    """:func:`run_open` for event loops: ``aopen_documents`` is awaited where the opener has one, any other
    opener's ``open_documents`` runs in a worker thread."""
    if opener is None:
        return run_open(opener, refs, raise_errors)
    options = open_options(opener, questions)
    try:
        if isinstance(opener, AsyncDocumentOpener):
            outcome: object = await opener.aopen_documents(list(refs), **options)
        else:
            outcome = await asyncio.to_thread(opener.open_documents, list(refs), **options)
    except Exception as exc:  # noqa: BLE001 - as in _call
        outcome = exc
    if isolates(outcome, len(refs), raise_errors):
        half = len(refs) // 2
        first, second = await asyncio.gather(
            arun_open(opener, refs[:half], False, questions[:half]),
            arun_open(opener, refs[half:], False, questions[half:]),
        )
        return first + second
    return read_open(outcome, refs, opener, raise_errors)


def _open_call(opener: DocumentOpener | None, refs: Sequence[str], questions: Sequence[str] = ()) -> object:
    if opener is None:
        return LookupError(
            "this environment cannot open documents: its retriever has no open_documents and no corpus to open "
            "passages from (pass corpus=... or use a retriever that opens pages)"
        )
    try:
        return opener.open_documents(list(refs), **open_options(opener, questions))
    except Exception as exc:  # noqa: BLE001 - as in _call
        return exc


def read_open(outcome: object, refs: Sequence[str], opener: DocumentOpener | None, raise_errors: bool) -> list[Found]:
    """What ``open_documents`` returned for ``refs`` (or raised) as, per reference, its :class:`Document` or the
    message its episode's ``info["open_error"]`` gets.

    The answer is checked against the contract (one entry per reference, each a ``Document`` with ``str`` fields
    or an exception); a breach is a failed open of the reference it concerns. ``raise_errors`` raises a failed
    call and a breach; an exception the opener returns for one reference (an id the corpus lacks, a page that
    cannot be read) is that reference's answer, not the opener's failure, and is never raised.
    """
    name = type(opener).__name__
    error = _failure(outcome)
    if error is None and (not isinstance(outcome, list) or len(outcome) != len(refs)):
        size = len(outcome) if hasattr(outcome, "__len__") else "?"
        error = TypeError(
            f"{name}.open_documents returned {type(outcome).__name__} of length {size} for {len(refs)} references; "
            "it must return one Document or exception per reference"
        )
    if error is not None:
        if raise_errors:
            raise error
        return [_message(error)] * len(refs)
    found: list[Found] = []
    for ref, entry in zip(refs, outcome):  # type: ignore[call-overload]
        if isinstance(entry, Document) and all(isinstance(v, str) for v in (entry.ref, entry.title, entry.text)):
            found.append(entry)
            continue
        if not isinstance(entry, BaseException):
            breach = TypeError(
                f"{name}.open_documents returned a {type(entry).__name__} for {ref[:80]!r}; it must return a "
                "searchenv.Document (ref, title, text as str) or an exception per reference"
            )
            if raise_errors:
                raise breach
            entry = breach
        found.append(_message(entry))
    return found


def _message(error: BaseException) -> str:
    detail = getattr(error, "detail", None)
    return f"{type(error).__name__}: {error}" + (f" ({detail})" if detail else "")


def step_outcome(
    rules: StepRules,
    episode: Episode,
    plan: StepPlan,
    found: Sequence[Passage] | Document | str | None,
    *,
    score: bool = True,
) -> StepOutcome:
    """What the step does to the episode — its new turn, observation, reward and info — not yet applied.

    ``found`` is what :func:`read_search` made of the planned query's search: its passages, or the message of
    the failure (for an open, what :func:`read_open` made of it: the document, or the message); ``None`` when
    the plan runs nothing. ``score=False`` leaves a terminal outcome's reward to :func:`score_outcomes`, so a
    batch scores all the episodes it ends together.
    """
    parsed = plan.parsed
    info: dict[str, Any] = {"action": parsed.kind, "query": None, "passage_ids": [], "dropped_text": parsed.dropped}
    if parsed.reason is not None:
        info["invalid_reason"] = parsed.reason
    if parsed.kind == "search":
        info["query"] = parsed.content[: rules.max_query_chars]  # type: ignore[index]
        info["query_clipped"] = len(parsed.content) > rules.max_query_chars  # type: ignore[arg-type]
    if parsed.kind == "open":
        turn = _open_turn(rules, plan, found, info)
    elif plan.query is None:
        if parsed.kind == "search":
            info["search_skipped"] = "action budget exhausted"
            turn = Turn(parsed, search="skipped")
        else:  # an answer, or the final action of the budget, gets nothing inserted after it
            turn = Turn(parsed, "" if parsed.kind == "answer" or plan.final else rules.invalid_hint)
    elif isinstance(found, str):
        info["retrieval_error"] = found
        turn = Turn(parsed, rules.protocol.format_error(), search="failed", error=found)
    else:
        passages = tuple(found or ())
        shown, clipped = clip_passages(passages, rules.max_information_words)
        info["passage_ids"] = [p.id for p in shown]
        info["information_clipped"] = clipped
        turn = Turn(parsed, rules.protocol.format_passages(shown), "executed", passages, tuple(p.id for p in shown))
    truncated = plan.final and parsed.kind != "answer"
    if parsed.kind == "answer" or truncated:
        rollout = Rollout.of_episode(episode, (*episode.turns, turn))
        outcome = StepOutcome(turn, truncated, None, rollout.facts, info, rollout)
        if score:
            score_outcomes([rules.reward_spec], [outcome])
        return outcome
    return StepOutcome(turn, False, None, None, info)


def score_outcomes(specs: Sequence[Callable[[Rollout], RewardResult]], outcomes: Sequence[StepOutcome]) -> None:
    """Give every terminal outcome its reward: ``specs[i]`` scores ``outcomes[i]``; the one place a finished
    episode is scored, for a single step and for a batch alike.

    Outcomes that share a spec are scored together: a spec with ``score_batch(rollouts)`` (the LLM judge) gets
    them in one call, so a batch's judgements go out concurrently; any other spec is called once per rollout.
    Every reward is computed before any is written, so a spec that raises leaves every outcome unscored.
    """
    groups: dict[int, list[int]] = {}
    for i, outcome in enumerate(outcomes):
        if outcome.rollout is not None and outcome.reward is None:
            groups.setdefault(id(specs[i]), []).append(i)
    scored: list[tuple[int, RewardResult]] = []
    for group in groups.values():
        spec = specs[group[0]]
        rollouts = [outcomes[i].rollout for i in group]
        score_batch = getattr(spec, "score_batch", None)
        results = list(score_batch(rollouts)) if callable(score_batch) else [spec(r) for r in rollouts]  # type: ignore[arg-type]
        if len(results) != len(group):
            raise TypeError(f"{spec!r}.score_batch returned {len(results)} results for {len(group)} rollouts")
        scored += zip(group, results)
    for i, result in scored:
        outcomes[i].reward = result


def _open_turn(rules: StepRules, plan: StepPlan, found: Document | object, info: dict[str, Any]) -> Turn:
    """The turn of an open action: the document cut to ``max_page_words``, a fixed failure block, or nothing
    when the budget skips it; ``info`` gets ``open_ref``, and ``document_ref`` or ``open_error``."""
    parsed, protocol = plan.parsed, rules.protocol
    info["open_ref"] = parsed.content
    if plan.open_missing is not None:
        info["open_error"] = plan.open_missing
        return Turn(parsed, protocol.format_open_error(missing=True), opened="failed", error=plan.open_missing)
    if plan.open_ref is None:
        info["open_skipped"] = "action budget exhausted"
        return Turn(parsed, opened="skipped")
    info["document_ref"] = plan.open_ref
    if not isinstance(found, Document):
        message = found if isinstance(found, str) else "no document was opened"
        info["open_error"] = message
        return Turn(
            parsed,
            protocol.format_open_error(missing=False),
            opened="failed",
            error=message,
            document_ref=plan.open_ref,
        )
    text, clipped = clip_words(found.text, rules.max_page_words)
    info["page_clipped"] = clipped
    shown = Document(found.ref, found.title, text)
    return Turn(parsed, protocol.format_document(shown), opened="executed", document_ref=plan.open_ref)


def apply_outcome(episode: Episode, outcome: StepOutcome) -> None:
    """Write a step's outcome to its episode; a scored step ends it by an answer or by the action budget."""
    episode.turns.append(outcome.turn)
    episode.truncated = outcome.truncated
    if outcome.reward is not None:
        episode.end_reason = "action_budget" if outcome.truncated else "answer"


def clip_words(text: str, max_words: int | None) -> tuple[str, bool]:
    """The clipping rule of everything the environment shows: at most ``max_words`` whitespace-separated words,
    and `` …`` where text was cut; ``(text, clipped)``. ``None`` keeps the text whole."""
    if max_words is None:
        return text, False
    words = text.split()
    if len(words) <= max_words:
        return text, False
    return " ".join(words[:max_words]) + " …", True


def clip_passages(passages: Sequence[Passage], max_words: int | None) -> tuple[list[Passage], bool]:
    """Keep at most ``max_words`` words of passage text in total (the paper's 500-token cap), shared fairly among
    the passages: each is cut by :func:`clip_words` to a common share, and the words a short passage leaves unused
    go to the others. Every passage is shown (a block of two 60-word passages under a 40-word cap shows 20 words of
    each), unless the cap is smaller than the number of passages; a rank-order cap would fill the block with the
    first passage and hide the rest."""
    if max_words is None:
        return list(passages), False
    shares = _fair_shares([len(p.text.split()) for p in passages], max_words)
    kept, clipped = [], False
    for p, share in zip(passages, shares):
        words = len(p.text.split())
        if share <= 0 and words:
            clipped = True
            continue
        if words > share:
            text, _ = clip_words(p.text, share)
            stored = None if p.stored_contents is None else f"{p.stored_title_and_text()[0]}\n{text}"
            p = Passage(p.id, p.title, text, p.score, stored)
            clipped = True
        kept.append(p)
    return kept, clipped


def _fair_shares(lengths: Sequence[int], budget: int) -> list[int]:
    """Words each passage may keep: ``min(length, level)`` for the highest level whose total fits ``budget``
    (water-filling), the budget's last few words going to the earliest-ranked passages still cut."""
    shares = [0] * len(lengths)
    left, open_rows = budget, sorted(range(len(lengths)), key=lambda i: lengths[i])
    while open_rows and left > 0:
        level = left // len(open_rows)
        short = [i for i in open_rows if lengths[i] <= level]
        if not short:  # every passage left is longer than the level: all are cut to it, extras by rank
            for rank, i in enumerate(sorted(open_rows)):
                shares[i] = level + (1 if rank < left - level * len(open_rows) else 0)
            return shares
        for i in short:
            shares[i] = lengths[i]
            left -= lengths[i]
        open_rows = [i for i in open_rows if lengths[i] > level]
    return shares
