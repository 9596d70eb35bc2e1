"""The disk corpus: offset table built once and reused, rebuilt when the file changes, exact rows, checksum."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

from searchenv.corpus import Corpus, CorpusStore, DiskCorpus, cache_dir
from searchenv.types import Passage


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Every test gets its own offset-table cache, so builds are observable and nothing leaks."""
    monkeypatch.setenv("SEARCHENV_CACHE_DIR", str(tmp_path / "cache"))


def _write(path, rows) -> None:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def _tables() -> list[str]:
    return sorted(p.name for p in cache_dir().glob("*.offsets.npy"))


@pytest.fixture(scope="module")
def union(shared_data):
    return shared_data / "corpus" / "union.jsonl"


def test_union_on_disk_matches_the_in_memory_corpus_passage_for_passage(union, tmp_path):
    memory = Corpus.from_jsonl(union, in_memory=True)
    disk = Corpus.from_jsonl(union)
    assert isinstance(disk, DiskCorpus) and not isinstance(memory, DiskCorpus)
    assert len(disk) == len(memory) == 19_637
    assert list(disk) == list(memory)
    assert disk.checksum == memory.checksum
    assert [disk.search_text(i) for i in range(0, len(disk), 97)] == [
        memory.search_text(i) for i in range(0, len(memory), 97)
    ]
    # The column views behave like the lists they replace: index, negative index, slice, search.
    assert disk.ids[:5] == memory.ids[:5] and disk.titles[-1] == memory.titles[-1]
    assert disk.texts[100:103] == memory.texts[100:103]
    assert disk.ids.index(memory.ids[1234]) == 1234
    assert disk.passage(-1, 2.5) == Passage(memory.ids[-1], memory.titles[-1], memory.texts[-1], 2.5)


def test_contents_is_the_stored_field_verbatim(union):
    disk = Corpus.from_jsonl(union)
    with union.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    assert all(disk.contents(i) == rows[i]["contents"] for i in range(0, len(rows), 53))
    # Verbatim, not recomposed: union.jsonl's titles carry no quotes, Search-R1's layout would add them.
    assert disk.contents(0) != f'"{disk.titles[0]}"\n{disk.texts[0]}'


def test_offset_table_is_built_once_and_reused(tmp_path):
    path = tmp_path / "c.jsonl"
    _write(path, [{"id": str(i), "contents": f'"T{i}"\ntext {i}'} for i in range(50)])
    first = CorpusStore(path)
    table = first.table_path
    built_at = table.stat().st_mtime_ns
    second = DiskCorpus(path)
    assert second.store.table_path == table and table.stat().st_mtime_ns == built_at
    assert _tables() == [table.name]
    assert second.passage(49) == Passage("49", "T49", "text 49")


def test_changed_file_gets_a_fresh_table_and_the_stale_one_is_dropped(tmp_path):
    path = tmp_path / "c.jsonl"
    _write(path, [{"id": "a", "contents": "A\nfirst"}])
    old = DiskCorpus(path)
    _write(path, [{"id": "a", "contents": "A\nfirst"}, {"id": "b", "title": "B", "text": "second"}])
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))  # coarse clocks: force a change
    new = DiskCorpus(path)
    assert len(new) == 2 and new.passage(1) == Passage("b", "B", "second")
    assert new.contents(1) == '"B"\nsecond'  # a title/text row composes contents in Search-R1's layout
    assert new.checksum != old.checksum
    assert _tables() == [new.store.table_path.name]


def test_blank_lines_are_skipped_like_the_in_memory_reader(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "1", "contents": "A\\nx"}\n\n  \n{"id": "2", "contents": "B\\ny"}', encoding="utf-8")
    disk, memory = Corpus.from_jsonl(path), Corpus.from_jsonl(path, in_memory=True)
    assert list(disk) == list(memory) and len(disk) == 2 and disk.checksum == memory.checksum


@pytest.mark.parametrize(
    "bad_line", ['{"id": "2", "contents": "B\\ny"', '{"contents": "no id"}', '["a list"]', "\udcff"]
)
def test_a_malformed_line_names_file_and_line(tmp_path, bad_line):
    path = tmp_path / "bad.jsonl"
    _write(path, [{"id": "1", "contents": "A\nx"}])
    with path.open("a", encoding="utf-8", errors="surrogateescape") as handle:
        handle.write("\n" + bad_line + "\n")
    with pytest.raises(ValueError, match=rf"{path}:3: not a corpus row"):
        Corpus.from_jsonl(path)
    assert _tables() == []  # nothing half-built is cached


def test_empty_or_missing_file_fails_clearly(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="holds no passages"):
        Corpus.from_jsonl(empty)
    with pytest.raises(FileNotFoundError, match="corpus file not found"):
        Corpus.from_jsonl(tmp_path / "missing.jsonl")


def test_out_of_range_position_raises_index_error(tmp_path):
    path = tmp_path / "c.jsonl"
    _write(path, [{"id": "1", "contents": "A\nx"}])
    corpus = Corpus.from_jsonl(path)
    with pytest.raises(IndexError, match="out of range"):
        corpus.passage(1)


def test_memory_is_bounded_by_structure_not_by_the_file(union):
    """A disk corpus holds an int64 offset per passage (memory-mapped) and no passage strings."""
    disk = DiskCorpus(union)
    offsets = disk.store.offsets
    assert isinstance(offsets.base, np.memmap) and offsets.dtype == np.int64  # a view of the mapped table
    held = [value for value in vars(disk.ids).values() if isinstance(value, list | tuple | dict | str)]
    assert held == []


def test_disk_corpus_pickles_as_its_path_for_worker_processes(union):
    disk = DiskCorpus(union)
    clone = pickle.loads(pickle.dumps(disk))
    assert isinstance(clone, DiskCorpus) and clone.checksum == disk.checksum and clone.passage(7) == disk.passage(7)
    assert len(pickle.dumps(disk)) < 1000


def test_rewriting_a_mapped_corpus_with_to_jsonl_is_safe(tmp_path):
    path = tmp_path / "c.jsonl"
    Corpus(["1", "2"], ["A", "B"], ["x", "y"]).to_jsonl(path)
    mapped = Corpus.from_jsonl(path)
    Corpus(["9"], ["Z"], ["z"]).to_jsonl(path)  # renamed over: the open map keeps the old file
    assert mapped.passage(1) == Passage("2", "B", "y")
    assert list(Corpus.from_jsonl(path)) == [Passage("9", "Z", "z")]
