"""Render the fact tables of :mod:`searchenv.data.world.facts` as ~100-word wiki-style passages.

One passage per entity, titled with its name: a lead sentence, one sentence per relation the entity has
(the facts questions ask about, plus reverse mentions such as "she founded X"), then filler sentences until
the passage reaches about :data:`TARGET_WORDS` words, as wiki-18's 100-word DPR passages do. Fillers mention
other entities of the world in roles the questions never ask about ("spent several winters in Quarnessa"),
which is what makes them near-miss distractors for a reader and for a lexical retriever.

Rendering is split in two so that a 21M-passage world streams to disk in bounded memory:
:func:`draw_passages` draws every random choice of a kind up front (compact numpy arrays, in one fixed order,
so the seed alone fixes the world), and :meth:`KindPassages.render` turns any set of entity indices into
texts, materialising Python values only for those rows. Each slot is a *column*: a function from entity
indices to the slot's values; rows are zipped out of the columns and fill templates rewritten to
positional slots, so no per-passage dict is built.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import gcd

import numpy as np

from searchenv.data.world import vocab
from searchenv.data.world.facts import Facts, smallest_ints

__all__ = ["TARGET_WORDS", "KindPassages", "draw_passages"]

TARGET_WORDS = 95  # fillers are added until a passage has at least this many words
_SLOT = re.compile(r"\{(\w+)\}")
LAST_YEAR = 2020  # filler dates stay in the past

_PRONOUNS = {
    "Pron": ("He", "She"),
    "pron": ("he", "she"),
    "Poss": ("His", "Her"),
    "poss": ("his", "her"),
    "obj": ("him", "her"),
}

Column = Callable[[np.ndarray], list]  # entity indices -> the slot's value for each
Columns = dict[str, Column]
FactSpec = tuple[str, tuple[str, ...]]  # (slot that must not be None, templates stating the fact)


def _compact(values: np.ndarray) -> np.ndarray:
    """The draws of a 21M world are kept until rendering: store them in the narrowest integer type."""
    return smallest_ints(values)


def _values(values: np.ndarray) -> Column:
    """A column read straight from a per-entity array."""
    return lambda index: values[index].tolist()


def _names(names: Sequence[str]) -> Column:
    """A column of the entities' own names."""
    return lambda index: [names[i] for i in index.tolist()]


def _choice(options: Sequence, codes: np.ndarray) -> Column:
    """A column holding ``options[codes[i]]`` for each entity."""
    table = np.asarray(options, dtype=object)
    return lambda index: table[codes[index]].tolist()


def _pick(rng: np.random.Generator, count: int, options: Sequence) -> Column:
    """``count`` uniform choices from ``options``, drawn now."""
    return _choice(options, _compact(rng.integers(0, len(options), size=count)))


def _lookup(values: Sequence, target: np.ndarray) -> Column:
    """``values[target[i]]`` for each entity, or None where ``target[i]`` is -1 (relation absent)."""
    return lambda index: [values[j] if j >= 0 else None for j in target[index].tolist()]


def _random_lookup(rng: np.random.Generator, values: Sequence, count: int) -> Column:
    """For each of ``count`` entities, a random entry of ``values``, drawn now."""
    return _lookup(values, _compact(rng.integers(0, len(values), size=count)))


def _with_article(column: Column) -> Column:
    """The values of ``column`` with "a"/"an" in front."""
    return lambda index: [vocab.with_article(x) for x in column(index)]


def _others(rng: np.random.Generator, count: int) -> np.ndarray:
    """For each of ``count`` entities, another entity of the same kind (never itself)."""
    draw = rng.integers(0, count - 1, size=count)
    return _compact(draw + (draw >= np.arange(count)))


def _years(rng: np.random.Generator, base: np.ndarray, low: int, high: int) -> Column:
    """Dates relative to each entity's own: ``base`` plus a uniform offset in ``[low, high]``, capped at
    :data:`LAST_YEAR`."""
    return _values(_compact(np.minimum(base + rng.integers(low, high + 1, size=len(base)), LAST_YEAR)))


def _filler_orders(rng: np.random.Generator, count: int, fillers: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """A start and a step per passage; stepping through the fillers modulo their number visits each once.

    Steps are coprime with the number of fillers, so an order never repeats a sentence; this gives every
    passage its own filler order without drawing a permutation per passage.
    """
    steps = np.array([s for s in range(1, len(fillers)) if gcd(s, len(fillers)) == 1])
    start = _compact(rng.integers(0, len(fillers), size=count))
    return start, _compact(steps[rng.integers(0, len(steps), size=count)])


def _positional(templates: tuple[str, ...], keys: list[str]) -> tuple[str, ...]:
    """Rewrite named slots as positions in ``keys`` ("{name}" → "{0}"), so a row tuple fills them directly."""
    index = {key: i for i, key in enumerate(keys)}
    return tuple(_SLOT.sub(lambda m: f"{{{index[m.group(1)]}}}", t) for t in templates)


@dataclass
class KindPassages:
    """Every random choice behind the passages of one entity kind, drawn; texts rendered on demand."""

    columns: Columns
    lead: tuple[str, ...]
    facts: list[tuple[int, tuple[str, ...], np.ndarray]]  # (gate slot position, templates, choice per entity)
    fillers: tuple[str, ...]
    lead_choice: np.ndarray
    start: np.ndarray
    step: np.ndarray

    @classmethod
    def draw(
        cls,
        columns: Columns,
        lead: tuple[str, ...],
        facts: Sequence[FactSpec],
        fillers: tuple[str, ...],
        rng: np.random.Generator,
        count: int,
    ) -> KindPassages:
        keys = list(columns)
        lead = _positional(lead, keys)
        fillers = _positional(fillers, keys)
        lead_choice = _compact(rng.integers(0, len(lead), size=count))
        start, step = _filler_orders(rng, count, fillers)
        fact_specs = [
            (keys.index(slot), _positional(templates, keys), _compact(rng.integers(0, len(templates), size=count)))
            for slot, templates in facts
        ]
        return cls(columns, lead, fact_specs, fillers, lead_choice, start, step)

    def render(self, index: np.ndarray) -> list[str]:
        """The texts of the entities at ``index``: lead, present facts, then fillers up to ``TARGET_WORDS``."""
        lead, fillers = self.lead, self.fillers
        lead_choice, start, step = (a[index].tolist() for a in (self.lead_choice, self.start, self.step))
        facts = [(gate, templates, choice[index].tolist()) for gate, templates, choice in self.facts]
        texts = []
        rows = zip(*(column(index) for column in self.columns.values()), strict=True)
        for i, row in enumerate(rows):
            sentences = [lead[lead_choice[i]].format(*row)]
            for gate, templates, choice in facts:
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
        "a_colour": _with_article(colour),
        "noun": noun,
        "a_noun": _with_article(noun),
        "noun2": noun2,
        "a_noun2": _with_article(noun2),
        "topic": _pick(rng, count, vocab.TOPICS),
        "product": _pick(rng, count, vocab.PRODUCTS),
        "num": _values(_compact(rng.integers(2, 10, size=count))),
    }


def _person_passages(f: Facts, rng: np.random.Generator) -> KindPassages:
    """Biographies: birth and death, teacher, employer, and what the person founded, wrote or governed."""
    n = len(f.person_names)
    occupation = _choice(vocab.OCCUPATIONS, f.occupation)
    female = f.female.astype(np.int8)
    # Reverse relations; where one is absent (-1) its year column holds junk that no template reads.
    founded, wrote, governed = f.founded_org, f.wrote_work, f.governed
    columns: Columns = {
        "name": _names(f.person_names),
        **{slot: _choice(forms, female) for slot, forms in _PRONOUNS.items()},
        "occ": occupation,
        "a_occ": _with_article(occupation),
        "by": _values(f.birth_year),
        "dy": _values(f.death_year),
        "bp": _lookup(f.city_names, f.birthplace),
        "teacher": _lookup(f.person_names, f.teacher),
        "employer": _lookup(f.org_names, f.employer),
        "ey": _values(f.joined_year),
        "org_f": _lookup(f.org_names, founded),
        "fy": lambda index: f.org_founded[founded[index]].tolist(),
        "work": _lookup(f.work_names, wrote),
        "wy": lambda index: f.published[wrote[index]].tolist(),
        "gov_region": _lookup(f.region_names, governed),
        "gy": lambda index: f.governor_year[governed[index]].tolist(),
        "city2": _random_lookup(rng, f.city_names, n),
        "city3": _random_lookup(rng, f.city_names, n),
        "city4": _random_lookup(rng, f.city_names, n),
        "person2": _lookup(f.person_names, _others(rng, n)),
        "org2": _random_lookup(rng, f.org_names, n),
        "trait": _pick(rng, n, vocab.TRAITS),
        "year2": _years(rng, f.birth_year, 18, 30),
        "year3": _years(rng, f.birth_year, 31, 44),
        "year4": _years(rng, f.death_year, 20, 150),
        "year5": _values(
            _compact(f.birth_year + 45 + (rng.random(n) * (f.death_year - f.birth_year - 44)).astype(np.int64))
        ),
        **_dressing(rng, n),
    }
    facts = [
        ("teacher", vocab.PERSON_TEACHER),
        ("employer", vocab.PERSON_EMPLOYER),
        ("org_f", vocab.PERSON_FOUNDED),
        ("work", vocab.PERSON_WROTE),
        ("gov_region", vocab.PERSON_GOVERNED),
    ]
    return KindPassages.draw(columns, vocab.PERSON_LEAD, facts, vocab.PERSON_FILLER, rng, n)


def _org_passages(f: Facts, rng: np.random.Generator) -> KindPassages:
    """Organisation articles: what it is, when it was founded, by whom, and where it is based."""
    n = len(f.org_names)
    columns: Columns = {
        "name": _names(f.org_names),
        "kind_l": _choice([kind.lower() for kind, _ in vocab.ORG_KINDS], f.org_kind),
        "a_desc": _choice([vocab.with_article(desc) for _, desc in vocab.ORG_KINDS], f.org_kind),
        "fy": _values(f.org_founded),
        "founder": _lookup(f.person_names, f.founder),
        "seat": _lookup(f.city_names, f.seat),
        "city2": _random_lookup(rng, f.city_names, n),
        "person2": _random_lookup(rng, f.person_names, n),
        "org2": _lookup(f.org_names, _others(rng, n)),
        "year2": _years(rng, f.org_founded, 3, 60),
        "year3": _years(rng, f.org_founded, 61, 140),
        "year4": _years(rng, f.org_founded, 141, 220),
        **_dressing(rng, n),
    }
    facts = [("founder", vocab.ORG_FOUNDER), ("seat", vocab.ORG_SEAT)]
    return KindPassages.draw(columns, vocab.ORG_LEAD, facts, vocab.ORG_FILLER, rng, n)


def _city_passages(f: Facts, rng: np.random.Generator) -> KindPassages:
    """Place articles: kind of settlement, region, founding year, and whether it is a regional capital."""
    n = len(f.city_names)
    capital_of = np.full(n, -1, dtype=np.int32)
    capital_of[f.capital] = np.arange(len(f.capital))
    columns: Columns = {
        "name": _names(f.city_names),
        "settle": _choice(vocab.SETTLEMENTS, f.settlement),
        "region": _lookup(f.region_names, f.region_of),
        "capital_of": _lookup(f.region_names, capital_of),
        "fy": _values(f.city_founded),
        "river": _lookup(f.river_names, f.river),
        "city2": _lookup(f.city_names, _others(rng, n)),
        "city3": _lookup(f.city_names, _others(rng, n)),
        "person2": _random_lookup(rng, f.person_names, n),
        "org2": _random_lookup(rng, f.org_names, n),
        "year2": _years(rng, f.city_founded, 40, 150),
        "year3": _years(rng, f.city_founded, 151, 300),
        "year4": _years(rng, f.city_founded, 301, 450),
        "year5": _years(rng, f.city_founded, 60, 400),
        **_dressing(rng, n),
    }
    return KindPassages.draw(columns, vocab.CITY_LEAD, [("capital_of", vocab.CITY_CAPITAL)], vocab.CITY_FILLER, rng, n)


def _region_passages(f: Facts, rng: np.random.Generator) -> KindPassages:
    """Region articles: kind of region, its capital and its first governor."""
    n = len(f.region_names)
    rkind = _choice(vocab.REGION_KINDS, f.region_kind)
    columns: Columns = {
        "name": _names(f.region_names),
        "rkind": rkind,
        "a_rkind": _with_article(rkind),
        "capital": _lookup(f.city_names, f.capital),
        "gov": _lookup(f.person_names, f.governor),
        "gy": _values(f.governor_year),
        "region2": _lookup(f.region_names, _others(rng, n)),
        "region3": _lookup(f.region_names, _others(rng, n)),
        "river": _random_lookup(rng, f.river_names, n),
        "year2": _years(rng, np.full(n, 1550), 0, 350),
        "year3": _years(rng, np.full(n, 1550), 0, 350),
        "year4": _years(rng, np.full(n, 1550), 0, 350),
        **_dressing(rng, n),
    }
    facts = [("gov", vocab.REGION_GOVERNOR)]
    return KindPassages.draw(columns, vocab.REGION_LEAD, facts, vocab.REGION_FILLER, rng, n)


def _work_passages(f: Facts, rng: np.random.Generator) -> KindPassages:
    """Articles about books and poems: genre, author and year of first publication."""
    n = len(f.work_names)
    genre = _choice(vocab.GENRES, f.genre)
    columns: Columns = {
        "name": _names(f.work_names),
        "genre": genre,
        "a_genre": _with_article(genre),
        "author": _lookup(f.person_names, f.author),
        "wy": _values(f.published),
        "city2": _random_lookup(rng, f.city_names, n),
        "person2": _random_lookup(rng, f.person_names, n),
        "org2": _random_lookup(rng, f.org_names, n),
        "work2": _lookup(f.work_names, _others(rng, n)),
        "year2": _years(rng, f.published, 2, 30),
        "year3": _years(rng, f.published, 31, 80),
        "year4": _years(rng, f.published, 1, 10),
        **_dressing(rng, n),
    }
    return KindPassages.draw(columns, vocab.WORK_LEAD, [], vocab.WORK_FILLER, rng, n)


_DRAWERS = {
    "person": _person_passages,
    "org": _org_passages,
    "city": _city_passages,
    "region": _region_passages,
    "work": _work_passages,
}


def draw_passages(facts: Facts, kind: str, rng: np.random.Generator) -> KindPassages:
    """Draw every random choice behind the passages of ``kind``; render texts later with ``.render(index)``."""
    return _DRAWERS[kind](facts, rng)
