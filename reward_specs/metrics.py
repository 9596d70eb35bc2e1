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
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

__all__ = ["answer_in_passages", "cover_exact_match", "exact_match", "f1_score", "normalize_answer"]

_ASCII_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
# Separates passages once they are joined for a single normalisation pass (see answer_in_passages): a control
# character survives normalisation as its own token and cannot occur in a normalised gold answer (golds
# containing it are skipped).
_SEPARATOR = "\x00"


@lru_cache(maxsize=1)
def _unicode_punctuation() -> re.Pattern[str]:
    """A character class of ASCII punctuation plus every Unicode punctuation (category P*) character.

    Built on first use (a scan of the first two planes, where all punctuation lives, ~20 ms) so that
    importing the package stays cheap and ASCII-only workloads never pay for it.
    """
    limit = min(sys.maxunicode, 0x1FFFF)
    chars = {chr(cp) for cp in range(limit + 1) if unicodedata.category(chr(cp)).startswith("P")}
    chars.update(string.punctuation)
    ranges: list[str] = []
    codepoints = sorted(ord(c) for c in chars)
    start = prev = codepoints[0]
    for cp in [*codepoints[1:], -1]:
        if cp == prev + 1:
            prev = cp
            continue
        ranges.append(re.escape(chr(start)) + ("-" + re.escape(chr(prev)) if prev > start else ""))
        start = prev = cp
    return re.compile("[" + "".join(ranges) + "]")


def normalize_answer(text: str | None) -> str:
    """Lower-case, drop punctuation and the articles a/an/the, collapse whitespace.

    ``None`` normalises to ``""``. Punctuation is deleted, not replaced by a space (``"U.S."`` → ``"us"``),
    as in the SQuAD/Search-R1 convention, so that scores stay comparable with published numbers.
    """
    if not text:
        return ""
    if text.isascii():
        text = text.lower().translate(_ASCII_PUNCTUATION)
    else:
        text = _unicode_punctuation().sub("", unicodedata.normalize("NFKC", text).lower())
    return " ".join(_ARTICLES.sub(" ", text).split())


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
    (``"us"`` in ``"business"``). All passages are joined and normalised in one pass, with a separator token
    that no answer can span, so thousands of passages cost one regex pass instead of thousands of calls.
    """
    answers = [g for g in _as_golds(golds) if _SEPARATOR not in g]
    if not answers:
        return False
    joined = f" {_SEPARATOR} ".join(t for t in texts if t)
    if not joined:
        return False
    haystack = f" {normalize_answer(joined)} "
    return any(f" {g} " in haystack for g in answers)
