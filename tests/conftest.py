"""Shared fixtures: paths to the real data in ../shared/data and small real tokenizers/models."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("SEARCHENV_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real QA sets and Wikipedia passages (see ../shared/data/README.md)."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"real test data not found at {SHARED_DATA}; set SEARCHENV_SHARED_DATA")
    return SHARED_DATA


@pytest.fixture(scope="session")
def qwen_tokenizer():
    """A real Qwen2.5 tokenizer (pad token ``<|endoftext|>`` is also an end-of-sequence token)."""
    transformers = pytest.importorskip("transformers")
    from searchenv.assets import qwen_tokenizer_dir

    return transformers.AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct de-quantised from its GGUF once per test session (~20 s) and saved as a regular
    checkpoint; tests that train load their own copy from here (< 1 s) so they never share mutated weights."""
    pytest.importorskip("transformers")
    from searchenv.adapters.rollout.generation import load_policy

    cache = tmp_path_factory.mktemp("models")
    load_policy("smollm2-135m", cache_dir=cache)
    return cache / "models" / "smollm2-135m"
