"""The ``searchenv`` command: clear errors for wrong arguments, play through stdin, world generation."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from searchenv.cli import main


def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "searchenv.cli", *args], input=stdin, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--episodes", "0"], "expected a positive integer, got 0"),
        (["play", "--topk", "three"], "expected a positive integer, got 'three'"),
        (["nonsense"], "invalid choice: 'nonsense'"),
        ([], "the following arguments are required: COMMAND"),
        (["world"], "the following arguments are required: --output"),
    ],
)
def test_wrong_arguments_exit_2_with_message(argv, message, capsys):
    with pytest.raises(SystemExit) as excinfo:
        main(argv)
    assert excinfo.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_values_reach_the_user_as_one_line(capsys):
    assert main(["play", "--retriever", "nope", "--episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("searchenv play: error: unknown retriever 'nope'") and "Traceback" not in err


def test_play_reads_actions_from_stdin():
    out = run_cli(
        "play", "--split", "train", "--seed", "0", stdin="<search> Brosara founded </search>\n<answer> 999 </answer>\n"
    )
    assert out.returncode == 0, out.stderr
    assert "In what year was Brosara founded?" in out.stdout
    assert "<information>Doc 1(Title: Brosara)" in out.stdout
    assert "reward 1.000  prediction '999'" in out.stdout


def test_world_writes_corpus_and_splits(tmp_path):
    assert main(["world", "--passages", "300", "--seed", "3", "--output", str(tmp_path)]) == 0
    rows = [json.loads(line) for line in (tmp_path / "corpus.jsonl").read_text().splitlines()]
    assert len(rows) == 300 and rows[0]["contents"].startswith('"')
    test_rows = [json.loads(line) for line in (tmp_path / "test.jsonl").read_text().splitlines()]
    assert test_rows and {"id", "question", "golden_answers"} <= set(test_rows[0])


def test_help_is_light():
    code = (
        "import sys; from searchenv.cli import build_parser; build_parser();"
        "print(sorted({'torch', 'fastapi', 'transformers', 'pyserini'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
