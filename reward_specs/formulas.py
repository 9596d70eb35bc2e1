"""The reward formulas a spec file can name, and the measurements every one of them starts from.

Formulas (the study's eq. 3/4, Search-R1, R1-Searcher and R-Search; every one reads the prediction the episode
accepted — the answer tag of the final action — never text the environment inserted or the model wrote after it):

========================  ===========================================================================  ===============
formula                   reward                                                                        range
========================  ===========================================================================  ===============
``outcome``               metric (``em`` / ``f1`` / ``cem``) — Search-R1 eq. 4                          [0, 1]
``format``                1 correct+well-formed, 1−λf correct+malformed, λf wrong+well-formed, else 0  [0, 1]
                          (study eq. 3; "correct" = metric ``em`` or ``cem`` is 1)
``format_retrieval``      as ``format``, plus λr when wrong, well-formed and a gold answer occurs in    [0, 1]
                          some retrieved passage (study eq. 4)
``r1_searcher_stage1``    0.5·[≥1 search] + 0.5·[well-formed] (R1-Searcher stage 1)                    [0, 1]
``r1_searcher_stage2``    metric (F1) + (0 if well-formed else −2) (R1-Searcher stage 2)              [−2, 1]
``r_search``              answer F1 + evidence F1 + γe·[one evidence block, or no search] +             [0, 2+γe+γa]
                          γa·[one answer block] (R-Search)
``judge``                 as ``format_retrieval`` with "correct" decided by an LLM judge (ACC_L); λf = λr [0, 1]
                          = 0 by default, i.e. the verdict; EM when the judge gives none (counted)
``hop_credit``            1 when correct, else λh·(hops whose answer was shown / hops) — per-hop       [0, 1]
                          credit (PiCA, StepSearch); needs the question's hop answers (world, MuSiQue)
========================  ===========================================================================  ===============

A spec file (read by :mod:`searchenv.reward_specs.loader`) names one of them with its keys. Every result carries
the same parts for dashboards: ``answer_score`` (the metric in use; F1 for ``r1_searcher_stage1``, which does not
reward the answer), ``em``, ``f1``, ``cem``, ``format_ok``, ``retrieval_hit``, ``num_searches``, and for R-Search
``evidence_score``, ``evidence_format_ok``, ``answer_format_ok``, and for the judge ``judge`` (the verdict used)
and ``judge_fallback`` (1.0 when the judge gave none and ``metric`` decided), and for ``hop_credit`` ``hops``,
``hops_found`` and ``hop_credit`` (the λh·found/hops a wrong answer earns).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from searchenv.answer_store import AnswerStore
from searchenv.checks import choice, number
from searchenv.episode.reward_contract import RewardResult, Rollout
from searchenv.imports import load_attr
from searchenv.reward_specs.blocks import block_content
from searchenv.reward_specs.format_check import check_format, check_turns, single_block
from searchenv.reward_specs.hops import HOP_KEYS, hop_answers, missing_hops_error
from searchenv.reward_specs.judging.judge import Case, Judge, Verdict
from searchenv.reward_specs.judging.prompt import ACC_L_PROMPT
from searchenv.reward_specs.metrics import (
    answer_in_passages,
    answer_scores,
    cover_exact_match,
    exact_match,
    f1_score,
)
from searchenv.types import QAExample

__all__ = ["FORMULAS", "METRICS", "Answerer", "RewardSpecError"]


class RewardSpecError(ValueError):
    """A reward spec that cannot be built: the message names the problem and the valid choices."""


Answerer = Callable[[str, str], str]
METRICS: dict[str, Callable[[str | None, tuple[str, ...]], float]] = {
    "em": exact_match,
    "f1": f1_score,
    "cem": cover_exact_match,
}
_BINARY_METRICS = ("em", "cem")


# -- measurements every formula starts from --------------------------------------------------------------------
PART_NAMES: tuple[str, ...] = ("answer_score", "em", "f1", "cem", "format_ok", "retrieval_hit", "num_searches")


class _Measured:
    """The answer scores, format verdict and retrieval hit of one rollout for one spec's metric: what every formula
    starts from and what :meth:`parts` reports (every formula reports them all, so all are computed here once)."""

    def __init__(self, rollout: Rollout, metric: str):
        record, golds, protocol = rollout.facts, rollout.golden_answers, rollout.protocol
        self.scores = answer_scores(record.prediction, golds)  # em, f1, cem
        self.score = self.scores[metric]  # the spec's answer metric
        self.num_searches = record.num_searches
        if protocol.answer_mode == "tag":
            self.format_ok = check_format(record.response, protocol).ok
        else:
            self.format_ok = check_turns(record.turns).ok
        # The text of every passage (or page) shown, as shown (after the word cap) — never the labels the
        # environment writes around passages (``Doc 1(Title: …)``), which would pay golds like ``1`` or ``Doc``
        # after any search; a gold answer in it is a retrieval hit.
        self.shown_contents = tuple(piece for body in record.shown_texts for piece in protocol.shown_contents(body))
        self.retrieval_hit = answer_in_passages(golds, self.shown_contents)

    def parts(self, **known: float) -> dict[str, float]:
        """The dashboard parts: :data:`PART_NAMES`, then the ``known`` ones a formula computed already."""
        return {
            "answer_score": self.score,
            **self.scores,
            "format_ok": float(self.format_ok),
            "retrieval_hit": float(self.retrieval_hit),
            "num_searches": float(self.num_searches),
            **known,
        }


# -- parameter checks ---------------------------------------------------------------------------------------------
def _number(formula: str, key: str, value: Any, low: float, high: float, *, high_open: bool = False) -> float:
    return number(value, f"{formula}: {key}", low, high, high_open=high_open, error=RewardSpecError)


def _choice(formula: str, key: str, value: Any, choices: tuple[str, ...]) -> str:
    return choice(value, f"{formula}: {key}", choices, error=RewardSpecError)


# -- formulas --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Formula:
    """Shared shape of a formula: its name, a description, and ``__call__`` from rollout to result."""

    formula: ClassVar[str]
    #: Whether the reward depends on what was searched and retrieved (the text path credits neither without the
    #: environment's spans or ``trust_transcript``).
    reads_retrieval: ClassVar[bool] = False
    name: str = ""
    description: str = ""

    @property
    def reward_range(self) -> tuple[float, float]:
        """Smallest and largest reward this spec can return."""
        raise NotImplementedError

    def __call__(self, rollout: Rollout) -> RewardResult:
        raise NotImplementedError


@dataclass(frozen=True)
class OutcomeReward(_Formula):
    """Search-R1's outcome-only reward: the answer metric, nothing else."""

    formula: ClassVar[str] = "outcome"
    metric: str = "em"

    def __post_init__(self) -> None:
        _choice(self.formula, "metric", self.metric, tuple(METRICS))

    @property
    def reward_range(self) -> tuple[float, float]:
        return (0.0, 1.0)

    def __call__(self, rollout: Rollout) -> RewardResult:
        measured = _Measured(rollout, self.metric)
        return RewardResult(measured.score, measured.parts())


@dataclass(frozen=True)
class FormatReward(_Formula):
    """The study's eq. 3: a format bonus λf for wrong but well-formed answers, a λf penalty on malformed ones."""

    formula: ClassVar[str] = "format"
    metric: str = "em"
    lambda_f: float = 0.2

    def __post_init__(self) -> None:
        _choice(self.formula, "metric", self.metric, _BINARY_METRICS)
        _number(self.formula, "lambda_f", self.lambda_f, 0.0, 1.0, high_open=True)

    @property
    def reward_range(self) -> tuple[float, float]:
        return (0.0, 1.0)

    def _bonus(self, measured: _Measured) -> float:
        """Extra reward for a wrong, well-formed answer on top of λf (none in eq. 3)."""
        return 0.0

    def __call__(self, rollout: Rollout) -> RewardResult:
        measured = _Measured(rollout, self.metric)
        return self._result(measured, measured.score == 1.0)

    def _result(self, measured: _Measured, correct: bool, **verdict_parts: float) -> RewardResult:
        """Eq. 3 (and 4, through :meth:`_bonus`) once correctness is decided; ``verdict_parts`` say who decided."""
        if correct:
            reward = 1.0 if measured.format_ok else 1.0 - self.lambda_f
        elif measured.format_ok:
            reward = self.lambda_f + self._bonus(measured)
        else:
            reward = 0.0
        return RewardResult(reward, measured.parts(**verdict_parts))


@dataclass(frozen=True)
class FormatRetrievalReward(FormatReward):
    """The study's eq. 4: eq. 3 plus λr when the answer is wrong, the format right and a gold answer retrieved.

    λf + λr must stay below 1 so that no wrong answer earns as much as a correct one.
    """

    formula: ClassVar[str] = "format_retrieval"
    reads_retrieval: ClassVar[bool] = True
    lambda_r: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        _number(self.formula, "lambda_r", self.lambda_r, 0.0, 1.0, high_open=True)
        if self.lambda_f + self.lambda_r >= 1.0:
            raise RewardSpecError(
                f"{self.formula}: lambda_f + lambda_r must be below 1 (a wrong answer would earn as much as a "
                f"correct one), got {self.lambda_f} + {self.lambda_r}"
            )

    def _bonus(self, measured: _Measured) -> float:
        return self.lambda_r if measured.retrieval_hit else 0.0


@dataclass(frozen=True)
class R1SearcherStage1(_Formula):
    """R1-Searcher stage 1: learn to call retrieval and keep the format; the answer is not rewarded yet."""

    formula: ClassVar[str] = "r1_searcher_stage1"
    reads_retrieval: ClassVar[bool] = True
    retrieval_reward: float = 0.5
    format_reward: float = 0.5

    def __post_init__(self) -> None:
        _number(self.formula, "retrieval_reward", self.retrieval_reward, 0.0, 1.0)
        _number(self.formula, "format_reward", self.format_reward, 0.0, 1.0)

    @property
    def reward_range(self) -> tuple[float, float]:
        return (0.0, self.retrieval_reward + self.format_reward)

    def __call__(self, rollout: Rollout) -> RewardResult:
        measured = _Measured(rollout, "f1")
        reward = self.retrieval_reward * (measured.num_searches >= 1) + self.format_reward * measured.format_ok
        return RewardResult(reward, measured.parts())


@dataclass(frozen=True)
class R1SearcherStage2(_Formula):
    """R1-Searcher stage 2: the answer metric (F1 in the paper) minus a penalty when the format is wrong."""

    formula: ClassVar[str] = "r1_searcher_stage2"
    metric: str = "f1"
    format_penalty: float = 2.0

    def __post_init__(self) -> None:
        _choice(self.formula, "metric", self.metric, tuple(METRICS))
        _number(self.formula, "format_penalty", self.format_penalty, 0.0, 10.0)

    @property
    def reward_range(self) -> tuple[float, float]:
        return (-self.format_penalty, 1.0)

    def __call__(self, rollout: Rollout) -> RewardResult:
        measured = _Measured(rollout, self.metric)
        reward = measured.score - (0.0 if measured.format_ok else self.format_penalty)
        return RewardResult(reward, measured.parts())


def _resolve_answerer(value: Any, options: Mapping[str, Any] | None) -> Answerer:
    """Turn the spec's ``answerer`` ("module:attr" or a callable) into a callable, instantiating classes."""
    builtins = "'searchenv.reward_specs.answerers:lexical_overlap' (CPU baseline) or "
    builtins += "'searchenv.reward_specs.answerers:HFAnswerer' with answerer_options {model: /local/path}"
    if value is None:
        raise RewardSpecError(
            "r_search: no 'answerer' configured; the evidence reward needs one (it is never silently 0). "
            f"Set answerer: 'module:attr' naming a callable (question, evidence) -> answer, e.g. {builtins}; "
            "in Python: load_reward('r-search', answerer=my_callable)"
        )
    target = value
    if isinstance(value, str):
        try:
            target = load_attr(value, "r_search: answerer")
        except (ValueError, ImportError) as exc:
            raise RewardSpecError(f"{exc}; e.g. {builtins}") from exc
    if isinstance(target, type):
        target = target(**dict(options or {}))
    elif options:
        raise RewardSpecError("r_search: answerer_options only apply when the answerer names a class")
    if not callable(target):
        raise RewardSpecError(f"r_search: answerer {value!r} is not callable (needs (question, evidence) -> answer)")
    return target


@dataclass(frozen=True)
class RSearchReward(_Formula):
    """R-Search: answer F1 + evidence F1 (judged by a frozen answerer) + format rewards γe and γa.

    The evidence is the content of the last evidence block the model wrote; without one the evidence
    score is 0 (there is nothing to judge). An answer cached in ``rollout.extras["evidence_answer"]`` is
    used instead of calling the answerer, so batch pipelines can judge all evidence at once beforehand.
    An error inside the answerer propagates: a broken judge must not turn into silent zero rewards.
    Needs a protocol with evidence tags (``r-search``).
    """

    formula: ClassVar[str] = "r_search"
    reads_retrieval: ClassVar[bool] = True
    metric: str = "f1"
    gamma_e: float = 0.2
    gamma_a: float = 0.2
    answerer: Any = None
    answerer_options: Mapping[str, Any] | None = None
    _answer_fn: Answerer = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _choice(self.formula, "metric", self.metric, tuple(METRICS))
        _number(self.formula, "gamma_e", self.gamma_e, 0.0, 1.0)
        _number(self.formula, "gamma_a", self.gamma_a, 0.0, 1.0)
        object.__setattr__(self, "_answer_fn", _resolve_answerer(self.answerer, self.answerer_options))

    @property
    def reward_range(self) -> tuple[float, float]:
        return (0.0, 2.0 + self.gamma_e + self.gamma_a)

    def __call__(self, rollout: Rollout) -> RewardResult:
        tags = rollout.protocol.evidence_tags
        if tags is None:
            raise RewardSpecError(
                f"r_search reward needs a protocol with evidence tags (e.g. 'r-search'); "
                f"rollout uses {rollout.protocol.name!r}"
            )
        measured = _Measured(rollout, self.metric)
        evidence = block_content(rollout.model_text, tags)
        if "evidence_answer" in rollout.extras:
            evidence_answer = rollout.extras["evidence_answer"]
        elif evidence:
            evidence_answer = self._answer_fn(rollout.question, evidence)
        else:
            evidence_answer = None
        evidence_score = f1_score(evidence_answer, rollout.golden_answers)
        evidence_ok = rollout.num_searches == 0 or single_block(rollout.model_text, tags, rollout.protocol).ok
        answer_ok = single_block(rollout.model_text, rollout.protocol.answer_tags, rollout.protocol).ok
        answer_score = measured.score
        reward = answer_score + evidence_score + self.gamma_e * evidence_ok + self.gamma_a * answer_ok
        parts = measured.parts(
            evidence_score=evidence_score,
            evidence_format_ok=float(evidence_ok),
            answer_format_ok=float(answer_ok),
        )
        return RewardResult(reward, parts)


@dataclass(frozen=True)
class JudgeReward(FormatRetrievalReward):
    """An LLM judge decides correctness (R1-Searcher's ACC_L prompt by default), composable with the study's
    format and retrieval terms: with ``lambda_f = lambda_r = 0`` (the defaults) the reward is the verdict itself.

    The judge is an OpenAI-compatible endpoint (``url`` + ``model``) or a local model (``model`` alone: a
    checkpoint folder or a packaged alias). An endpoint is checked when the reward is built (one one-token request
    within ``timeout``; ``check_on_start=False`` skips it, and a ``replay`` never calls it). When the judge gives
    no verdict — the endpoint failed after ``retries`` retries of ``timeout`` seconds each, the reply was neither
    yes nor no, or a replay missed — correctness falls back to ``metric`` (``em`` or ``cem``), the part
    ``judge_fallback`` is 1.0 and the result's note ``judge_fallback`` (``info["reward_notes"]``) says why; the
    first fallback of each kind is logged as a warning. ``judge`` is the verdict used (the fallback's when there
    was none). :meth:`score_batch` judges a batch in one concurrent call and :meth:`ascore_batch` awaits it on the
    caller's event loop. ``cache=PATH, cache_mode="record" | "replay" | "cached"`` records verdicts in an
    :class:`~searchenv.answer_store.AnswerStore`, so a judged run replays with the endpoint down.
    """

    formula: ClassVar[str] = "judge"
    lambda_f: float = 0.0
    lambda_r: float = 0.0
    url: str | None = None
    model: str | None = None
    prompt: str = ACC_L_PROMPT
    mode: str = "chat"
    timeout: float = 15.0
    retries: int = 1
    concurrency: int = 8
    device: str = ""
    cache: str | None = None
    cache_mode: str | None = None
    check_on_start: bool = True
    _judge: Judge = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        _choice(self.formula, "mode", self.mode, ("chat", "completions"))
        _number(self.formula, "timeout", self.timeout, 0.001, 86400.0)
        _number(self.formula, "retries", self.retries, 0, 100)
        _number(self.formula, "concurrency", self.concurrency, 1, 4096)
        if not isinstance(self.check_on_start, bool):
            raise RewardSpecError(f"{self.formula}: check_on_start must be true or false, got {self.check_on_start!r}")
        try:
            store = AnswerStore(self.cache, self.cache_mode) if self.cache is not None or self.cache_mode else None
            judge = Judge(
                self.url,
                self.model,  # type: ignore[arg-type]  # checked by Judge
                prompt=self.prompt,
                mode=self.mode,
                timeout=float(self.timeout),
                retries=int(self.retries),
                concurrency=int(self.concurrency),
                device=self.device,
                store=store,
            )
        except ValueError as exc:
            raise RewardSpecError(f"{self.formula}: {exc}") from exc
        if self.check_on_start and self.url is not None and self.cache_mode != "replay":
            try:
                judge.check()
            except ConnectionError as exc:
                raise ConnectionError(
                    f"{self.formula}: {exc} (or pass check_on_start=false for a judge started later)"
                ) from None
        object.__setattr__(self, "_judge", judge)

    @property
    def reads_retrieval(self) -> bool:  # type: ignore[override]
        """Only the retrieval term reads what was retrieved."""
        return self.lambda_r > 0

    def __call__(self, rollout: Rollout) -> RewardResult:
        return self.score_batch([rollout])[0]

    def score_batch(self, rollouts: Sequence[Rollout]) -> list[RewardResult]:
        """Every rollout's result, the judge asked once for the whole batch (concurrently) instead of one by one.
        From a coroutine, await :meth:`ascore_batch` instead (this call blocks its thread)."""
        return self._results(rollouts, self._judge.verdicts(self._cases(rollouts)))

    async def ascore_batch(self, rollouts: Sequence[Rollout]) -> list[RewardResult]:
        """:meth:`score_batch` awaited on the running event loop: the loop keeps running while the judge answers."""
        return self._results(rollouts, await self._judge.averdicts(self._cases(rollouts)))

    @staticmethod
    def _cases(rollouts: Sequence[Rollout]) -> list[Case]:
        return [Case(r.question, r.golden_answers, r.prediction) for r in rollouts]

    def _results(self, rollouts: Sequence[Rollout], verdicts: Sequence[Verdict]) -> list[RewardResult]:
        results = []
        for rollout, verdict in zip(rollouts, verdicts):
            measured = _Measured(rollout, self.metric)
            value = measured.score if verdict.value is None else verdict.value
            fallback = float(verdict.value is None)
            result = self._result(measured, value == 1.0, judge=float(value), judge_fallback=fallback)
            if verdict.value is None:
                result = result._replace(notes={"judge_fallback": f"{verdict.kind}: {verdict.why_none}"})
            results.append(result)
        return results


@dataclass(frozen=True)
class HopCreditReward(_Formula):
    """Per-hop credit (after PiCA and StepSearch): a wrong answer still earns λh × the share of the question's hops
    whose answer appeared in a passage the policy was shown; a correct one earns 1.

    Outcome-only rewards give a multi-hop episode that found two of three hops the same 0 as one that never
    searched, so a group of such episodes carries no signal. The credit is capped at λh < 1: no amount of searching
    earns what the right answer earns. The hop answers come from the question's metadata
    (:func:`~searchenv.reward_specs.hops.hop_answers`: the world's ``hop_answers``, MuSiQue's decomposition); an
    environment refuses a dataset without them when it is built or reset (:meth:`check_example`).
    """

    formula: ClassVar[str] = "hop_credit"
    reads_retrieval: ClassVar[bool] = True
    metric: str = "em"
    lambda_h: float = 0.5

    def __post_init__(self) -> None:
        _choice(self.formula, "metric", self.metric, _BINARY_METRICS)
        _number(self.formula, "lambda_h", self.lambda_h, 0.0, 1.0, high_open=True)

    @property
    def reward_range(self) -> tuple[float, float]:
        return (0.0, 1.0)

    def check_example(self, example: QAExample) -> None:
        """Refuse a question this reward cannot score (no hop answers), naming it, its dataset and the choices."""
        if hop_answers(example.metadata) is None:
            raise RewardSpecError(missing_hops_error(self.name or self.formula, example.id, example.data_source))

    def __call__(self, rollout: Rollout) -> RewardResult:
        hops = hop_answers(rollout.metadata)
        if hops is None:
            raise RewardSpecError(
                f"reward {self.name or self.formula!r} needs the question's intermediate answers in rollout.metadata "
                f"({' or '.join(HOP_KEYS)}); the text paths take them as Rollout.from_text(..., "
                "metadata=example.metadata)"
            )
        measured = _Measured(rollout, self.metric)
        found = sum(answer_in_passages((answer,), measured.shown_contents) for answer in hops)
        credit = self.lambda_h * found / len(hops)
        reward = 1.0 if measured.score == 1.0 else credit
        return RewardResult(reward, measured.parts(hops=float(len(hops)), hops_found=float(found), hop_credit=credit))


FORMULAS: dict[str, type[_Formula]] = {
    cls.formula: cls
    for cls in (
        OutcomeReward,
        FormatReward,
        FormatRetrievalReward,
        R1SearcherStage1,
        R1SearcherStage2,
        RSearchReward,
        JudgeReward,
        HopCreditReward,
    )
}
