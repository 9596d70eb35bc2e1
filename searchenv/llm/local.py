"""A local ``transformers`` checkpoint answering short prompts (a judge, a simulated engine) on this machine.

It generates through the rollout engine every trainer uses (:class:`searchenv.rollout.HFGenerator`: batched,
left-padded, stop strings enforced by the engine), so a local judge decodes exactly as a policy does. The prompt
is wrapped in the tokenizer's chat template when it has one (an instruct model), and the reply is cut at the
first stop string, as an OpenAI-compatible server returns it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from searchenv.sampling import SamplingConfig

__all__ = ["LocalModel", "check_model_source", "local_device", "model_aliases", "model_window"]


def model_aliases() -> tuple[str, ...]:
    """The packaged models a local source may name instead of a folder (``smollm2-135m``)."""
    from searchenv.rollout.models import MODEL_ALIASES

    return tuple(MODEL_ALIASES)


def check_model_source(url: str | None, model: Any, who: str) -> None:
    """Refuse a missing model, a URL that is not http(s), or a local model that is neither a folder nor a
    packaged alias, naming the fix."""
    if not isinstance(model, str) or not model:
        raise ValueError(f"{who} needs 'model': the served model's name with 'url', or a local checkpoint folder")
    if url is not None and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        raise ValueError(f"{who}: 'url' must be an http(s):// base URL of an OpenAI-compatible server, got {url!r}")
    if url is None and model not in model_aliases() and not Path(model).is_dir():
        raise ValueError(
            f"{who}: model {model!r} is not a local checkpoint folder nor one of {sorted(model_aliases())}; "
            "give a folder, or 'url' of an OpenAI-compatible server that serves it"
        )


def local_device() -> str:
    """Where a local model runs unless told otherwise: the GPU when there is one."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class LocalModel:
    """A checkpoint folder or packaged alias, loaded on first use; one batch generates at a time.

    Args:
        model: the checkpoint folder, or a packaged alias.
        sampling: the decoding settings.
        device: the torch device (default: CUDA when there is one).
    """

    def __init__(self, model: str, sampling: SamplingConfig, device: str = ""):
        self.model = model
        self.sampling = sampling
        self.device = device
        self._loaded: tuple[Any, Any] | None = None  # (HFGenerator, tokenizer)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:  # a copy in another process loads its own weights
        return {**self.__dict__, "_loaded": None, "_lock": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def generate(self, prompts: Sequence[str], stop: Sequence[str]) -> list[str]:
        """One reply per prompt, cut at the first stop string; ``""`` for a prompt that fills the model's window."""
        import torch

        from searchenv.tokenization import encode_prompt

        with self._lock:
            engine, tokenizer = self._load()
            torch.manual_seed(self.sampling.seed)
            ids = [encode_prompt(tokenizer, prompt) for prompt in prompts]
            window = min(self.sampling.max_total_tokens, model_window(engine.model))
            caps = [min(self.sampling.max_new_tokens, window - len(i)) for i in ids]
            rows = [r for r, cap in enumerate(caps) if cap > 0]
            replies = [""] * len(prompts)
            turns = engine.generate([ids[r] for r in rows], list(stop), [caps[r] for r in rows]) if rows else []
            for r, turn in zip(rows, turns):
                replies[r] = _cut(tokenizer.decode(turn.token_ids, skip_special_tokens=True), stop)
            return replies

    def _load(self) -> tuple[Any, Any]:
        if self._loaded is None:
            from searchenv.rollout.engines import HFGenerator
            from searchenv.rollout.models import load_policy

            lm, tokenizer = load_policy(self.model)
            lm.to(self.device or local_device())
            self._loaded = (HFGenerator(lm, tokenizer, self.sampling), tokenizer)
        return self._loaded


def _cut(text: str, stop: Sequence[str]) -> str:
    """``text`` up to its first stop string (the engine may run a few tokens past it)."""
    ends = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return text[: min(ends)] if ends else text


def model_window(model: Any) -> int:
    """The model's context length (``max_position_embeddings``), so a long prompt or episode ends cleanly instead
    of crashing the engine."""
    return int(getattr(model.config, "max_position_embeddings", None) or 1 << 30)
