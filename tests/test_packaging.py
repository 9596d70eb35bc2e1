"""The built wheel installs into a clean virtualenv and runs an episode from outside the source tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

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
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top_level == {"searchenv"}, f"the wheel must install only the searchenv namespace, got {top_level}"
    shipped = (
        "retrievers/bm25/retriever.py",
        "reward_specs/specs/em.yaml",
        "adapters/__init__.py",
        "adapters/verl/scripts/verl_train.sh",
        "adapters/verl/configs/agent_loop.yaml",
        "adapters/verl/configs/searchenv_tool.yaml",
        "evaluation/runner.py",
        "env/search_qa.py",
        "protocol/tags.py",
    )
    for module in shipped:
        assert f"searchenv/{module}" in names

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=600)
    script = (
        "import gymnasium as gym\n"
        "env = gym.make('searchenv:SearchQA-v0', retriever='random', reward='format')\n"
        "prompt, info = env.reset(seed=0)\n"
        "obs, *_ = env.step('<search>' + info['question'] + '</search>')\n"
        "assert obs.startswith('\\n\\n<information>Doc 1'), obs\n"
        "result = env.step('<think>done</think><answer>' + info['golden_answers'][0] + '</answer>')\n"
        "print(result[1], result[2])\n"
    )
    clean_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    out = subprocess.run(
        [str(python), "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=clean_env
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[1] == "True"
