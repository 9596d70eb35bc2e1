"""Loading a policy to train or evaluate: a local checkpoint folder, or a small model that ships inside a pip
package (the Hugging Face hub is not needed, and not reachable everywhere)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

__all__ = [
    "MODEL_ALIASES",
    "check_model",
    "gguf_tokenizer",
    "load_policy",
    "load_tokenizer",
    "model_path",
    "place_policy",
    "train_top_layers",
]

#: Short names for models that ship inside pip packages (the HF hub is not reachable everywhere).
MODEL_ALIASES = ("smollm2-135m",)


def gguf_tokenizer(gguf: Path):
    """The tokenizer stored in a GGUF file's metadata, read without the file's tensors.

    ``AutoTokenizer`` with ``gguf_file`` would also parse every tensor's header and build the model config
    (≈ 13 s against 0.7 s for SmolLM2-135M on a 2-core machine); the fast tokenizer class reads only the
    vocabulary, merges, special ids and chat template, and saves byte-identical files.
    """
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def check_model(name_or_path: str) -> None:
    """Refuse a model that cannot load, before anything else does: a packaged alias, or a local folder holding a
    ``config.json``. Commands call it first, so a mistyped ``--model`` costs no index build and leaves no output."""
    if name_or_path in MODEL_ALIASES:
        return
    path = Path(name_or_path)
    if not path.exists():
        raise FileNotFoundError(
            f"no model at {name_or_path!r}: pass a local checkpoint directory or one of {list(MODEL_ALIASES)} "
            "(the Hugging Face hub is not used)"
        )
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{name_or_path!r} holds no config.json, so it is not a checkpoint; pass the folder a trainer saved "
            f"(e.g. runs/sft/final) or one of {list(MODEL_ALIASES)}"
        )


def model_path(name_or_path: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The checkpoint folder of a local directory or a packaged alias (``"smollm2-135m"``), checked.

    A packaged GGUF model is de-quantised to a regular ``transformers`` checkpoint once (about 20 s for
    SmolLM2-135M) and saved under ``cache_dir`` (default ``$SEARCHENV_CACHE_DIR`` or ``~/.cache/searchenv``), so
    later loads take well under a second and the weights can be trained in full precision.
    """
    check_model(name_or_path)
    if name_or_path not in MODEL_ALIASES:
        return Path(name_or_path)
    from transformers import AutoModelForCausalLM

    from searchenv.cache import cache_root

    path = cache_root(cache_dir) / "models" / name_or_path
    if not (path / "config.json").exists():
        from searchenv.assets import smollm2_gguf

        gguf = smollm2_gguf()
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tokenizer = gguf_tokenizer(gguf)
        # The weights are de-quantised already; drop the GGUF marker so the checkpoint can be saved.
        model.hf_quantizer = None
        model.config.__dict__.pop("quantization_config", None)
        # Save beside the target and rename, so a concurrent or killed run never leaves half a checkpoint.
        scratch = path.with_name(f"{path.name}.partial-{os.getpid()}")
        model.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        try:
            scratch.rename(path)
        except OSError:  # another process finished first: its checkpoint is the same
            shutil.rmtree(scratch, ignore_errors=True)
    return path


def load_tokenizer(name_or_path: str, cache_dir: str | os.PathLike[str] | None = None) -> Any:
    """The policy's tokenizer alone (padding set), for checks that must run before the weights load."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path(name_or_path, cache_dir))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_policy(name_or_path: str, cache_dir: str | os.PathLike[str] | None = None, dtype: Any = "float32"):
    """Load ``(model, tokenizer)`` from a local directory or a packaged alias (``"smollm2-135m"``, see
    :func:`model_path`).

    Weights load in ``dtype``, float32 by default whatever the checkpoint declares: they are the optimizer's
    master weights, and AdamW steps of lr 1e-6 vanish in bf16 rounding (a bf16-declared Qwen2.5 would otherwise
    train in bf16). Mixed precision belongs in autocast (``PPOConfig.autocast``, TRL's ``--bf16``), not in the
    stored weights. ``dtype=None`` keeps the checkpoint's own dtype (inference).
    """
    from transformers import AutoModelForCausalLM

    path = model_path(name_or_path, cache_dir)
    tokenizer = load_tokenizer(str(path))
    if isinstance(dtype, str) and dtype != "auto":
        import torch

        dtype = getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype if dtype is not None else "auto")
    return model, tokenizer


def place_policy(model: Any, device: str | None) -> str:
    """Move ``model`` to ``device`` (default: CUDA when available) and return the device's name.

    On CUDA the attention runs eagerly: a left-padded batch has padding rows whose every key is masked, and the
    fused scaled-dot-product kernels return NaN gradients for such rows (an H200 run of the warm start turned every
    weight to NaN at step 20); eager attention's finite mask value keeps them finite, and at 135M parameters costs
    little on a GPU. CPUs keep the default attention path, which does not show the problem."""
    import torch

    name = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model.to(name)
    if name.startswith("cuda"):
        model.config._attn_implementation = "eager"
    return name


def train_top_layers(model: Any, count: int) -> None:
    """Train only the top ``count`` decoder layers and the final norm; every other weight is frozen.

    The backward pass then stops at the lowest trainable layer, so a step costs less, and the (often tied) token
    embeddings and output head keep what pre-training taught them. ``count`` may not exceed the model's layers.
    """
    decoder = model.get_decoder()
    layers = list(decoder.layers)
    if not 1 <= count <= len(layers):
        raise ValueError(f"trainable layers must be between 1 and the model's {len(layers)} layers, got {count}")
    model.requires_grad_(False)
    for layer in layers[len(layers) - count :]:
        layer.requires_grad_(True)
    decoder.norm.requires_grad_(True)
