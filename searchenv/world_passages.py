"""Render the fact tables of :mod:`searchenv.world_facts` as ~100-word wiki-style passages.

One passage per entity, titled with its name: a lead sentence, one sentence per relation the entity has
(the facts questions ask about, plus reverse mentions such as "she founded X"), then filler sentences until
the passage reaches about :data:`TARGET_WORDS` words, as wiki-18's 100-word DPR passages do. Fillers mention
other entities of the world in roles the questions never ask about ("spent several winters in Quarnessa"),
which is what makes them near-miss distractors for a reader and for a lexical retriever.

Speed matters (a million passages in under a minute): each kind first builds one column per template slot
(a list with the slot's value for every entity, drawn with numpy), then one generic loop fills the
templates, rewritten to positional slots, from each row of the columns.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from math import gcd
from typing import TYPE_CHECKING

import numpy as np

from searchenv import world_vocab as vocab
from searchenv.world_facts import Facts

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["TARGET_WORDS", "render_texts"]

TARGET_WORDS = 95  # fillers are added until a passage has at least this many words
_SLOT = re.compile(r"\{(\w+)\}")
LAST_YEAR = 2020  # filler dates stay in the past
_TICK = 8192

_PRONOUNS = {
    "Pron": ("He", "She"),
    "pron": ("he", "she"),
    "Poss": ("His", "Her"),
    "poss": ("his", "her"),
    "obj": ("him", "her"),
}

Columns = dict[str, list]
FactSpec = tuple[str, tuple[str, ...]]  # (slot that must not be None, templates stating the fact)


def _pick(rng: np.random.Generator, count: int, options: Sequence) -> list:
    """``count`` uniform choices from ``options``."""
    return np.asarray(options, dtype=object)[rng.integers(0, len(options), size=count)].tolist()


def _lookup(values: Sequence, index: np.ndarray) -> list:
    """``values[j]`` for each ``j`` in ``index``, or None where ``j`` is -1 (relation absent)."""
    return [values[j] if j >= 0 else None for j in index.tolist()]


def _others(rng: np.random.Generator, count: int) -> np.ndarray:
    """For each of ``count`` entities, another entity of the same kind (never itself)."""
    draw = rng.integers(0, count - 1, size=count)
    return draw + (draw >= np.arange(count))


def _years(rng: np.random.Generator, base: np.ndarray, low: int, high: int) -> list[int]:
    """Dates relative to each entity's own: ``base`` plus a uniform offset in ``[low, high]``, capped at
    :data:`LAST_YEAR`."""
    return np.minimum(base + rng.integers(low, high + 1, size=len(base)), LAST_YEAR).tolist()


def _filler_orders(rng: np.random.Generator, count: int, fillers: tuple[str, ...]) -> tuple[list[int], list[int]]:
    """A start and a step per passage; stepping through the fillers modulo their number visits each once.

    Steps are coprime with the number of fillers, so an order never repeats a sentence; this gives every
    passage its own filler order without drawing a permutation per passage.
    """
    steps = np.array([s for s in range(1, len(fillers)) if gcd(s, len(fillers)) == 1])
    start = rng.integers(0, len(fillers), size=count).tolist()
    return start, steps[rng.integers(0, len(steps), size=count)].tolist()


def _positional(templates: tuple[str, ...], keys: list[str]) -> tuple[str, ...]:
    """Rewrite named slots as positions in ``keys`` ("{name}" → "{0}"), so a row tuple fills them directly."""
    index = {key: i for i, key in enumerate(keys)}
    return tuple(_SLOT.sub(lambda m: f"{{{index[m.group(1)]}}}", t) for t in templates)


def _render(
    columns: Columns,
    lead: tuple[str, ...],
    facts: Sequence[FactSpec],
    fillers: tuple[str, ...],
    rng: np.random.Generator,
    bar: tqdm,
) -> list[str]:
    """Lead sentence, the fact sentences whose slot is present, then fillers until ``TARGET_WORDS`` words.

    Rows are zipped out of the columns and fill positional templates with ``str.format(*row)``: no
    per-passage dict is built, which is the single largest saving in this loop.
    """
    count = len(columns["name"])
    keys = list(columns)
    lead = _positional(lead, keys)
    fillers = _positional(fillers, keys)
    lead_choice = rng.integers(0, len(lead), size=count).tolist()
    start, step = _filler_orders(rng, count, fillers)
    fact_specs = [
        (keys.index(slot), _positional(templates, keys), rng.integers(0, len(templates), size=count).tolist())
        for slot, templates in facts
    ]
    texts = []
    for i, row in enumerate(zip(*columns.values(), strict=True)):
        if not i % _TICK:
            bar.update(min(_TICK, count - i))
        sentences = [lead[lead_choice[i]].format(*row)]
        for gate, templates, choice in fact_specs:
            if row[gate] is not None:
                sentences.append(templates[choice[i]].format(*row))
        words = sum(s.count(" ") + 1 for s in sentences)
        k, stride = start[i], step[i]
        for _ in range(len(fillers)):
            if words >= TARGET_WORDS:
                break
            sentence = fillers[k].format(*row)
            sentences.append(sentence)
            words += sentence.count(" ") + 1
            k = (k + stride) % len(fillers)
        texts.append(" ".join(sentences))
    return texts


def _dressing(rng: np.random.Generator, count: int) -> Columns:
    """Slots every kind's fillers may use: colours, nouns, topics, products and small numbers."""
    colour = _pick(rng, count, vocab.COLOURS)
    noun, noun2 = _pick(rng, count, vocab.NOUNS), _pick(rng, count, vocab.NOUNS)
    return {
        "colour": colour,
        "a_colour": [vocab.with_article(c) for c in colour],
        "noun": noun,
        "a_noun": [vocab.with_article(x) for x in noun],
        "noun2": noun2,
        "a_noun2": [vocab.with_article(x) for x in noun2],
        "topic": _pick(rng, count, vocab.TOPICS),
        "product": _pick(rng, count, vocab.PRODUCTS),
        "num": rng.integers(2, 10, size=count).tolist(),
    }


def _person_passages(f: Facts, rng: np.random.Generator, bar: tqdm) -> list[str]:
    """Biographies: birth and death, teacher, employer, and what the person founded, wrote or governed."""
    n = len(f.person_names)
    occupation = np.asarray(vocab.OCCUPATIONS, dtype=object)[f.occupation].tolist()
    female = f.female.astype(np.int64)
    # Reverse relations; where one is absent (-1) its year column holds junk that no template reads.
    has = {"founded": f.founded_org, "wrote": f.wrote_work, "governed": f.governed}
    columns: Columns = {
        "name": f.person_names,
        **{slot: np.asarray(forms, dtype=object)[female].tolist() for slot, forms in _PRONOUNS.items()},
        "occ": occupation,
        "a_occ": [vocab.with_article(o) for o in occupation],
        "by": f.birth_year.tolist(),
        "dy": f.death_year.tolist(),
        "bp": _lookup(f.city_names, f.birthplace),
        "teacher": _lookup(f.person_names, f.teacher),
        "employer": _lookup(f.org_names, f.employer),
        "ey": f.joined_year.tolist(),
        "org_f": _lookup(f.org_names, has["founded"]),
        "fy": f.org_founded[has["founded"]].tolist(),
        "work": _lookup(f.work_names, has["wrote"]),
        "wy": f.published[has["wrote"]].tolist(),
        "gov_region": _lookup(f.region_names, has["governed"]),
        "gy": f.governor_year[has["governed"]].tolist(),
        "city2": _lookup(f.city_names, rng.integers(0, len(f.city_names), size=n)),
        "city3": _lookup(f.city_names, rng.integers(0, len(f.city_names), size=n)),
        "city4": _lookup(f.city_names, rng.integers(0, len(f.city_names), size=n)),
        "person2": _lookup(f.person_names, _others(rng, n)),
        "org2": _lookup(f.org_names, rng.integers(0, len(f.org_names), size=n)),
        "trait": _pick(rng, n, vocab.TRAITS),
        "year2": _years(rng, f.birth_year, 18, 30),
        "year3": _years(rng, f.birth_year, 31, 44),
        "year4": _years(rng, f.death_year, 20, 150),
        "year5": (f.birth_year + 45 + (rng.random(n) * (f.death_year - f.birth_year - 44)).astype(np.int64)).tolist(),
        **_dressing(rng, n),
    }
    facts = [
        ("teacher", vocab.PERSON_TEACHER),
        ("employer", vocab.PERSON_EMPLOYER),
        ("org_f", vocab.PERSON_FOUNDED),
        ("work", vocab.PERSON_WROTE),
        ("gov_region", vocab.PERSON_GOVERNED),
    ]
    return _render(columns, vocab.PERSON_LEAD, facts, vocab.PERSON_FILLER, rng, bar)


def _org_passages(f: Facts, rng: np.random.Generator, bar: tqdm) -> list[str]:
    """Organisation articles: what it is, when it was founded, by whom, and where it is based."""
    n = len(f.org_names)
    columns: Columns = {
        "name": f.org_names,
        "kind_l": [vocab.ORG_KINDS[k][0].lower() for k in f.org_kind.tolist()],
        "a_desc": [vocab.with_article(vocab.ORG_KINDS[k][1]) for k in f.org_kind.tolist()],
        "fy": f.org_founded.tolist(),
        "founder": _lookup(f.person_names, f.founder),
        "seat": _lookup(f.city_names, f.seat),
        "city2": _lookup(f.city_names, rng.integers(0, len(f.city_names), size=n)),
        "person2": _lookup(f.person_names, rng.integers(0, len(f.person_names), size=n)),
        "org2": _lookup(f.org_names, _others(rng, n)),
        "year2": _years(rng, f.org_founded, 3, 60),
        "year3": _years(rng, f.org_founded, 61, 140),
        "year4": _years(rng, f.org_founded, 141, 220),
        **_dressing(rng, n),
    }
    facts = [("founder", vocab.ORG_FOUNDER), ("seat", vocab.ORG_SEAT)]
    return _render(columns, vocab.ORG_LEAD, facts, vocab.ORG_FILLER, rng, bar)


def _city_passages(f: Facts, rng: np.random.Generator, bar: tqdm) -> list[str]:
    """Place articles: kind of settlement, region, founding year, and whether it is a regional capital."""
    n = len(f.city_names)
    capital_of = np.full(n, -1)
    capital_of[f.capital] = np.arange(len(f.capital))
    columns: Columns = {
        "name": f.city_names,
        "settle": np.asarray(vocab.SETTLEMENTS, dtype=object)[f.settlement].tolist(),
        "region": _lookup(f.region_names, f.region_of),
        "capital_of": _lookup(f.region_names, capital_of),
        "fy": f.city_founded.tolist(),
        "river": _lookup(f.river_names, f.river),
        "city2": _lookup(f.city_names, _others(rng, n)),
        "city3": _lookup(f.city_names, _others(rng, n)),
        "person2": _lookup(f.person_names, rng.integers(0, len(f.person_names), size=n)),
        "org2": _lookup(f.org_names, rng.integers(0, len(f.org_names), size=n)),
        "year2": _years(rng, f.city_founded, 40, 150),
        "year3": _years(rng, f.city_founded, 151, 300),
        "year4": _years(rng, f.city_founded, 301, 450),
        "year5": _years(rng, f.city_founded, 60, 400),
        **_dressing(rng, n),
    }
    return _render(columns, vocab.CITY_LEAD, [("capital_of", vocab.CITY_CAPITAL)], vocab.CITY_FILLER, rng, bar)


def _region_passages(f: Facts, rng: np.random.Generator, bar: tqdm) -> list[str]:
    """Region articles: kind of region, its capital and its first governor."""
    n = len(f.region_names)
    rkind = np.asarray(vocab.REGION_KINDS, dtype=object)[f.region_kind].tolist()
    columns: Columns = {
        "name": f.region_names,
        "rkind": rkind,
        "a_rkind": [vocab.with_article(k) for k in rkind],
        "capital": _lookup(f.city_names, f.capital),
        "gov": _lookup(f.person_names, f.governor),
        "gy": f.governor_year.tolist(),
        "region2": _lookup(f.region_names, _others(rng, n)),
        "region3": _lookup(f.region_names, _others(rng, n)),
        "river": _lookup(f.river_names, rng.integers(0, len(f.river_names), size=n)),
        "year2": _years(rng, np.full(n, 1550), 0, 350),
        "year3": _years(rng, np.full(n, 1550), 0, 350),
        "year4": _years(rng, np.full(n, 1550), 0, 350),
        **_dressing(rng, n),
    }
    return _render(columns, vocab.REGION_LEAD, [("gov", vocab.REGION_GOVERNOR)], vocab.REGION_FILLER, rng, bar)


def _work_passages(f: Facts, rng: np.random.Generator, bar: tqdm) -> list[str]:
    """Articles about books and poems: genre, author and year of first publication."""
    n = len(f.work_names)
    genre = np.asarray(vocab.GENRES, dtype=object)[f.genre].tolist()
    columns: Columns = {
        "name": f.work_names,
        "genre": genre,
        "a_genre": [vocab.with_article(g) for g in genre],
        "author": _lookup(f.person_names, f.author),
        "wy": f.published.tolist(),
        "city2": _lookup(f.city_names, rng.integers(0, len(f.city_names), size=n)),
        "person2": _lookup(f.person_names, rng.integers(0, len(f.person_names), size=n)),
        "org2": _lookup(f.org_names, rng.integers(0, len(f.org_names), size=n)),
        "work2": _lookup(f.work_names, _others(rng, n)),
        "year2": _years(rng, f.published, 2, 30),
        "year3": _years(rng, f.published, 31, 80),
        "year4": _years(rng, f.published, 1, 10),
        **_dressing(rng, n),
    }
    return _render(columns, vocab.WORK_LEAD, [], vocab.WORK_FILLER, rng, bar)


_RENDERERS = {
    "person": _person_passages,
    "org": _org_passages,
    "city": _city_passages,
    "region": _region_passages,
    "work": _work_passages,
}


def render_texts(facts: Facts, kind: str, rng: np.random.Generator, bar: tqdm) -> list[str]:
    """The passage texts of every entity of ``kind``, by entity index; ``bar`` is a tqdm-like progress bar."""
    return _RENDERERS[kind](facts, rng, bar)
