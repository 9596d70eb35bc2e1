"""A JVM-free copy of Anserini's default English analyzer, so every BM25 engine sees the same terms.

Lucene's pipeline, as pyserini indexes Wikipedia: Unicode word-break tokenizer → strip English possessive
``'s`` → lowercase → drop Lucene's 33 English stopwords → Porter stemmer. Here the tokenizer is a regular
expression with the word-break rules that matter for English text (letters and digits glued by ``.`` and
apostrophes, digit groups by ``,`` and ``;``, hyphens split), and the stemmer is Snowball's ``porter`` from
``PyStemmer`` (the same original Porter algorithm as Lucene's ``PorterStemFilter``). On the union corpus the
terms match Lucene's for well over 99% of tokens (``tests/test_bm25.py`` checks it against the real
analyzer); CJK text, which Lucene splits per character, is the main known difference.

Analysis is memoised per distinct surface token, which is what makes indexing a million passages in Python
affordable: each passage costs one regular-expression scan and one dictionary lookup per token.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["LUCENE_STOPWORDS", "EnglishAnalyzer"]

#: Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`` (what Anserini removes by default).
LUCENE_STOPWORDS = frozenset(
    (
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
    )
)

# Combining marks (accents written as separate code points, Indic vowel signs) stay inside a word, as in
# Unicode word-break; Python's ``\w`` alone would split there.
_MARKS = (
    "\u0300-\u036f\u0483-\u0489\u0591-\u05bd\u0610-\u061a\u064b-\u065f"
    "\u0900-\u0dff\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff"
)
_WORD = rf"[\w{_MARKS}]"
_LETTER = rf"(?:[^\W\d_]|[{_MARKS}])"
_TOKEN = re.compile(rf"{_WORD}+(?:(?:(?<={_LETTER})[.:'’·](?={_LETTER})|(?<=\d)[.,;'’](?=\d)){_WORD}+)*")
# Lucene emits each Han ideograph and Hiragana character as a token of its own.
_IDEOGRAPH = re.compile("([\u3040-\u309f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff])")
_VOWELS = frozenset("aeiou")


def _porter_measure(stem: str) -> int:
    """Porter's *m*: the number of vowel→consonant transitions (``y`` after a consonant is a vowel)."""
    m, previous_vowel = 0, False
    for i, ch in enumerate(stem):
        vowel = ch in _VOWELS or (ch == "y" and i > 0 and not previous_vowel)
        if previous_vowel and not vowel:
            m += 1
        previous_vowel = vowel
    return m


class EnglishAnalyzer:
    """Turns text into Lucene-compatible BM25 terms.

    ``analyze`` returns the terms of one text; :meth:`term_of` the term of one raw (lowercased) token, or
    ``None`` for a stopword. The memo grows with the vocabulary of what was analysed (a few hundred thousand
    entries for a million passages).
    """

    name = "lucene-english-porter"

    def __init__(self) -> None:
        try:
            import Stemmer
        except ImportError:
            raise ImportError(
                "BM25 analysis needs a Porter stemmer: pip install PyStemmer (part of 'searchenv[bm25]')"
            ) from None
        self._stem = Stemmer.Stemmer("porter").stemWord
        self._memo: dict[str, str | None] = {}

    def tokens(self, text: str) -> list[str]:
        """Raw lowercased tokens, before possessive stripping, stopwords and stemming."""
        text = text.lower()
        if _IDEOGRAPH.search(text):
            text = _IDEOGRAPH.sub(r" \1 ", text)
        return _TOKEN.findall(text)

    def term_of(self, token: str) -> str | None:
        term = self._memo.get(token, "")
        if term == "":
            term = self._analyse_token(token)
            self._memo[token] = term
        return term

    def _analyse_token(self, token: str) -> str | None:
        if token.endswith(("'s", "’s")):
            token = token[:-2]
        if not token or token in LUCENE_STOPWORDS:
            return None
        return self.stem(token)

    def stem(self, word: str) -> str:
        """Porter as Lucene's ``PorterStemmer`` runs it (Martin Porter's reference C code).

        That code differs from the published algorithm, which Snowball implements, in three places: words of
        one or two letters are left alone, and step 2 maps ``-logi`` to ``-log`` and ``-bli`` to ``-ble``
        (instead of ``-abli`` to ``-able``). Snowball leaves such endings untouched, so finishing its output
        by hand gives Lucene's stem.
        """
        if len(word) <= 2:
            return word
        stem = self._stem(word)
        if stem.endswith("logi") and _porter_measure(stem[:-4]) > 0:
            return stem[:-1]
        if stem.endswith("bli") and _porter_measure(stem[:-3]) > 0:
            return self._stem(stem[:-1] + "e")
        return stem

    def analyze(self, text: str) -> list[str]:
        """The terms Lucene would index for ``text``, in order, repeats kept."""
        return [t for t in map(self.term_of, self.tokens(text)) if t is not None]

    def analyze_many(self, texts: Iterable[str]) -> list[list[str]]:
        return [self.analyze(text) for text in texts]
