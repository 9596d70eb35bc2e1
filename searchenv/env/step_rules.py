"""The rules of one step, shared by ``SearchQAEnv.step`` and the batch steps of :mod:`.stepping`.

A step has three phases, kept apart so that a batch can run each phase for every episode before the next:

1. *Plan* (:func:`plan_step`): read and check the action; nothing changes yet, so misuse raises before any
   episode of a batch moves.
2. *Search* (:func:`run_search`, :func:`read_search`): one engine call for the queries of a (retriever, k);
   a failure becomes the message the searching episodes are shown, or is raised, as the env was told.
3. *Outcome* (:func:`step_outcome`), then *apply* (:func:`apply_outcome`): the new turn, observation, info
   and, on the terminal step, the reward are computed first and only then written to the episode, so a reward
   spec that raises leaves every episode of the batch as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from searchenv.episode.episode import Episode
from searchenv.episode.rollout import RewardResult, Rollout
from searchenv.episode.turns import Facts, Turn
from searchenv.protocol import ParsedAction, parse_action
from searchenv.protocol import Protocol as ActionProtocol
from searchenv.types import Passage, Retriever

__all__ = [
    "StepOutcome",
    "StepPlan",
    "StepResult",
    "StepRules",
    "apply_outcome",
    "clip_passages",
    "plan_step",
    "read_search",
    "run_search",
    "search_options",
    "step_outcome",
]


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
    def invalid_hint(self) -> str: ...
    @property
    def reward_spec(self) -> Callable[[Rollout], RewardResult]: ...


# The step's internal records are slotted dataclasses: built and read at every step, they cost less than a
# NamedTuple, whose fields Python 3.11 reads through an unspecialised descriptor (see transcript.Turn).
@dataclass(slots=True)
class StepPlan:
    """One action read and checked, nothing changed yet: the query to run (if any) and whether the budget ends."""

    parsed: ParsedAction
    query: str | None
    final: bool


@dataclass(slots=True)
class StepOutcome:
    """What a step will do to its episode: the turn to append, the end flag, the reward (terminal step only)."""

    turn: Turn
    truncated: bool
    reward: RewardResult | None
    facts: Facts | None  # the episode's facts after this step, on the terminal step
    info: dict[str, Any]


def plan_step(rules: StepRules, episode: Episode, action: object) -> StepPlan:
    """Read one action without changing anything; raises on misuse (an ended episode, an action not text)."""
    if episode.done:
        raise RuntimeError("the episode has ended; call reset() before step()")
    if not isinstance(action, str):
        raise TypeError(f"an action is the text the model generated (str), got {type(action).__name__}")
    number = len(episode.turns) + 1
    final = number >= rules.action_limit
    parsed = parse_action(action, rules.protocol)
    query = None
    if parsed.kind == "search":
        may_search = not final and not (rules.budget == "extra-answer-turn" and number > rules.max_turns)
        query = parsed.content[: rules.max_query_chars] if may_search else None  # type: ignore[index]
    return StepPlan(parsed, query, final)


def search_options(retriever: Retriever, golds: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Keyword arguments of one search call: the episodes' gold answers for an engine that sets ``wants_golds``
    (the ``distractor`` engine drops the passages holding them), nothing for any other."""
    return {"golds": [list(g) for g in golds]} if getattr(retriever, "wants_golds", False) else {}


def run_search(
    retriever: Retriever, queries: Sequence[str], k: int, raise_errors: bool, golds: Sequence[Sequence[str]] = ()
) -> list[list[Passage]] | str:
    """One ``search`` call, read by :func:`read_search`: the passages per query, or the failure's message.

    ``golds`` are the searching episodes' gold answers, handed only to engines that ask for them."""
    try:
        outcome: object = retriever.search(list(queries), k, **search_options(retriever, golds))
    except Exception as exc:  # noqa: BLE001 - shown to the episodes or raised, as read_search decides
        outcome = exc
    return read_search(outcome, len(queries), retriever, raise_errors)


def read_search(outcome: object, n: int, retriever: Retriever, raise_errors: bool) -> list[list[Passage]] | str:
    """What ``search`` returned for ``n`` queries (or the exception it raised) as passages per query, or as the
    message the searching episodes see when it failed (raised instead when ``raise_errors``).

    A result of the wrong shape is a failure of the engine. A client told to return empty results on failure
    (``RemoteRetriever(on_error="empty")``) marks them: the search still failed, and is recorded as such, not as
    a search that found nothing. A failed search does not count as a search.
    """
    if not isinstance(outcome, BaseException):
        if not isinstance(outcome, list) or len(outcome) != n:
            size = len(outcome) if hasattr(outcome, "__len__") else "?"
            outcome = RuntimeError(
                f"{type(retriever).__name__}.search returned {type(outcome).__name__} of length {size} for {n} "
                "queries; it must return one list per query"
            )
        else:
            marked = getattr(outcome, "retrieval_error", None)
            if marked is None:
                return outcome
            outcome = marked
    assert isinstance(outcome, BaseException)
    if raise_errors:
        raise outcome
    detail = getattr(outcome, "detail", None)
    return f"{type(outcome).__name__}: {outcome}" + (f" ({detail})" if detail else "")


def step_outcome(
    rules: StepRules, episode: Episode, plan: StepPlan, found: Sequence[Passage] | str | None
) -> StepOutcome:
    """What the step does to the episode — its new turn, observation, reward and info — not yet applied.

    ``found`` is what :func:`read_search` made of the planned query's search: its passages, or the message of
    the failure; ``None`` when the plan has no query.
    """
    parsed = plan.parsed
    info: dict[str, Any] = {"action": parsed.kind, "query": None, "passage_ids": [], "dropped_text": parsed.dropped}
    if parsed.reason is not None:
        info["invalid_reason"] = parsed.reason
    if parsed.kind == "search":
        info["query"] = parsed.content[: rules.max_query_chars]  # type: ignore[index]
        info["query_clipped"] = len(parsed.content) > rules.max_query_chars  # type: ignore[arg-type]
    if plan.query is None:
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
        return StepOutcome(turn, truncated, rules.reward_spec(rollout), rollout.facts, info)
    return StepOutcome(turn, False, None, None, info)


def apply_outcome(episode: Episode, outcome: StepOutcome) -> None:
    """Write a step's outcome to its episode; a scored step ends it by an answer or by the action budget."""
    episode.turns.append(outcome.turn)
    episode.truncated = outcome.truncated
    if outcome.reward is not None:
        episode.end_reason = "action_budget" if outcome.truncated else "answer"


def clip_passages(passages: Sequence[Passage], max_words: int | None) -> tuple[list[Passage], bool]:
    """Keep at most ``max_words`` words of passage text in total, in rank order (the paper's 500-token cap)."""
    if max_words is None:
        return list(passages), False
    kept, budget, clipped = [], max_words, False
    for p in passages:
        if budget <= 0:
            clipped = True
            break
        words = p.text.split()
        if len(words) > budget:
            text = " ".join(words[:budget]) + " …"
            stored = None if p.stored_contents is None else f"{p.stored_title_and_text()[0]}\n{text}"
            p = Passage(p.id, p.title, text, p.score, stored)
            clipped = True
        kept.append(p)
        budget -= len(words)
    return kept, clipped
