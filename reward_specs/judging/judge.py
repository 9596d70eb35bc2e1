"""The judge: asks a model whether predictions answer their questions, many at once, and says which it could not.

A verdict is 1.0 (yes), 0.0 (no) or ``None``: the model's reply was neither yes nor no, or the model could not be
asked (the endpoint was down, hung or refused, after its retries; a replay missed). What to do with ``None`` is
the caller's rule — the reward falls back to exact match, counts it and says why, the evaluation leaves the
episode out of ACC_L. An empty or missing prediction is 0.0 without asking. Verdicts go through an answer store
when one is given (``cache=PATH``), keyed by the prompt (question, golds, prediction, template) and the model.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import NamedTuple

from searchenv.answer_store import AnswerStore
from searchenv.llm.blocking import run_coroutine
from searchenv.llm.prompter import Prompter, PromptFailure
from searchenv.reward_specs.judging.prompt import ACC_L_PROMPT, check_prompt, judge_prompt, parse_verdict
from searchenv.sampling import SamplingConfig

__all__ = ["Case", "Judge", "Verdict"]

log = logging.getLogger("searchenv.judge")


class Case(NamedTuple):
    """One thing to judge."""

    question: str
    golds: tuple[str, ...]
    prediction: str | None


class Verdict(NamedTuple):
    """The judge's verdict (``None``: none) and, without one, why: ``why_none`` in words, ``kind`` in one word
    (``unclear`` for a reply that was neither yes nor no; otherwise the failure's kind, e.g. ``unreachable``,
    ``timeout``, ``refused``, ``not_recorded``)."""

    value: float | None
    why_none: str = ""
    kind: str = ""


class Judge:
    """A model judging predictions against gold answers: an OpenAI-compatible endpoint, or a local model.

    Args:
        url: base URL of an OpenAI-compatible server (``None``: ``model`` is a local checkpoint folder or alias).
        model: the served model's name, or the local model.
        prompt: the template (see :mod:`searchenv.reward_specs.judging.prompt`); R1-Searcher's ACC_L by default.
        mode: the endpoint's API, ``"chat"`` or ``"completions"``.
        timeout / retries / concurrency: per request attempt, how often a failed one is retried (within a window
            of ``(retries + 1) * timeout`` seconds), how many run at once.
        device: the local model's torch device.
        store: the answer store verdicts are recorded in and replayed from.
    """

    def __init__(
        self,
        url: str | None,
        model: str,
        *,
        prompt: str = ACC_L_PROMPT,
        mode: str = "chat",
        timeout: float = 15.0,
        retries: int = 1,
        concurrency: int = 8,
        device: str = "",
        store: AnswerStore | None = None,
    ):
        self.prompt = check_prompt(prompt)
        sampling = SamplingConfig.greedy(max_new_tokens=4)
        self.prompter = Prompter(
            url,
            model,
            sampling,
            mode=mode,
            timeout=timeout,
            retries=retries,
            retry_window=(retries + 1) * timeout,
            concurrency=concurrency,
            device=device,
            store=store,
            store_kind="judge",
        )
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_lock": None}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def check(self, timeout: float | None = None) -> None:
        """Fail now (``ConnectionError`` naming the cause and the fix) when the endpoint cannot answer."""
        self.prompter.check(timeout)

    def _prompt(self, case: Case) -> str:
        return judge_prompt(case.question, case.golds, case.prediction or "", self.prompt)

    def verdicts(self, cases: Sequence[Case]) -> list[Verdict]:
        """One :class:`Verdict` per case, in order; the cases that need the model are asked in one concurrent
        batch. From a coroutine, await :meth:`averdicts` instead (this call blocks its thread)."""
        return run_coroutine(lambda: self._verdicts_then_close(cases))

    async def averdicts(self, cases: Sequence[Case]) -> list[Verdict]:
        """:meth:`verdicts` on the running event loop: the requests are awaited, the loop keeps running."""
        asked = [i for i, case in enumerate(cases) if case.prediction and case.prediction.strip()]
        prompts = [self._prompt(cases[i]) for i in asked]
        out = [Verdict(0.0)] * len(cases)
        for i, reply in zip(asked, await self.prompter.aask(prompts, ["\n"]) if prompts else []):
            if isinstance(reply, PromptFailure):
                out[i] = Verdict(None, reply.reason, reply.kind)
                self._warn(reply)
                continue
            value = parse_verdict(reply)
            if value is None:
                out[i] = Verdict(None, f"unclear reply {reply.strip()[:60]!r}", "unclear")
            else:
                out[i] = Verdict(value)
        return out

    async def _verdicts_then_close(self, cases: Sequence[Case]) -> list[Verdict]:
        try:
            return await self.averdicts(cases)
        finally:
            if self.prompter.client is not None:
                await self.prompter.client.aclose()

    def _warn(self, failure: PromptFailure) -> None:
        """One warning per kind of failure (then silence: every fallback is counted in the reward's parts)."""
        with self._lock:
            if failure.kind in self._warned:
                return
            self._warned.add(failure.kind)
        log.warning(
            "the judge %s gave no verdict (%s: %s); such episodes fall back to the reward's metric and are "
            "counted in judge_fallback (this warning is shown once per kind of failure)",
            self.prompter.identity,
            failure.kind,
            failure.reason,
        )
