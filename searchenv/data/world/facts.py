"""The fact tables of the embedded knowledge world: invented names and who relates to whom.

Everything is drawn with one seeded :class:`numpy.random.Generator` in a fixed order and kept in flat numpy
arrays (one row per entity, ``-1`` where a relation is absent), so a million entities cost a few arrays
rather than a million objects, and the same seed gives the same world in any process. Names come from
syllables (:mod:`searchenv.data.world.vocab`) and are unique across the whole world, case-insensitively, so a
question that names an entity is never ambiguous; distractors come from names that *share* a part (siblings
share a surname, organisations share a stem such as "Valtmora Guild" / "Valtmora Academy") or differ by one
vowel ("Quarnessa" / "Quarnesso").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from searchenv.data.world import vocab

__all__ = ["ENTITY_KINDS", "SHORT_NAMES_UP_TO", "Facts", "build_facts", "entity_counts", "smallest_ints"]

ENTITY_KINDS = ("person", "org", "city", "region", "work")

# Share of near-miss spelling variants among surnames, city names and organisation stems.
VARIANT_SHARE = 0.25
_MAX_ROUNDS = 64  # rounds of candidate batches before a name pool counts as exhausted
# Worlds up to this size draw names of three parts (Brevondt = bre + vo + ndt): about 2.6M words per set of
# endings, enough for 5M entities. Larger worlds put a second open syllable in every name (Brevolondt),
# 75 times the space; smaller worlds keep the short names, so their seeds give the same worlds as before.
SHORT_NAMES_UP_TO = 5_000_000
FIRST_BIRTH_YEAR, LAST_BIRTH_YEAR = 1480, 1880


def smallest_ints(values: np.ndarray) -> np.ndarray:
    """``values`` in the narrowest signed integer type that holds them (a 21M world keeps dozens of these).

    Only storage changes: every value, and so every passage and question drawn from it, stays the same.
    """
    if values.dtype.kind not in "iu" or values.size == 0:
        return values
    low, high = int(values.min()), int(values.max())
    for dtype in (np.int8, np.int16, np.int32):
        if np.iinfo(dtype).min <= low and high <= np.iinfo(dtype).max:
            return values.astype(dtype)
    return values


def entity_counts(num_passages: int) -> dict[str, int]:
    """How many entities of each kind a world of ``num_passages`` passages holds (one passage per entity).

    Persons are the largest group because most relations point at people, which makes them the usual
    bridge entities of multi-hop questions.
    """
    counts = {
        "region": max(2, num_passages // 50),
        "city": max(4, round(num_passages * 0.18)),
        "org": max(4, round(num_passages * 0.20)),
        "work": max(4, round(num_passages * 0.15)),
    }
    counts["person"] = num_passages - sum(counts.values())
    return {kind: counts[kind] for kind in ENTITY_KINDS}


@dataclass
class Facts:
    """Entity names and relations, one numpy row per entity of each kind.

    Relation arrays hold the index of the related entity in its own kind's arrays (or a year), ``-1`` when
    the entity has no such relation (e.g. nobody old enough to be someone's teacher).
    """

    person_names: list[str]
    org_names: list[str]
    city_names: list[str]
    region_names: list[str]
    work_names: list[str]
    river_names: list[str]
    person_aliases: list[tuple[str, ...]]  # full name, plus the surname where no other person carries it
    female: np.ndarray
    occupation: np.ndarray
    birth_year: np.ndarray
    death_year: np.ndarray
    birthplace: np.ndarray
    teacher: np.ndarray
    employer: np.ndarray
    joined_year: np.ndarray
    org_kind: np.ndarray
    founder: np.ndarray
    seat: np.ndarray
    org_founded: np.ndarray
    region_of: np.ndarray
    city_founded: np.ndarray
    settlement: np.ndarray
    river: np.ndarray
    capital: np.ndarray
    governor: np.ndarray
    governor_year: np.ndarray
    region_kind: np.ndarray
    author: np.ndarray
    published: np.ndarray
    genre: np.ndarray
    founded_org: np.ndarray  # person -> an organisation they founded (reverse of founder), -1 if none
    wrote_work: np.ndarray  # person -> a work they wrote, -1 if none
    governed: np.ndarray  # person -> the region they first governed, -1 if none

    def names(self, kind: str) -> list[str]:
        """Names of all entities of ``kind`` (one of :data:`ENTITY_KINDS`), by index."""
        return getattr(self, f"{kind}_names")


@lru_cache(maxsize=1)
def _syllables() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Closed (onset + vowel + coda) and open (consonant + vowel) syllables, built on first use."""
    closed = tuple(o + v + c for o in vocab.ONSETS for v in vocab.VOWELS for c in vocab.CODAS)
    open_ = tuple(o + v for o in vocab.OPEN_ONSETS for v in vocab.OPEN_VOWELS)
    return closed, open_


def _vowel_variant(word: str, new_vowel: str) -> str:
    """``word`` with its last vowel letter replaced: the near-miss spelling of a distractor name."""
    for i in range(len(word) - 1, -1, -1):
        if word[i] in vocab.VOWEL_LETTERS and word[i] != new_vowel:
            return word[:i] + new_vowel + word[i + 1 :]
    return word


class _WordPool:
    """Draws capitalised invented words that are unique across every role of one world.

    Membership tests never depend on set order, so the draws are deterministic.
    """

    def __init__(self, rng: np.random.Generator, long_names: bool = False):
        self._rng = rng
        self._long = long_names
        self._seen: set[str] = set()

    def take(
        self, count: int, endings: tuple[str, ...], closed_first: bool = True, variant_share: float = 0.0
    ) -> list[str]:
        """``count`` new words: a first syllable (closed or open), one open syllable (two in a long-name
        pool), and one of ``endings``.

        A ``variant_share`` of them are one-vowel variants of the others (distractor spellings); the result
        is shuffled so variants are not all at the end.
        """
        closed, open_ = _syllables()
        first = closed if closed_first else open_
        num_fresh = count - int(count * variant_share)

        def fresh(batch: int) -> list[str]:
            a = self._rng.integers(0, len(first), size=batch).tolist()
            b = self._rng.integers(0, len(open_), size=batch).tolist()
            middles = [open_[j] for j in b]
            if self._long:
                c = self._rng.integers(0, len(open_), size=batch).tolist()
                middles = [m + open_[j] for m, j in zip(middles, c, strict=True)]
            ends = self._rng.integers(0, len(endings), size=batch).tolist()
            return [(first[i] + m + endings[e]).capitalize() for i, m, e in zip(a, middles, ends, strict=True)]

        words = self._unique(num_fresh, fresh)

        def variants(batch: int) -> list[str]:
            bases = self._rng.integers(0, num_fresh, size=batch).tolist()
            vowels = self._rng.integers(0, len(vocab.VOWEL_LETTERS), size=batch).tolist()
            return [_vowel_variant(words[i], vocab.VOWEL_LETTERS[v]) for i, v in zip(bases, vowels, strict=True)]

        words += self._unique(count - num_fresh, variants)
        return [words[i] for i in self._rng.permutation(count).tolist()]

    def _unique(self, count: int, candidates: Callable[[int], list[str]]) -> list[str]:
        """Keep drawing batches of ``candidates`` until ``count`` words never seen before are collected."""
        out: list[str] = []
        for _ in range(_MAX_ROUNDS):
            if len(out) == count:
                return out
            for word in candidates(int((count - len(out)) * 1.3) + 16):
                key = word.lower()
                if key in self._seen or key in vocab.RESERVED_WORDS:
                    continue
                self._seen.add(key)
                out.append(word)
                if len(out) == count:
                    break
        if len(out) < count:
            raise RuntimeError(
                f"ran out of distinct invented names ({len(out):,} of {count:,}); the world is too large"
            )
        return out


def _pair_codes(rng: np.random.Generator, count: int, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` distinct (row, col) pairs from a ``rows`` × ``cols`` grid, drawn without replacement."""
    codes = rng.choice(rows * cols, size=count, replace=False)
    return codes // cols, codes % cols


def _last_index(keys: np.ndarray, size: int) -> np.ndarray:
    """For each value ``0..size-1``, the largest position where ``keys`` holds it (``-1`` if none).

    Builds reverse relations (founder → organisation) deterministically: ``np.maximum.at`` has a defined
    result where a plain fancy assignment with repeated keys would not.
    """
    out = np.full(size, -1, dtype=np.int64)
    valid = keys >= 0
    np.maximum.at(out, keys[valid], np.flatnonzero(valid))
    return out


def _pick_in_window(
    rng: np.random.Generator, values: np.ndarray, low: np.ndarray, high: np.ndarray, share: float
) -> np.ndarray:
    """For each row, a random index ``j`` with ``low <= values[j] <= high`` (``-1`` if none, or by chance).

    ``values`` are years; a ``share`` of rows get a partner, which keeps some relations absent the way real
    biographies are incomplete. Vectorised through one sort and two binary searches.
    """
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    lo = np.searchsorted(ordered, low, side="left")
    hi = np.searchsorted(ordered, high, side="right")
    width = hi - lo
    chosen = order[np.minimum(lo + (rng.random(len(low)) * width).astype(np.int64), len(order) - 1)]
    keep = (width > 0) & (rng.random(len(low)) < share)
    return np.where(keep, chosen, -1)


def _during_life(rng: np.random.Generator, birth: np.ndarray, death: np.ndarray, low: int, high: int) -> np.ndarray:
    """A year at age ``low..high`` for each person, but never after their death (lifespans are ≥ 45)."""
    last = np.minimum(birth + high, death)
    return birth + low + (rng.random(len(birth)) * (last - birth - low + 1)).astype(np.int64)


def _person_names(
    pool: _WordPool, rng: np.random.Generator, count: int
) -> tuple[list[str], np.ndarray, list[tuple[str, ...]]]:
    """Unique full names, a female flag per person, and answer aliases (surname when unambiguous).

    Few given names and about three people per surname make families and namesakes: lexical distractors a
    search agent must tell apart by the whole name.
    """
    half = min(400, max(10, count // 6))
    given = pool.take(half, vocab.FEMININE_ENDINGS, closed_first=False)
    given += pool.take(half, vocab.MASCULINE_ENDINGS, closed_first=False)
    surnames = pool.take(max(10, count // 3), vocab.SURNAME_ENDINGS, variant_share=VARIANT_SHARE)
    g, s = _pair_codes(rng, count, len(given), len(surnames))
    names = [f"{given[a]} {surnames[b]}" for a, b in zip(g.tolist(), s.tolist(), strict=True)]
    unique_surname = (np.bincount(s, minlength=len(surnames)) == 1)[s].tolist()
    aliases = [
        (name, surnames[b]) if alone else (name,)
        for name, b, alone in zip(names, s.tolist(), unique_surname, strict=True)
    ]
    return names, g < half, aliases


def _org_names(pool: _WordPool, rng: np.random.Generator, count: int) -> tuple[list[str], np.ndarray]:
    """Unique "Stem Kind" names; about two organisations share each stem."""
    stems = pool.take(max(2, count // 2), vocab.STEM_ENDINGS, variant_share=VARIANT_SHARE)
    s, k = _pair_codes(rng, count, len(stems), len(vocab.ORG_KINDS))
    names = [f"{stems[a]} {vocab.ORG_KINDS[b][0]}" for a, b in zip(s.tolist(), k.tolist(), strict=True)]
    return names, k


def _work_names(pool: _WordPool, rng: np.random.Generator, count: int) -> list[str]:
    """Unique titles: each holds a pool word of its own (see ``TITLE_PATTERNS``)."""
    words = pool.take(count, vocab.WORD_ENDINGS)
    patterns = rng.integers(0, len(vocab.TITLE_PATTERNS), size=count).tolist()
    nouns = rng.integers(0, len(vocab.TITLE_NOUNS), size=count).tolist()
    return [
        vocab.TITLE_PATTERNS[p].format(word=w, noun=vocab.TITLE_NOUNS[n])
        for w, p, n in zip(words, patterns, nouns, strict=True)
    ]


def build_facts(num_passages: int, rng: np.random.Generator) -> Facts:
    """Draw names and relations for a world of ``num_passages`` entities.

    Dates are kept plausible so the passages never contradict themselves: a teacher is 15–45 years older
    than the pupil (and alive when the pupil turns 16), an employer was founded before the employee was 30,
    organisations are founded, books published and governorships taken up while the person is alive.
    """
    n = entity_counts(num_passages)
    pool = _WordPool(rng, long_names=num_passages > SHORT_NAMES_UP_TO)
    person_names, female, person_aliases = _person_names(pool, rng, n["person"])
    org_names, org_kind = _org_names(pool, rng, n["org"])
    city_names = pool.take(n["city"], vocab.CITY_ENDINGS, variant_share=VARIANT_SHARE)
    region_names = pool.take(n["region"], vocab.REGION_ENDINGS)
    river_names = pool.take(min(5000, max(3, n["city"] // 8)), vocab.RIVER_ENDINGS, closed_first=False)
    work_names = _work_names(pool, rng, n["work"])

    birth_year = rng.integers(FIRST_BIRTH_YEAR, LAST_BIRTH_YEAR + 1, size=n["person"])
    death_year = birth_year + rng.integers(45, 86, size=n["person"])
    founder = rng.integers(0, n["person"], size=n["org"])
    org_founded = _during_life(rng, birth_year[founder], death_year[founder], 25, 55)
    employer = _pick_in_window(rng, org_founded, np.full(n["person"], 0), birth_year + 30, share=0.85)
    joined_year = np.maximum(birth_year + 20, org_founded[np.maximum(employer, 0)] + 1) + rng.integers(
        0, 11, size=n["person"]
    )
    teacher = _pick_in_window(rng, birth_year, birth_year - 29, birth_year - 15, share=0.8)

    # The first cities cover every region once, so each region has a capital lying inside it.
    region_of = np.concatenate(
        [np.arange(n["region"]), rng.integers(0, n["region"], size=n["city"] - n["region"])]
    ).astype(np.int64)
    governor = rng.choice(n["person"], size=n["region"], replace=False)
    author = rng.integers(0, n["person"], size=n["work"])
    published = _during_life(rng, birth_year[author], death_year[author], 25, 60)
    facts = Facts(
        person_names=person_names,
        org_names=org_names,
        city_names=city_names,
        region_names=region_names,
        work_names=work_names,
        river_names=river_names,
        person_aliases=person_aliases,
        female=female,
        occupation=rng.integers(0, len(vocab.OCCUPATIONS), size=n["person"]),
        birth_year=birth_year,
        death_year=death_year,
        birthplace=rng.integers(0, n["city"], size=n["person"]),
        teacher=teacher,
        employer=employer,
        joined_year=joined_year,
        org_kind=org_kind,
        founder=founder,
        seat=rng.integers(0, n["city"], size=n["org"]),
        org_founded=org_founded,
        region_of=region_of,
        city_founded=rng.integers(800, 1451, size=n["city"]),
        settlement=rng.integers(0, len(vocab.SETTLEMENTS), size=n["city"]),
        river=rng.integers(0, len(river_names), size=n["city"]),
        capital=np.arange(n["region"]),
        governor=governor,
        governor_year=_during_life(rng, birth_year[governor], death_year[governor], 35, 44),
        region_kind=rng.integers(0, len(vocab.REGION_KINDS), size=n["region"]),
        author=author,
        published=published,
        genre=rng.integers(0, len(vocab.GENRES), size=n["work"]),
        founded_org=_last_index(founder, n["person"]),
        wrote_work=_last_index(author, n["person"]),
        governed=_last_index(governor, n["person"]),
    )
    for name, value in vars(facts).items():
        if isinstance(value, np.ndarray):
            setattr(facts, name, smallest_ints(value))
    return facts
