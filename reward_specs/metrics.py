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

import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

__all__ = [
    "answer_in_passages",
    "answer_scores",
    "cover_exact_match",
    "exact_match",
    "f1_score",
    "normalised_golds",
    "normalize_answer",
]

_ASCII_PUNCTUATION_BYTES = string.punctuation.encode("ascii")
_ASCII_PUNCTUATION_BYTES_TO_SPACE = bytes.maketrans(_ASCII_PUNCTUATION_BYTES, b" " * len(_ASCII_PUNCTUATION_BYTES))
_ASCII_BYTES = bytes(range(128))
_ARTICLES = frozenset({"a", "an", "the"})


@lru_cache(maxsize=8192)
def _is_punctuation(char: str) -> bool:
    return char in string.punctuation or unicodedata.category(char).startswith("P")


def _strip_punctuation(text: str, replacement: str = "") -> str:
    """Lower-case and replace punctuation (ASCII, and Unicode category P* after NFKC for non-ASCII text).

    It works on UTF-8 bytes, where every byte of a multi-byte character is >= 0x80: ASCII letters are
    lower-cased and ASCII punctuation removed by C-level byte operations (ASCII text is done there), and only
    the few distinct non-ASCII characters are looked at one by one (the whole string is lower-cased again only
    when one of them is a capital). That is several times faster than a per-character regex on Wikipedia
    passages, which nearly always hold some non-ASCII character.
    """
    ascii_only = text.isascii()
    # bytes.lower() touches ASCII letters only; "surrogatepass" keeps lone surrogates (garbled input) intact.
    # bytes.translate is a table lookup per byte, where str.translate looks each character up in a dict.
    raw = (text if ascii_only else unicodedata.normalize("NFKC", text)).encode("utf-8", "surrogatepass").lower()
    if replacement:
        raw = raw.translate(_ASCII_PUNCTUATION_BYTES_TO_SPACE)
    else:
        raw = raw.translate(None, _ASCII_PUNCTUATION_BYTES)
    folded = raw.decode("utf-8", "surrogatepass")
    if ascii_only:
        return folded
    others = set(raw.translate(None, _ASCII_BYTES).decode("utf-8", "surrogatepass"))  # distinct non-ASCII chars
    for char in others:
        if _is_punctuation(char):
            folded = folded.replace(char, replacement)
    if any(char.lower() != char for char in others):  # a non-ASCII capital: let str.lower handle context
        folded = folded.lower()
    return folded


def _drop_articles(text: str) -> str:
    """Drop the whole words a/an/the and collapse whitespace; without articles, no Python-level loop at all."""
    words = text.split()
    if _ARTICLES.isdisjoint(words):
        return " ".join(words)
    return " ".join([w for w in words if w not in _ARTICLES])


def normalize_answer(text: str | None) -> str:
    """Lower-case, drop punctuation and the articles a/an/the (as whole words), collapse whitespace.

    ``None`` normalises to ``""``. Punctuation is deleted, not replaced by a space (``"U.S."`` → ``"us"``),
    as in the SQuAD/Search-R1 convention, so that scores stay comparable with published numbers.
    """
    if not text:
        return ""
    if text.isascii():  # most answers: _strip_punctuation's ASCII path, written out (every reward runs it)
        return _drop_articles(text.encode().lower().translate(None, _ASCII_PUNCTUATION_BYTES).decode())
    return _drop_articles(_strip_punctuation(text))


def normalised_golds(golds: str | Iterable[str]) -> tuple[str, ...]:
    """Normalised, non-empty gold answers (a single string is one gold, not a sequence of characters); cached."""
    items = (golds,) if isinstance(golds, str) else golds if type(golds) is tuple else tuple(golds)
    try:
        return _normalised_golds(items)
    except TypeError:  # an unhashable item (a list in the answers): not a gold answer, and not cacheable
        return _normalised_golds(tuple(g for g in items if isinstance(g, str)))


@lru_cache(maxsize=16384)
def _normalised_golds(items: tuple[str, ...]) -> tuple[str, ...]:
    # Cached: the same gold answers are scored for every sample of a GRPO group and every epoch.
    return tuple(g for g in map(normalize_answer, (i for i in items if isinstance(i, str))) if g)


def _token_f1(pred_tokens: list[str], gold_tokens: Sequence[str]) -> float:
    # Only gold tokens can be in common: count those in the prediction (list.count runs in C), never build a
    # counter over a prediction that may be megabytes long.
    common = sum(min(pred_tokens.count(token), n) for token, n in Counter(gold_tokens).items())
    if common == 0:
        return 0.0
    precision = common / len(pred_tokens)
    recall = common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


# Each metric of a normalised prediction against normalised, non-empty golds; empty ones score 0 everywhere.
def _exact(pred: str, golds: Sequence[str]) -> float:
    return 1.0 if pred and pred in golds else 0.0


def _f1(pred: str, golds: Sequence[str]) -> float:
    if not pred or not golds:
        return 0.0
    if pred in golds:  # exact match implies F1 = 1; skip the token counting
        return 1.0
    pred_tokens = pred.split()
    return max(_token_f1(pred_tokens, g.split()) for g in golds)


def _cover(pred: str, golds: Sequence[str]) -> float:
    return 1.0 if pred and any(g in pred for g in golds) else 0.0


def answer_scores(prediction: str | None, golds: str | Iterable[str]) -> dict[str, float]:
    """``{"em", "f1", "cem"}`` in one pass: the prediction and the golds are normalised once."""
    pred, normalised = normalize_answer(prediction), normalised_golds(golds)
    return {"em": _exact(pred, normalised), "f1": _f1(pred, normalised), "cem": _cover(pred, normalised)}


def exact_match(prediction: str | None, golds: str | Iterable[str]) -> float:
    """1.0 if the normalised prediction equals some normalised gold answer, else 0.0."""
    return answer_scores(prediction, golds)["em"]


def cover_exact_match(prediction: str | None, golds: str | Iterable[str]) -> float:
    """1.0 if some normalised gold answer is a substring of the normalised prediction (SPEC's CEM), else 0.0.

    This is plain substring containment, as in Search-R1's ``subem_check``: the gold ``"us"`` is covered by
    ``"bus"``. That is the published metric; it is lenient and rewards answers that list candidates
    (R1-Searcher's table 5), which is why it is not the default training metric.
    """
    return answer_scores(prediction, golds)["cem"]


def f1_score(prediction: str | None, golds: str | Iterable[str]) -> float:
    """Token-level F1 between the normalised prediction and the best-matching normalised gold answer."""
    return answer_scores(prediction, golds)["f1"]


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
    answers = [(f" {g} ", g.split()) for g in normalised_golds(golds)]
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
