"""The intermediate answers of a multi-hop question, read from its dataset's metadata.

Two layouts carry them: the generated world's ``metadata["hop_answers"]`` (one answer per hop, the last being the
question's answer) and MuSiQue's ``metadata["question_decomposition"]`` (one ``{"question", "answer", ...}`` per
hop, as its jsonl files and HippoRAG's copies keep it). A per-hop reward reads them through :func:`hop_answers`
only, so a third layout is added here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["HOP_KEYS", "hop_answers", "missing_hops_error"]

#: The metadata keys that carry a question's intermediate answers, in the order they are read.
HOP_KEYS = ("hop_answers", "question_decomposition")


def _answers(value: Any) -> tuple[str, ...] | None:
    """Answers from a list of strings (``hop_answers``) or of mappings with an ``answer`` (a decomposition)."""
    if isinstance(value, (str, bytes)) or (not isinstance(value, Sequence) and not hasattr(value, "tolist")):
        return None
    items = value.tolist() if hasattr(value, "tolist") else list(value)  # numpy arrays out of parquet
    answers = [item.get("answer") if isinstance(item, Mapping) else item for item in items]
    if not answers or not all(isinstance(a, str) and a.strip() for a in answers):
        return None
    return tuple(answers)


def hop_answers(metadata: Mapping[str, Any] | None) -> tuple[str, ...] | None:
    """Every hop's answer, in hop order (the last is the question's own), or ``None`` when the metadata has none.

    A key holding anything but a non-empty list of non-empty answers counts as none: a per-hop reward must not
    pay for hops it cannot read.
    """
    if not metadata:
        return None
    for key in HOP_KEYS:
        if key in metadata:
            found = _answers(metadata[key])
            if found is not None:
                return found
    return None


def missing_hops_error(reward: str, question_id: str, dataset: str) -> str:
    """The message for a question without intermediate answers: what is missing, where, and what to use instead."""
    return (
        f"reward {reward!r} needs every question's intermediate answers (metadata {' or '.join(HOP_KEYS)}), but "
        f"question {question_id!r} of dataset {dataset!r} has none; use it with dataset 'world' (or a generated "
        "world's questions) or MuSiQue rows that keep their question_decomposition, or choose a reward that needs "
        "no hop answers: em, f1, format, format-retrieval"
    )
