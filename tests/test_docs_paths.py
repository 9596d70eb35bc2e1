"""The docs name files and folders that exist: every repository path quoted in docs/*.md and the README is there
(docs/adapters.md sent readers to `searchenv/adapters/scripts/verl_train.sh`), and docs/architecture.md's
sentence on the folders installed as sub-packages says how many `pyproject.toml` maps (it said four, listed three).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: An installed sub-package's path as users see it (``searchenv/adapters/...``), and its folder in the checkout.
_INSTALLED = {"searchenv/adapters/": "adapters/", "searchenv/retrievers/": "retrievers/"}
_INSTALLED |= {"searchenv/reward_specs/": "reward_specs/"}
_QUOTED = re.compile(
    r"`((?:searchenv|adapters|retrievers|reward_specs|bench|tests|docs)/[\w./-]+\.(?:py|sh|yaml|yml|md|json|toml))`"
)
_DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]


@pytest.mark.parametrize("doc", _DOCS, ids=lambda p: p.name)
def test_every_quoted_repository_path_exists(doc: Path) -> None:
    missing = []
    for match in _QUOTED.finditer(doc.read_text(encoding="utf-8")):
        path = match.group(1)
        candidates = [
            path,
            *(folder + path[len(name) :] for name, folder in _INSTALLED.items() if path.startswith(name)),
        ]
        if not any((ROOT / c).exists() for c in candidates):
            missing.append(path)
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


def test_the_architecture_counts_the_folders_pyproject_installs() -> None:
    tomllib = pytest.importorskip("tomllib")
    mapped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    folders = sorted(f"`{path}/`" for name, path in mapped.items() if name != "searchenv")
    text = " ".join((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").split())
    sentence = next(s for s in text.split(". ") if "installed as sub-packages of `searchenv`" in s)
    words = {1: "One", 2: "Two", 3: "Three", 4: "Four", 5: "Five"}
    assert sentence.startswith(f"{words[len(folders)]} folders"), sentence
    assert all(folder in sentence for folder in folders), (folders, sentence)


def test_the_changelog_has_one_unreleased_section_with_each_kind_once() -> None:
    """Keep a Changelog: one unreleased section, on top (there were two, ``Unreleased`` and ``[0.2.0] - unreleased``),
    and within each release one subsection per kind of change."""
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.split(r"(?m)^## ", text)[1:]
    unreleased = [r.split("\n", 1)[0] for r in releases if "unreleased" in r.split("\n", 1)[0].lower()]
    assert unreleased == [releases[0].split("\n", 1)[0]], unreleased  # one, and the newest (the version it will be)
    for release in releases:
        kinds = re.findall(r"(?m)^### (.+)$", release)
        assert len(kinds) == len(set(kinds)), (release.split("\n", 1)[0], kinds)
