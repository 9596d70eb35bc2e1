"""The judge's prompt and the reading of its reply: one template, one rule for what counts as yes or no.

The default is R1-Searcher's ACC_L setting: a model is shown the question, the gold answers and the prediction
and says whether the prediction means the same as a gold answer. A spec can give its own ``prompt``; it must
contain ``{question}``, ``{golds}`` and ``{prediction}`` and ask for a yes/no reply.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ACC_L_PROMPT", "check_prompt", "judge_prompt", "parse_verdict"]

ACC_L_PROMPT = (
    "You grade answers to questions. Reply with one word: yes if the predicted answer means the same as one of "
    "the gold answers, no otherwise.\n"
    "Question: {question}\nGold answers: {golds}\nPredicted answer: {prediction}\nCorrect (yes or no):"
)
_FIELDS = ("{question}", "{golds}", "{prediction}")


def check_prompt(template: object) -> str:
    """``template`` when it is a string with the three fields; ``ValueError`` naming the missing ones otherwise."""
    if not isinstance(template, str):
        raise ValueError(f"judge prompt must be a string, got {template!r}")
    missing = [f for f in _FIELDS if f not in template]
    if missing:
        raise ValueError(f"judge prompt must contain {', '.join(_FIELDS)}; missing {', '.join(missing)}")
    return template


def judge_prompt(question: str, golds: Sequence[str], prediction: str, template: str = ACC_L_PROMPT) -> str:
    """The prompt for one judgement (golds joined with `` | ``)."""
    return template.format(question=question, golds=" | ".join(golds), prediction=prediction)


def parse_verdict(reply: str) -> float | None:
    """1.0 when the reply's first word is yes, 0.0 when it is no, ``None`` when it is neither (an unclear reply)."""
    words = reply.strip().lower().split()
    verdict = words[0].strip(".,!:;\"'*") if words else ""
    return 1.0 if verdict == "yes" else 0.0 if verdict == "no" else None
