"""The embedded knowledge world: a generated wiki of invented people, places, organisations and books.

It is the default data of ``gym.make("SearchQA-v0")`` because it is a clean testbed for *learning to search*:
every name is built from syllables and every date is drawn at random, so no language model can answer a
question from memory, and every answer chain is guaranteed to be findable. A question of ``h`` hops follows
``h`` relations from a named entity ("Where was the founder of Valtmora Guild born?"); hop ``i``'s fact is
stated in the passage of the entity reached at hop ``i-1``, whose title is that entity's name, so a query
built from the previous hop's answer retrieves it.

>>> world = generate_world(500, seed=1)
>>> len(world.corpus), world.questions[0].metadata["hops"] in (1, 2, 3, 4)
(500, True)

Splits are fact-disjoint: no (entity, relation) fact used by a test question is used by any train question,
so a policy cannot pass the test split by memorising answers it saw during training — it has to search.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from searchenv.checks import integer
from searchenv.corpus import Corpus, corpus_line
from searchenv.data.world import vocab
from searchenv.data.world.facts import ENTITY_KINDS, Facts, build_facts
from searchenv.data.world.passages import draw_passages
from searchenv.types import QAExample

__all__ = [
    "DEFAULT_WORLD",
    "MIN_PASSAGES",
    "SPLITS",
    "World",
    "default_questions",
    "default_test_questions",
    "default_world",
    "generate_world",
    "write_world",
]

MIN_PASSAGES = 100
MAX_PASSAGES = 30_000_000  # wiki-18 holds 21M; beyond this the fact tables alone outgrow a 24 GB machine
SPLITS = ("train", "test")
TEST_SHARE = 0.1
HOP_WEIGHTS = {1: 0.2, 2: 0.35, 3: 0.3, 4: 0.15}
DATA_SOURCE = "searchenv-world"
# Small enough that generating it and indexing it with BM25 takes well under a second. Its question count is the
# default rule's (:func:`default_questions`), so generate_world(2000) and `searchenv world` give this very world.
DEFAULT_WORLD = {"num_passages": 2000, "seed": 0, "num_questions": 1000}
#: Questions per passage when none are asked for (the embedded world's 1,000 for 2,000), at most 50,000 in all.
QUESTIONS_PER_PASSAGE = 0.5
MAX_DEFAULT_QUESTIONS = 50_000


@dataclass(frozen=True)
class _Relation:
    """A functional relation: each ``subject`` entity has at most one object (an entity or a year)."""

    name: str
    subject: str
    object: str  # an entity kind, or "year"
    column: str  # the Facts array holding the object of every subject


RELATIONS = (
    _Relation("birthplace", "person", "city", "birthplace"),
    _Relation("birth_year", "person", "year", "birth_year"),
    _Relation("employer", "person", "org", "employer"),
    _Relation("teacher", "person", "person", "teacher"),
    _Relation("founder", "org", "person", "founder"),
    _Relation("seat", "org", "city", "seat"),
    _Relation("founded", "org", "year", "org_founded"),
    _Relation("region", "city", "region", "region_of"),
    _Relation("city_founded", "city", "year", "city_founded"),
    _Relation("capital", "region", "city", "capital"),
    _Relation("governor", "region", "person", "governor"),
    _Relation("author", "work", "person", "author"),
    _Relation("published", "work", "year", "published"),
)


@dataclass(frozen=True)
class World:
    """A generated corpus with its questions.

    ``questions`` holds both splits (``metadata["split"]``); :meth:`dataset` returns one. Each question's
    metadata also records ``hops``, the ``relations`` followed, the ``entities`` visited, the ``chain`` of
    gold passage ids (hop ``i``'s fact is in ``chain[i]``) and ``hop_answers`` (the answer of every hop,
    the last being the question's answer) — enough to score retrieval per hop.
    """

    corpus: Corpus
    questions: list[QAExample] = field(repr=False)
    num_passages: int
    seed: int

    def dataset(self, split: str) -> list[QAExample]:
        """The questions of ``split`` (``"train"`` or ``"test"``), in generation order."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r} for the embedded world; use one of {SPLITS}")
        return [q for q in self.questions if q.metadata["split"] == split]

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write ``corpus.jsonl`` (Search-R1 layout) and ``train.jsonl`` / ``test.jsonl`` (FlashRAG rows)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.corpus.to_jsonl(directory / "corpus.jsonl")
        _write_questions(directory, self.questions)
        return directory


def _check_int(name: str, value: object, minimum: int, maximum: int, fix: str) -> int:
    """Validate an integer argument, raising a ValueError that names the argument and the fix.

    Wrong types raise ValueError too, so callers (the CLI, the env factory) handle one exception class.
    """
    return integer(value, name, minimum, maximum, fix=fix)


def default_questions(num_passages: int) -> int:
    """The question count of a world of ``num_passages`` when none is asked for: half the passages (the embedded
    world's 1,000 for 2,000), at most 50,000."""
    return max(2, min(int(num_passages * QUESTIONS_PER_PASSAGE), MAX_DEFAULT_QUESTIONS))


def default_test_questions(num_questions: int) -> int:
    """The test split's size when none is asked for: 10% of the questions, at least one."""
    return max(1, round(num_questions * TEST_SHARE))


def _check_sizes(
    num_passages: object, seed: object, num_questions: object, test_questions: object = None
) -> tuple[int, int, int, int]:
    """Validated ``(num_passages, seed, num_questions, test_questions)``; ``None`` counts become the defaults."""
    num_passages = _check_int("num_passages", num_passages, MIN_PASSAGES, MAX_PASSAGES, "pass e.g. num_passages=2000")
    seed = _check_int("seed", seed, 0, 2**63 - 1, "pass a non-negative integer seed such as 0")
    if num_questions is None:
        num_questions = default_questions(num_passages)
    num_questions = _check_int(
        "num_questions", num_questions, 2, 2 * num_passages, "ask for at most two questions per passage"
    )
    if test_questions is None:
        test_questions = default_test_questions(num_questions)
    fix = "leave at least one train question (or raise num_questions)"
    test_questions = _check_int("test_questions", test_questions, 1, num_questions - 1, fix)
    return num_passages, seed, num_questions, test_questions


class _WorldDraft:
    """Every random draw of a world, made; passage texts rendered on demand, a chunk of positions at a time.

    All draws come from one ``numpy.random.Generator`` in a fixed order (facts, each kind's passage draws,
    the interleaving permutation, the questions), so the in-memory and the streamed worlds are the same
    world: they differ only in where the rendered rows go.
    """

    def __init__(self, num_passages: int, seed: int, num_questions: int, test_questions: int | None = None):
        rng = np.random.default_rng(seed)
        self.num_passages, self.seed = num_passages, seed
        self.facts = build_facts(num_passages, rng)
        self._passages = [draw_passages(self.facts, kind, rng) for kind in ENTITY_KINDS]
        self._names = [self.facts.names(kind) for kind in ENTITY_KINDS]
        self._offsets = np.cumsum([0] + [len(names) for names in self._names])
        # Interleave the kinds so a passage id says nothing about what the passage is about.
        self._order = rng.permutation(num_passages)
        position = np.empty(num_passages, dtype=np.int64)
        position[self._order] = np.arange(num_passages)
        self.questions = _QuestionSampler(self.facts, position, rng).questions(num_questions, test_questions)

    @property
    def source(self) -> str:
        return f"searchenv-world(num_passages={self.num_passages}, seed={self.seed})"

    def rows(self, progress: bool, chunk: int = 1 << 16) -> Iterator[tuple[str, str, str]]:
        """``(id, title, text)`` of every passage in id order; memory is bounded by ``chunk``, not the world."""
        from tqdm.auto import tqdm

        with tqdm(total=self.num_passages, desc="world passages", unit="passage", disable=not progress) as bar:
            for begin in range(0, self.num_passages, chunk):
                entities = self._order[begin : begin + chunk]
                kinds = np.searchsorted(self._offsets, entities, side="right") - 1
                titles: list[str] = [""] * len(entities)
                texts: list[str] = [""] * len(entities)
                for k, passages in enumerate(self._passages):
                    slots = np.flatnonzero(kinds == k)
                    index = entities[slots] - self._offsets[k]
                    names = self._names[k]
                    for slot, i, text in zip(slots.tolist(), index.tolist(), passages.render(index), strict=True):
                        titles[slot], texts[slot] = names[i], text
                yield from zip(map(str, range(begin, begin + len(entities))), titles, texts)
                bar.update(len(entities))


def generate_world(
    num_passages: int,
    seed: int = 0,
    num_questions: int | None = None,
    *,
    test_questions: int | None = None,
    progress: bool | None = None,
) -> World:
    """Generate a world of exactly ``num_passages`` passages (one per entity) and its questions, in memory.

    The same arguments give byte-identical passages and questions in any process: every draw comes from
    one ``numpy.random.Generator`` in a fixed order; ``generate_world(2000)`` is the embedded world.
    ``num_questions`` defaults to half the passages, at most 50,000 (:func:`default_questions`);
    ``test_questions`` of them (default 10%) form the test split. The passages do not depend on either count
    (they are drawn first); the questions of both splits depend on both.
    ``progress`` shows a tqdm bar (default: only from 200,000 passages). Worlds beyond a few million
    passages belong on disk: :func:`write_world` streams the same world there in bounded memory.
    """
    draft = _WorldDraft(*_check_sizes(num_passages, seed, num_questions, test_questions))
    show = draft.num_passages >= 200_000 if progress is None else progress
    ids, titles, texts = (list(column) for column in zip(*draft.rows(show), strict=True))
    corpus = Corpus(ids, titles, texts, source=draft.source)
    return World(corpus, draft.questions, draft.num_passages, draft.seed)


def write_world(
    directory: str | os.PathLike[str],
    num_passages: int,
    seed: int = 0,
    num_questions: int | None = None,
    *,
    test_questions: int | None = None,
    progress: bool | None = None,
) -> Path:
    """Generate a world straight to ``directory``, as :meth:`World.save` writes it, without holding its passages.

    Byte-identical to ``generate_world(...).save(directory)`` for the same arguments. The passages are
    rendered and written a chunk at a time, so memory holds the names, the fact tables and the draws (about
    300 bytes per passage, 348 MiB at 1M) but no texts. ``corpus.jsonl`` is written under a
    temporary name and renamed when complete, so an interrupted run never leaves a truncated corpus behind.
    """
    draft = _WorldDraft(*_check_sizes(num_passages, seed, num_questions, test_questions))
    show = draft.num_passages >= 200_000 if progress is None else progress
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / "corpus.jsonl.partial"
    with partial.open("w", encoding="utf-8") as handle:
        handle.writelines(corpus_line(*row) for row in draft.rows(show))
    partial.replace(directory / "corpus.jsonl")
    _write_questions(directory, draft.questions)
    return directory


def _write_questions(directory: Path, questions: list[QAExample]) -> None:
    """``train.jsonl`` and ``test.jsonl``: FlashRAG rows with the world's metadata."""
    for split in SPLITS:
        with (directory / f"{split}.jsonl").open("w", encoding="utf-8") as handle:
            for q in questions:
                if q.metadata["split"] != split:
                    continue
                row = {
                    "id": q.id,
                    "question": q.question,
                    "golden_answers": list(q.golden_answers),
                    "metadata": dict(q.metadata),
                }
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def _relation_paths() -> dict[int, list[tuple[_Relation, ...]]]:
    """Every chain of 1..4 relations in which each relation's subject is the previous one's object."""
    paths: dict[int, list[tuple[_Relation, ...]]] = {1: [(r,) for r in RELATIONS]}
    for hops in range(2, max(HOP_WEIGHTS) + 1):
        paths[hops] = [(*path, r) for path in paths[hops - 1] for r in RELATIONS if path[-1].object == r.subject]
    return paths


class _QuestionSampler:
    """Samples unique, fact-disjoint train and test questions by walking relation paths from random entities."""

    def __init__(self, facts: Facts, position: np.ndarray, rng: np.random.Generator):
        self._facts = facts
        self._rng = rng
        self._paths = _relation_paths()
        # numpy arrays, not lists: at 21M entities the lists would cost gigabytes; ints are taken per hop.
        self._objects = {r.name: getattr(facts, r.column) for r in RELATIONS}
        self._names = {kind: facts.names(kind) for kind in ENTITY_KINDS}
        offsets = np.cumsum([0] + [len(facts.names(kind)) for kind in ENTITY_KINDS])
        self._offset = dict(zip(ENTITY_KINDS, offsets.tolist(), strict=False))
        self._position = position
        self._seen: set[tuple] = set()

    def questions(self, count: int, num_test: int | None = None) -> list[QAExample]:
        """``count`` questions: ``num_test`` (default 10%) for the test split first, then train questions that avoid
        every test fact."""
        num_test = default_test_questions(count) if num_test is None else num_test
        test_facts: set[tuple[str, int]] = set()
        test = self._draw("test", num_test, forbidden=set(), used=test_facts)
        return self._draw("train", count - num_test, forbidden=test_facts, used=set()) + test

    def _draw(self, split: str, count: int, forbidden: set, used: set) -> list[QAExample]:
        """Sample until ``count`` questions pass every check, or fail clearly when the world is too small.

        Random numbers are drawn in numpy batches (hop count, then uniforms for the path, the start entity
        and up to four phrasings) because per-question calls into a random generator dominate otherwise.
        """
        out: list[QAExample] = []
        budget = 50 * count + 1000
        hop_counts, weights = list(HOP_WEIGHTS), list(HOP_WEIGHTS.values())
        while len(out) < count and budget > 0:
            batch = min(budget, 2 * (count - len(out)) + 64)
            budget -= batch
            hops = self._rng.choice(hop_counts, size=batch, p=weights).tolist()
            for h, u in zip(hops, self._rng.random((batch, 6)).tolist(), strict=True):
                path = self._paths[h][int(u[0] * len(self._paths[h]))]
                example = self._walk(path, int(u[1] * len(self._names[path[0].subject])), forbidden, u[2:])
                if example is None:
                    continue
                key, facts, question, answers, metadata = example
                self._seen.add(key)
                used.update(facts)
                metadata["split"] = split
                out.append(QAExample(f"{split}-{len(out)}", question, answers, DATA_SOURCE, metadata))
                if len(out) == count:
                    break
        if len(out) < count:
            raise ValueError(
                f"could only sample {len(out)} of {count} distinct {split} questions from this world; "
                "ask for fewer num_questions or generate more num_passages"
            )
        return out

    def _walk(self, path: tuple[_Relation, ...], start: int, forbidden: set, picks: list[float]):
        """Follow ``path`` from entity ``start``; None when a relation is missing, the walk revisits an
        entity, a fact is forbidden, the question was drawn before, or an answer shows in the question."""
        key = (tuple(r.name for r in path), start)
        if key in self._seen:
            return None
        kind, index = path[0].subject, start
        visited, chain, hop_answers, facts = [(kind, index)], [], [], []
        for relation in path:
            target = int(self._objects[relation.name][index])
            fact = (relation.name, index)
            if target < 0 or fact in forbidden:
                return None
            facts.append(fact)
            chain.append(str(int(self._position[self._offset[kind] + index])))
            if relation.object == "year":
                hop_answers.append(str(target))
                break
            if (relation.object, target) in visited:
                return None
            kind, index = relation.object, target
            visited.append((kind, index))
            hop_answers.append(self._names[kind][index])
        question = _phrase(path, self._names[path[0].subject][start], picks)
        answers = self._facts.person_aliases[index] if path[-1].object == "person" else (hop_answers[-1],)
        lowered = question.lower()
        if any(a.lower() in lowered for a in answers):
            return None
        metadata = {
            "hops": len(path),
            "relations": list(key[0]),
            "entities": [self._names[k][i] for k, i in visited],
            "chain": chain,
            "hop_answers": hop_answers,
        }
        return key, facts, question, tuple(answers), metadata


def _phrase(path: tuple[_Relation, ...], start_name: str, picks: list[float]) -> str:
    """Nest one noun phrase per bridge hop ("the founder of X") inside the final hop's question.

    ``picks`` are uniforms in [0, 1), one per hop, choosing among each relation's phrasings.
    """
    phrase = start_name
    for relation, u in zip(path[:-1], picks, strict=False):
        options = vocab.NOUN_PHRASES[relation.name]
        phrase = options[int(u * len(options))].format(x=phrase)
    options = vocab.QUESTIONS[path[-1].name]
    return options[int(picks[len(path) - 1] * len(options))].format(x=phrase)


@lru_cache(maxsize=1)
def default_world() -> World:
    """The world ``gym.make("SearchQA-v0")`` uses when no dataset is given, generated once per process."""
    return generate_world(**DEFAULT_WORLD)
