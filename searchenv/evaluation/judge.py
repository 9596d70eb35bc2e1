"""LLM-as-judge accuracy (R1-Searcher's ACC_L): a model on an OpenAI-compatible endpoint says whether a prediction
answers the question as well as a gold answer does. Off by default; an evaluation metric only, never a reward.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from searchenv.evaluation.policies import Context, EndpointPolicy, EvalSampling

__all__ = ["LLMJudge", "judge_prompt"]


def judge_prompt(question: str, golds: Sequence[str], prediction: str) -> str:
    gold_text = " | ".join(golds)
    return (
        "You grade answers to questions. Reply with one word: yes if the predicted answer means the same as one of "
        "the gold answers, no otherwise.\n"
        f"Question: {question}\nGold answers: {gold_text}\nPredicted answer: {prediction}\nCorrect (yes or no):"
    )


class LLMJudge:
    """Grades records in place: ``record["judge"]`` is 1.0 (yes), 0.0 (no, or no prediction) or None (unclear reply)."""

    def __init__(self, url: str, model: str, mode: str = "chat", **endpoint_options: Any):
        sampling = EvalSampling(temperature=0.0, max_new_tokens=4)
        self.endpoint = EndpointPolicy(url, model, sampling, mode=mode, name=f"judge:{model}", **endpoint_options)

    def __call__(self, records: list[dict[str, Any]]) -> None:
        asked = [r for r in records if r.get("prediction")]
        for r in records:
            r["judge"] = 0.0
        contexts = [Context(judge_prompt(r["question"], r["golden_answers"], r["prediction"]), "") for r in asked]
        for record, generation in zip(asked, self.endpoint.generate(contexts, ["\n"]) if asked else []):
            words = generation.text.strip().lower().split()
            verdict = words[0].strip(".,!:;\"'") if words else ""
            record["judge"] = 1.0 if verdict == "yes" else 0.0 if verdict == "no" else None
