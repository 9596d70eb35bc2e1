"""LLM-as-judge accuracy (R1-Searcher's ACC_L) for ``searchenv eval``: the same judge as the ``judge`` reward spec
(:mod:`searchenv.reward_specs.judging`: one prompt, one verdict rule, one endpoint call), off by default.
"""

from __future__ import annotations

from typing import Any

from searchenv.evaluation.policies import PolicyError
from searchenv.reward_specs.judging.judge import Case, Judge

__all__ = ["JudgedAccuracy"]


class JudgedAccuracy:
    """Grades records in place: ``record["judge"]`` is 1.0 (yes), 0.0 (no, or no prediction) or None (an unclear
    reply, or the judge could not be asked): an episode the judge did not grade is left out of ACC_L, never
    counted as wrong."""

    def __init__(self, url: str, model: str, mode: str = "chat", **endpoint_options: Any):
        self.judge = Judge(url, model, mode=mode, **endpoint_options)

    def check(self) -> None:
        """Fail now (:class:`~searchenv.evaluation.policies.PolicyError`, naming the cause and the fix) when the
        judge's endpoint cannot answer."""
        try:
            self.judge.check()
        except ConnectionError as exc:
            raise PolicyError(f"--judge-url: {exc}") from None

    def __call__(self, records: list[dict[str, Any]]) -> None:
        cases = [Case(r["question"], tuple(r["golden_answers"]), r.get("prediction")) for r in records]
        for record, verdict in zip(records, self.judge.verdicts(cases)):
            record["judge"] = verdict.value
