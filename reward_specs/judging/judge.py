"""The judge: asks a model whether predictions answer their questions, many at once, and says which it could not.

A verdict is 1.0 (yes), 0.0 (no) or ``None``: the model's reply was neither yes nor no, or the model could not be
asked (the endpoint was down or timed out after its retries). What to do with ``None`` is the caller's rule —
the reward falls back to exact match and counts it, the evaluation leaves the episode out of ACC_L. An empty or
missing prediction is 0.0 without asking. Answers are cached by the prompt, which holds the question, the golds,
the prediction and the template, for this judge's model (see :class:`~searchenv.evaluation.prompter.Prompter`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from searchenv.evaluation.policies import EvalSampling
from searchenv.evaluation.prompter import Prompter
from searchenv.reward_specs.judging.prompt import ACC_L_PROMPT, check_prompt, judge_prompt, parse_verdict

__all__ = ["Case", "Judge", "Verdict"]


class Case(NamedTuple):
    """One thing to judge."""

    question: str
    golds: tuple[str, ...]
    prediction: str | None


class Verdict(NamedTuple):
    """The judge's verdict (``None``: none) and, without one, why (an unclear reply, or the failure)."""

    value: float | None
    why_none: str = ""


class Judge:
    """A model judging predictions against gold answers: an OpenAI-compatible endpoint, or a local model.

    Args:
        url: base URL of an OpenAI-compatible server (``None``: ``model`` is a local checkpoint folder or alias).
        model: the served model's name, or the local model.
        prompt: the template (see :mod:`searchenv.reward_specs.judging.prompt`); R1-Searcher's ACC_L by default.
        mode: the endpoint's API, ``"chat"`` or ``"completions"``.
        timeout / retries / concurrency: per request, how often a failed one is retried, how many run at once.
        device: the local model's torch device.
    """

    def __init__(
        self,
        url: str | None,
        model: str,
        *,
        prompt: str = ACC_L_PROMPT,
        mode: str = "chat",
        timeout: float = 60.0,
        retries: int = 2,
        concurrency: int = 8,
        device: str = "",
    ):
        self.prompt = check_prompt(prompt)
        sampling = EvalSampling(temperature=0.0, max_new_tokens=4)
        self.prompter = Prompter(
            url,
            model,
            sampling,
            mode=mode,
            timeout=timeout,
            retries=retries,
            concurrency=concurrency,
            device=device,
        )

    def check(self) -> None:
        """Fail now, naming the cause, when the endpoint cannot be reached."""
        self.prompter.check()

    def _prompt(self, case: Case) -> str:
        return judge_prompt(case.question, case.golds, case.prediction or "", self.prompt)

    def verdicts(self, cases: Sequence[Case]) -> list[Verdict]:
        """One :class:`Verdict` per case, in order; the cases that need the model are asked in one concurrent batch."""
        asked = [i for i, case in enumerate(cases) if case.prediction and case.prediction.strip()]
        prompts = [self._prompt(cases[i]) for i in asked]
        out = [Verdict(0.0)] * len(cases)
        for i, reply in zip(asked, self.prompter.ask(prompts, ["\n"]) if prompts else []):
            if isinstance(reply, str):
                value = parse_verdict(reply)
                out[i] = Verdict(value, "" if value is not None else f"unclear reply {reply.strip()[:60]!r}")
            else:
                out[i] = Verdict(None, reply.reason)
        return out
