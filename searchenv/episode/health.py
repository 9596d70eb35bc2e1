"""Reasoning-health measurements of one episode's text: how long the model thought, how much of its thinking
repeats itself, how long its answer is, how often it searched for the same thing twice, how many passages it was shown.

The functions here define each measure on a whole text; :class:`searchenv.episode.turns.FactsTally` keeps the same
measures one turn at a time (so a step's cost does not grow with the episode), and
``tests/test_facts_tally.py`` checks the two agree.

A reasoning channel can collapse (empty, or one phrase looped) while the reward still looks fine; these numbers
show it in every episode's metrics (:func:`searchenv.episode.episode.metrics_of`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

from searchenv.protocol.scan import TagScanner

__all__ = [
    "DEFAULT_THINK_TAGS",
    "HEALTH_METRICS",
    "REPEAT_NGRAM",
    "count_passages",
    "count_repeated_queries",
    "repetition_ratio",
    "think_scanner",
    "think_text",
]

#: The reasoning-health metric names in every episode's metrics (see :func:`searchenv.episode.episode.metrics_of`).
HEALTH_METRICS: tuple[str, ...] = (
    "think_words",
    "think_repetition",
    "answer_words",
    "duplicate_search_rate",
    "passages_read",
)

#: The n of the word n-grams the repetition ratio counts (4: long enough that ordinary prose rarely repeats one).
REPEAT_NGRAM = 4
#: The think pair read in protocols that have none.
DEFAULT_THINK_TAGS = ("<think>", "</think>")


def think_text(actions: Iterable[str], think_tags: tuple[str, str] | None) -> str:
    """The content of every think block of the model's accepted actions, joined by newlines.

    Protocols without a think pair (R-Search, native tool calls) are read with ``<think>`` … ``</think>``, which
    tool-calling models write anyway; a model that writes none has thought 0 words.
    """
    scanner = think_scanner(think_tags)
    bodies = []
    for action in actions:
        bodies += [action[b.body_start : b.body_end].strip() for b in scanner.read(action).blocks()]
    return "\n".join(b for b in bodies if b)


@lru_cache(maxsize=32)
def think_scanner(think_tags: tuple[str, str] | None) -> TagScanner:
    """The reader of a protocol's think blocks (``<think>`` … ``</think>`` when it has no think pair); one per pair,
    shared by every episode (a scanner holds no per-text state)."""
    return TagScanner({"think": think_tags or DEFAULT_THINK_TAGS})


def repetition_ratio(text: str, n: int = REPEAT_NGRAM) -> float:
    """The share of the text's word ``n``-grams that already occurred earlier in it (lower-cased); 0.0 for a text
    shorter than ``n`` words. A looped phrase drives it towards 1."""
    words = text.lower().split()
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return (len(grams) - len(set(grams))) / len(grams) if grams else 0.0


def count_repeated_queries(queries: Sequence[str]) -> int:
    """How many queries repeat an earlier one of the same episode (case and spacing ignored)."""
    keys = [" ".join(q.lower().split()) for q in queries]
    return len(keys) - len(set(keys))


def count_passages(body: str, passage_template: str) -> int | None:
    """How many passages an information block's ``body`` shows, read from the text the model saw.

    The environment writes passage ``i`` with the protocol's ``passage_template``, whose rank field makes a header
    per passage (``Doc 1(Title: ``, ``Doc 2(Title: ``, … in Search-R1's layout); the count is how many of the
    headers 1, 2, … follow one another in the block. Both paths count this way — the environment's episode and a
    transcript read back as text — so they agree on every transcript. A passage whose own text holds the next
    header is not told apart from it (a corpus rarely writes ``Doc 2(Title:``). ``None`` when the template has
    no ``{rank}`` field: its passages cannot be told apart, so the number is missing rather than guessed.
    """
    before, rank, after = passage_template.partition("{rank}")
    if not rank:
        return None
    after = after.split("{", 1)[0]  # the literal text up to the next field: "(Title: "
    count, position = 0, 0
    while True:
        found = body.find(f"{before}{count + 1}{after}", position)
        if found < 0:
            return count
        count, position = count + 1, found + 1
