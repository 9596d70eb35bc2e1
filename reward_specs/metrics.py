"""Answer metrics shared by every reward spec and by the retrieval study: EM, cover-EM, token F1, answer-in-passage.

All of them compare *normalised* strings, the convention of the QA literature that Search-R1, R1-Searcher
and R-Search inherit: lower-case, drop punctuation, drop the articles a/an/the, collapse whitespace. Two
deliberate extensions keep the ASCII behaviour identical to those projects while making non-English text
behave: non-ASCII input is NFKC-normalised first (so ``"é"`` composed and decomposed, or full-width digits,
compare equal) and Unicode punctuation (curly quotes, dashes, ``«»``) is dropped like ASCII punctuation.

A missing or empty prediction scores 0 everywhere, and a gold answer that normalises to nothing (``"The"``)
is ignored rather than matching every prediction.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

__all__ = ["answer_in_passages", "cover_exact_match", "exact_match", "f1_score", "normalize_answer"]

_ASCII_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ASCII_PUNCTUATION_TO_SPACE = str.maketrans(string.punctuation, " " * len(string.punctuation))
_ASCII_PUNCTUATION_SET = frozenset(string.punctuation)
_ARTICLES = frozenset({"a", "an", "the"})
# Everything that is neither a word character nor whitespace, plus "_" (ASCII punctuation that \w accepts):
# the candidates among which the non-ASCII path looks for punctuation. A simple class keeps the regex fast.
_PUNCTUATION_CANDIDATE = re.compile(r"[^\w\s]|_")


@lru_cache(maxsize=8192)
def _is_punctuation(char: str) -> bool:
    return char in _ASCII_PUNCTUATION_SET or unicodedata.category(char).startswith("P")


def _strip_punctuation(text: str, replacement: str = "") -> str:
    """Lower-case and replace punctuation (ASCII, and Unicode category P* after NFKC for non-ASCII text)."""
    if text.isascii():
        return text.lower().translate(_ASCII_PUNCTUATION_TO_SPACE if replacement else _ASCII_PUNCTUATION)
    folded = unicodedata.normalize("NFKC", text).lower()
    return _PUNCTUATION_CANDIDATE.sub(lambda m: replacement if _is_punctuation(m.group(0)) else m.group(0), folded)


def _drop_articles(text: str) -> str:
    return " ".join(w for w in text.split() if w not in _ARTICLES)


def normalize_answer(text: str | None) -> str:
    """Lower-case, drop punctuation and the articles a/an/the (as whole words), collapse whitespace.

    ``None`` normalises to ``""``. Punctuation is deleted, not replaced by a space (``"U.S."`` → ``"us"``),
    as in the SQuAD/Search-R1 convention, so that scores stay comparable with published numbers.
    """
    if not text:
        return ""
    return _drop_articles(_strip_punctuation(text))


def _as_golds(golds: str | Iterable[str]) -> list[str]:
    """Normalised, non-empty gold answers (a single string is one gold, not a sequence of characters)."""
    items = [golds] if isinstance(golds, str) else list(golds)
    normalised = (normalize_answer(g) for g in items if isinstance(g, str))
    return [g for g in normalised if g]


def exact_match(prediction: str | None, golds: str | Iterable[str]) -> float:
    """1.0 if the normalised prediction equals some normalised gold answer, else 0.0."""
    pred = normalize_answer(prediction)
    return float(bool(pred) and pred in _as_golds(golds))


def cover_exact_match(prediction: str | None, golds: str | Iterable[str]) -> float:
    """1.0 if some normalised gold answer is a substring of the normalised prediction (SPEC's CEM), else 0.0.

    This is plain substring containment, as in Search-R1's ``subem_check``: the gold ``"us"`` is covered by
    ``"bus"``. That is the published metric; it is lenient and rewards answers that list candidates
    (R1-Searcher's table 5), which is why it is not the default training metric.
    """
    pred = normalize_answer(prediction)
    return float(bool(pred) and any(g in pred for g in _as_golds(golds)))


def _token_f1(pred_tokens: Sequence[str], gold_tokens: Sequence[str]) -> float:
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision = common / len(pred_tokens)
    recall = common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str | None, golds: str | Iterable[str]) -> float:
    """Token-level F1 between the normalised prediction and the best-matching normalised gold answer."""
    pred_tokens = normalize_answer(prediction).split()
    if not pred_tokens:
        return 0.0
    return max((_token_f1(pred_tokens, g.split()) for g in _as_golds(golds)), default=0.0)


def answer_in_passages(golds: str | Iterable[str], texts: Iterable[str]) -> bool:
    """Whether some normalised gold answer occurs, as whole tokens, inside some normalised passage.

    Used for the retrieval hit of the study's eq. 4 and for recall@k. Whole tokens (``" us "`` inside
    ``" the us army "``) rather than raw substrings keep short answers from matching inside longer words
    (``"us"`` in ``"business"``). A passage is read twice, with punctuation deleted (so ``"U.S."`` gives
    ``"us"``, like the gold) and with punctuation turned into spaces (so ``"1990–1995"`` or
    ``"Paris/London"`` still contain ``"1990"`` and ``"paris"`` as tokens).

    Speed, since it runs over thousands of passages: a passage is fully normalised only when every token
    of some gold answer occurs in its cheaply lower-cased, punctuation-deleted text (a necessary condition
    for both readings), and the scan stops at the first hit.
    """
    answers = [(f" {g} ", g.split()) for g in _as_golds(golds)]
    if not answers:
        return False
    for text in texts:
        if not text:
            continue
        deleted = _strip_punctuation(text)
        if not any(all(token in deleted for token in tokens) for _, tokens in answers):
            continue
        for reading in (deleted, _strip_punctuation(text, " ")):
            haystack = f" {_drop_articles(reading)} "
            if any(padded in haystack for padded, _ in answers):
                return True
    return False
