"""A base install (``pip install searchenv``, no extras) names the extra a command needs, before its work.

A missing optional module is simulated as Python sees one: ``sys.modules[name] = None`` makes ``import name`` raise
``ModuleNotFoundError`` and ``importlib.util.find_spec(name)`` return ``None``, as on a machine without it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from searchenv.cli.main import main
from searchenv.extras import COMMAND_EXTRAS, MODULE_EXTRAS

ROOT = Path(__file__).resolve().parents[1]
#: Import names whose distribution is spelt otherwise.
DISTRIBUTIONS = {"faiss": "faiss-cpu", "rank_bm25": "rank-bm25", "skyrl_gym": "skyrl-gym", "trafilatura": "trafilatura"}


def without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """``modules`` as if not installed; our modules that imported one of them are imported afresh (then fail)."""
    import sys

    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)
    for name, module in list(sys.modules.items()):
        if name.startswith("searchenv.") and any(
            getattr(value, "__name__", "").split(".")[0] in modules for value in vars(module).values()
        ):
            monkeypatch.delitem(sys.modules, name)


@pytest.fixture(scope="module")
def world_corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("world")
    assert main(["world", "--passages", "300", "--output", str(folder)]) == 0
    return str(folder / "corpus.jsonl")


@pytest.mark.parametrize(
    ("argv", "missing", "extra"),
    [
        (["demo", "--episodes", "1"], ("torch", "transformers"), "dense"),
        (["serve", "--retriever", "random", "--corpus", "CORPUS", "--port", "0"], ("uvicorn", "fastapi"), "server"),
        (["eval", "--datasets", "world", "--limit", "1", "--output", "OUT"], ("torch", "transformers"), "dense"),
        (
            [
                "eval",
                "--datasets",
                "world",
                "--limit",
                "1",
                "--output",
                "OUT",
                "--policy",
                "endpoint",
                "--endpoint",
                "http://127.0.0.1:9/v1",
            ],
            ("httpx",),
            "eval",
        ),
        (["study", "--dataset", "world", "--engines", "random", "--output", "OUT"], ("matplotlib",), "plot"),
        (["train-ppo", "--steps", "1", "--output-dir", ""], ("torch",), "dense"),  # --help needs no torch
    ],
)
def test_a_missing_extra_is_named_in_one_error_line(
    argv: list[str],
    missing: tuple[str, ...],
    extra: str,
    world_corpus: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    without(monkeypatch, *missing)
    paths = {"CORPUS": world_corpus, "OUT": str(tmp_path / "out")}
    code = main([paths.get(a, a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"searchenv {argv[0]}: error: ") and f"pip install 'searchenv[{extra}]'" in line, err


def test_study_checks_for_plotting_before_any_engine_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    without(monkeypatch, "matplotlib")
    out = tmp_path / "study"
    assert main(["study", "--dataset", "world", "--engines", "random", "--output", str(out), "--limit", "5"]) == 2
    captured = capsys.readouterr()
    assert "R@1" not in captured.out and not out.exists()  # nothing ran, nothing was written
    assert "--no-plot" in captured.err
    assert (
        main(["study", "--dataset", "world", "--engines", "random", "--output", str(out), "--limit", "5", "--no-plot"])
        == 0
    )
    assert (out / "study.csv").exists() and not (out / "study.png").exists()


def test_every_extra_named_is_pyprojects_and_lists_the_module() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = {*MODULE_EXTRAS.items(), *((m, e) for table in COMMAND_EXTRAS.values() for m, e in table.items())}
    for module, extra in named:
        assert extra in extras, (module, extra)
        wanted = DISTRIBUTIONS.get(module, module).replace("_", "-").lower()
        listed = {re.split(r"[<>=!;\[ ]", r, maxsplit=1)[0].replace("_", "-").lower() for r in extras[extra]}
        assert wanted in listed, (module, extra, listed)
