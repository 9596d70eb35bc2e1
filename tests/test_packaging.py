"""The built wheel installs into a clean virtualenv, as the README's ``pip install searchenv`` does (dependencies
from the index, no extras), and runs the README's first example there, from outside the source tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from readme_example import check_quickstart_output, quickstart

import searchenv

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_in_clean_virtualenv(tmp_path):
    # Build from a copy of the tracked sources: a stale build/ folder in the checkout must not leak into the wheel.
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    source = tmp_path / "source"
    for name in tracked:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    wheel_dir = tmp_path / "wheel"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheel_dir),
            str(source),
        ],
        check=True,
        timeout=300,
    )
    (wheel,) = wheel_dir.glob("searchenv-*.whl")
    assert wheel.name.startswith(f"searchenv-{searchenv.__version__}-"), wheel.name  # the one version source
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    # searchqa.py: the one top-level module besides the package, because verifiers' loader imports a taskset by a
    # bare module name (the id "searchqa"); it only re-exports searchenv.adapters.verifiers' taskset.
    assert top_level == {"searchenv", "searchqa.py"}, (
        f"the wheel must install only searchenv (+ searchqa.py), got {top_level}"
    )
    shipped = (
        "retrievers/bm25/retriever.py",
        "retrievers/bm25/native/engine.py",
        "reward_specs/specs/em.yaml",
        "adapters/__init__.py",
        "adapters/verl/scripts/verl_train.sh",
        "adapters/verl/configs/agent_loop.yaml",
        "adapters/verl/configs/searchenv_tool.yaml",
        "evaluation/runner.py",
        "env/search_qa.py",
        "protocol/tags.py",
        "adapters/openenv/environment.py",
        "adapters/verifiers/taskset.py",
    )
    for module in shipped:
        assert f"searchenv/{module}" in names

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=600)
    clean_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    # The first run compiles the BM25 engine's numba kernels into the install (65 s of CPU measured; minutes of
    # wall time on a busy machine), later runs load them (3 s).
    out = subprocess.run(
        [str(python), "-c", quickstart()], cwd=tmp_path, capture_output=True, text=True, timeout=900, env=clean_env
    )
    assert out.returncode == 0, out.stderr
    check_quickstart_output(out.stdout)
    # The base install stays light: the README promises no torch.
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)"
    assert subprocess.run([str(python), "-c", probe], env=clean_env).returncode == 0, "the base install pulled torch"


def test_the_package_version_is_the_changelogs_newest_release() -> None:
    """One version: ``searchenv.__version__``, which pyproject.toml reads (the wheel said 0.1.0 while CHANGELOG.md's
    newest release was 0.2.0)."""
    import re

    changelog = (REPO / "CHANGELOG.md").read_text()
    newest = re.search(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.MULTILINE)
    assert newest is not None and searchenv.__version__ == newest.group(1)
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]  # no second copy
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "searchenv.__version__"}
