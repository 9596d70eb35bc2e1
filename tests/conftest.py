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


MISSING_DATA = (
    f"real test data not found at {SHARED_DATA}: put the shared data folder (QA sets and passages, see its "
    "README.md) at ../shared/data beside the checkout, or point SEARCHENV_SHARED_DATA at it"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without the real data, set up ``shared_data`` before any other fixture of a test that needs it (directly or
    by way of another fixture), so the test is skipped before a model loads or an index builds."""
    if SHARED_DATA.is_dir():
        return
    for item in items:
        names = getattr(item, "fixturenames", None)
        if names and "shared_data" in names:
            names.remove("shared_data")
            names.insert(0, "shared_data")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A skip for missing data is reported at this file rather than at each test, so the summary folds them into
    one line with the count and the reason (pytest would otherwise list every skipped test)."""
    report = yield
    if report.skipped and isinstance(report.longrepr, tuple) and report.longrepr[2].endswith(MISSING_DATA):
        report.longrepr = (str(Path(__file__).relative_to(item.config.rootpath)), None, report.longrepr[2])
    return report


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real QA sets and Wikipedia passages (see ../shared/data/README.md); missing, the test is skipped."""
    if not SHARED_DATA.is_dir():
        pytest.skip(MISSING_DATA)
    return SHARED_DATA


@pytest.fixture(scope="session")
def qwen_tokenizer():
    """A real Qwen2.5 tokenizer (pad token ``<|endoftext|>`` is also an end-of-sequence token)."""
    transformers = pytest.importorskip("transformers")
    from searchenv.assets import qwen_tokenizer_dir

    return transformers.AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """SmolLM2-135M-Instruct's tokenizer, read from its GGUF's metadata alone (about a second): for tests that
    only tokenize, without :func:`smollm2_dir`'s de-quantisation of the weights."""
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from searchenv.assets import smollm2_gguf
    from searchenv.rollout import gguf_tokenizer

    return gguf_tokenizer(smollm2_gguf())


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct de-quantised from its GGUF once per test session (~20 s) and saved as a regular
    checkpoint; tests that train load their own copy from here (< 1 s) so they never share mutated weights."""
    pytest.importorskip("transformers")
    from searchenv.rollout import load_policy

    cache = tmp_path_factory.mktemp("models")
    load_policy("smollm2-135m", cache_dir=cache)
    return cache / "models" / "smollm2-135m"


@pytest.fixture(scope="session")
def transformers_server(smollm2_dir):
    """A real OpenAI-compatible server: ``transformers serve`` with SmolLM2 on loopback (one per test session)."""
    pytest.importorskip("openai", reason="transformers serve needs the openai package (the test extra)")
    from servers import serve_transformers

    try:
        with serve_transformers(smollm2_dir) as url:
            yield url
    except RuntimeError as exc:
        pytest.fail(str(exc))
