"""The one-file half of the atomic-write rule: a reader sees the old file or the new one, never a partial one."""

from __future__ import annotations

import json

import pytest

from searchenv.retrievers.index_store import replacing, write_json_atomic


def test_replacing_swaps_in_the_new_file_only_when_the_write_succeeds(tmp_path):
    path = tmp_path / "record.json"
    write_json_atomic(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    with pytest.raises(RuntimeError), replacing(path) as tmp:
        tmp.write_text("half a rec")
        raise RuntimeError("killed mid-write")
    assert json.loads(path.read_text()) == {"a": 1}  # the old file, untouched
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]  # and no temporary file left behind
    write_json_atomic(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
