"""Declarative reward specs: a small YAML file names a formula and its parameters; :func:`load_reward` builds it.

A spec file is a mapping: ``formula`` plus that formula's keys (``metric``, ``lambda_f``, …), optionally
``name``, ``description`` and ``base`` (a built-in name or another spec file whose keys this one overrides).
The built-in specs are files of the same kind in ``specs/``; the formulas are in
:mod:`searchenv.reward_specs.formulas`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import fields
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from searchenv.checks import did_you_mean
from searchenv.episode.reward_contract import RewardSpec
from searchenv.reward_specs.formulas import FORMULAS, RewardSpecError

__all__ = ["REWARD_SPECS", "load_reward"]

_BUILTIN_FILES = {
    "em": "em.yaml",
    "f1": "f1.yaml",
    "cem": "cem.yaml",
    "format": "format.yaml",
    "format-retrieval": "format_retrieval.yaml",
    "r1-searcher-stage1": "r1_searcher_stage1.yaml",
    "r1-searcher-stage2": "r1_searcher_stage2.yaml",
    "r-search": "r_search.yaml",
    "judge": "judge.yaml",
    "hop-credit": "hop_credit.yaml",
}
REWARD_SPECS: tuple[str, ...] = tuple(_BUILTIN_FILES)
_MAX_BASE_DEPTH = 8


# -- loading -------------------------------------------------------------------------------------------------------
def _canonical(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def _read_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise RewardSpecError(f"reward spec file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))  # JSON is valid YAML
    except yaml.YAMLError as exc:
        raise RewardSpecError(f"reward spec file {path} is not valid YAML/JSON: {exc}") from exc
    if not isinstance(data, Mapping):
        raise RewardSpecError(
            f"reward spec file {path} must hold a mapping with a 'formula' key, got {type(data).__name__}"
        )
    return dict(data)


def _read_builtin(name: str) -> dict[str, Any]:
    text = resources.files("searchenv.reward_specs").joinpath("specs", _BUILTIN_FILES[name]).read_text(encoding="utf-8")
    data = dict(yaml.safe_load(text))
    data.setdefault("name", name)
    return data


def _resolve_mapping(spec: str | os.PathLike[str], relative_to: Path | None = None) -> dict[str, Any]:
    """The raw mapping behind a built-in name or a spec file path."""
    if isinstance(spec, str) and _canonical(spec) in _BUILTIN_FILES:
        return _read_builtin(_canonical(spec))
    path = Path(spec)
    if relative_to is not None and not path.is_absolute():
        path = relative_to / path
    if isinstance(spec, str) and not path.suffix and not path.exists():
        hint = did_you_mean(_canonical(spec), REWARD_SPECS)
        raise RewardSpecError(
            f"unknown reward spec {spec!r}{hint}; choose one of {list(REWARD_SPECS)}, "
            "or give a path to a .yaml/.json spec file, a mapping, or an object with name and __call__"
        )
    data = _read_file(path)
    data.setdefault("name", path.stem)
    data["_dir"] = path.parent
    return data


def _merge_bases(data: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    """Apply ``base``: the base spec's keys, overridden by this one's."""
    if "base" not in data:
        return data
    if depth >= _MAX_BASE_DEPTH:
        raise RewardSpecError(f"reward spec 'base' chain deeper than {_MAX_BASE_DEPTH} (a cycle?)")
    own = dict(data)
    base_ref = own.pop("base")
    if not isinstance(base_ref, (str, os.PathLike)):
        raise RewardSpecError(f"reward spec 'base' must be a built-in name or a file path, got {base_ref!r}")
    base = _merge_bases(_resolve_mapping(base_ref, own.get("_dir")), depth + 1)
    base.pop("name", None)
    return {**base, **own}


def _build(data: Mapping[str, Any]) -> RewardSpec:
    data = _merge_bases(dict(data))
    data.pop("_dir", None)
    formula = data.pop("formula", None)
    if formula is None:
        raise RewardSpecError(f"reward spec has no 'formula' key; choose one of {sorted(FORMULAS)}")
    cls = FORMULAS.get(formula.replace("-", "_")) if isinstance(formula, str) else None
    if cls is None:
        raise RewardSpecError(f"unknown reward formula {formula!r}; choose one of {sorted(FORMULAS)}")
    valid = [f.name for f in fields(cls) if f.init]
    for key in data:
        if key not in valid:
            hint = did_you_mean(key, valid)
            raise RewardSpecError(f"unknown key {key!r} for formula {cls.formula!r}{hint}; valid keys: {valid}")
    data.setdefault("name", cls.formula)
    for key in ("name", "description"):
        if not isinstance(data.get(key, ""), str):
            raise RewardSpecError(f"reward spec {key!r} must be a string, got {data[key]!r}")
    return cls(**data)


def load_reward(spec: str | os.PathLike[str] | Mapping[str, Any] | RewardSpec, **overrides: Any) -> RewardSpec:
    """Build a reward from a built-in name, a YAML/JSON spec file, a mapping, or pass a ready object through.

    Built-in names (``-`` and ``_`` both accepted): ``em``, ``f1``, ``cem``, ``format``, ``format-retrieval``,
    ``r1-searcher-stage1``, ``r1-searcher-stage2``, ``r-search``, ``judge``, ``hop-credit``. ``overrides`` replace
    keys of the spec, e.g. ``load_reward("format", lambda_f=0.4)``, ``load_reward("r-search", answerer=my_answerer)`` or
    ``load_reward("judge", url="http://127.0.0.1:8000", model="served-name")``.
    Any problem (unknown name, formula or key, out-of-range λ, missing answerer) raises ``ValueError`` at
    load time, never at the first reward.
    """
    if isinstance(spec, (str, os.PathLike)):
        data = _resolve_mapping(spec)
    elif isinstance(spec, Mapping):
        data = dict(spec)
    elif isinstance(spec, RewardSpec):
        if overrides:
            raise RewardSpecError(f"cannot apply overrides {sorted(overrides)} to a ready reward object {spec!r}")
        return spec
    else:
        raise RewardSpecError(
            f"cannot make a reward from {type(spec).__name__}; pass a name from {list(REWARD_SPECS)}, "
            "a spec file path, a mapping, or an object with a 'name' and __call__(rollout) -> RewardResult"
        )
    data.update(overrides)
    return _build(data)
