"""Dataset loading: FlashRAG jsonl, Search-R1/veRL parquet, lists of dicts, the generated world, hub names.

Every loader yields :class:`~searchenv.types.QAExample`. The seven datasets of the papers resolve by name
to the FlashRAG collection on the Hugging Face hub, with a local override (``data_dir=`` or the
``SEARCHENV_DATA_DIR`` variable pointing at a folder laid out as ``<name>/<split>.jsonl``) for machines
without hub access.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from searchenv.types import QAExample

__all__ = ["DEFAULT_SPLIT", "HUB_DATASETS", "HUB_REPO", "example_from_row", "golden_answers", "load_dataset"]

#: The split every entry point uses when none is given. An environment exists to be trained in, and a default
#: that is safe for training keeps held-out questions out of a run that did not ask for them; evaluations name
#: their split (``split="test"``, ``--split test``).
DEFAULT_SPLIT = "train"

#: The hub collection that holds the papers' QA sets (FlashRAG's jsonl layout: ``<name>/<split>.jsonl``).
HUB_REPO = "RUC-NLPIR/FlashRAG_datasets"

#: Paper dataset name → the splits FlashRAG publishes for it.
HUB_DATASETS: dict[str, tuple[str, ...]] = {
    "nq": ("train", "dev", "test"),
    "triviaqa": ("train", "dev", "test"),
    "popqa": ("test",),
    "hotpotqa": ("train", "dev"),
    "2wikimultihopqa": ("train", "dev"),
    "musique": ("train", "dev"),
    "bamboogle": ("test",),
}

_ANSWER_KEYS = ("golden_answers", "answers", "answer", "target")


def golden_answers(value: Any, where: str = "ground_truth") -> tuple[str, ...]:
    """Gold answers from any layout: a string, a list of strings, or Search-R1's ``{"target": [...]}``."""
    if isinstance(value, Mapping):  # Search-R1: {"target": [...]}; any other mapping is not a list of answers
        value = value.get("target")
    if isinstance(value, str):
        return (value,)
    if hasattr(value, "tolist"):  # numpy arrays out of parquet
        value = value.tolist()
    if isinstance(value, Iterable) and all(isinstance(a, (str, int, float)) for a in value):
        answers = tuple(str(a) for a in value)
        if answers:
            return answers
    raise ValueError(
        f"{where}: cannot read gold answers from {value!r}; expected a string, a list of strings or {{'target': [...]}}"
    )


def example_from_row(row: Mapping[str, Any], index: int = 0, data_source: str = "unknown") -> QAExample:
    """Turn one row of any supported layout into a :class:`QAExample`.

    Accepts FlashRAG rows (``question``, ``golden_answers``), common aliases (``answers``, ``answer``) and
    Search-R1/veRL rows (``prompt`` messages, ``reward_model.ground_truth`` as a string or
    ``{"target": [...]}``, ``extra_info.question``).
    """
    where = f"row {index}"
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {type(row).__name__}")
    extra = row.get("extra_info") or {}
    if "reward_model" in row:  # Search-R1 / veRL layout
        answers = golden_answers((row["reward_model"] or {}).get("ground_truth"), where)
        question = extra.get("question") or _question_from_prompt(row.get("prompt"), where)
    else:
        key = next((k for k in _ANSWER_KEYS if k in row), None)
        if key is None or "question" not in row:
            raise ValueError(
                f"{where}: a QA row needs 'question' and one of {list(_ANSWER_KEYS)} (FlashRAG layout) or "
                f"'prompt' and 'reward_model' (Search-R1/veRL layout); got keys {sorted(row)}"
            )
        answers = golden_answers(row[key], where)
        question = row["question"]
    return QAExample(
        id=str(row.get("id", extra.get("index", index))),
        question=str(question).strip(),
        golden_answers=answers,
        data_source=str(row.get("data_source", data_source)),
        metadata=_metadata(row),
    )


#: Top-level fields of a dataset's own rows kept in the example's metadata: MuSiQue's jsonl files hold each
#: question's decomposition (every hop's question and answer) beside the question, not under "metadata".
_KEPT_FIELDS = ("question_decomposition",)


def _metadata(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row's ``metadata``, plus the fields of :data:`_KEPT_FIELDS` a row carries at its top level."""
    metadata = dict(row.get("metadata") or {})
    for key in _KEPT_FIELDS:
        if key in row and key not in metadata:
            metadata[key] = row[key]
    return metadata


def _question_from_prompt(prompt: Any, where: str) -> str:
    """The question of a Search-R1 prompt: the last user message, after the template's ``Question:``."""
    if hasattr(prompt, "tolist"):
        prompt = prompt.tolist()
    if not isinstance(prompt, Sequence) or not prompt:
        raise ValueError(f"{where}: 'prompt' must be a non-empty list of {{role, content}} messages")
    content = str(prompt[-1].get("content", ""))
    _, marker, tail = content.rpartition("Question:")
    return (tail if marker else content).strip()


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{line_no}: invalid JSON ({exc.msg})") from None
    return rows


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, list):
            raise ValueError(f"{path}: a .json dataset must hold a list of rows")
        return data
    return _read_jsonl(path)


def _hub_rows(name: str, split: str, data_dir: str | os.PathLike[str] | None) -> list[dict[str, Any]]:
    if split not in HUB_DATASETS[name]:
        raise ValueError(f"dataset {name!r} has splits {list(HUB_DATASETS[name])}, not {split!r}")
    local_root = data_dir or os.environ.get("SEARCHENV_DATA_DIR")
    if local_root:
        local = Path(local_root) / name / f"{split}.jsonl"
        if not local.is_file():
            raise FileNotFoundError(f"{local} not found; the local override expects <data_dir>/{name}/{split}.jsonl")
        return _read_jsonl(local)
    from searchenv.data.hub import DownloadError, download

    try:  # FlashRAG's own file, the layout the local override mirrors; kept in the shared hub cache
        return _read_jsonl(download(HUB_REPO, f"{name}/{split}.jsonl"))
    except DownloadError as exc:
        raise RuntimeError(
            f"{exc}. Or download {name}/{split}.jsonl of {HUB_REPO} elsewhere and pass data_dir= or set "
            "SEARCHENV_DATA_DIR to the folder holding it"
        ) from None


def load_dataset(
    dataset: str | os.PathLike[str] | Sequence[Mapping[str, Any] | QAExample],
    split: str = DEFAULT_SPLIT,
    *,
    limit: int | None = None,
    data_dir: str | os.PathLike[str] | None = None,
) -> list[QAExample]:
    """Load questions from a name, a file, or rows in memory.

    Args:
        dataset: ``"world"`` (the embedded generated world), one of :data:`HUB_DATASETS`, a path to a
            ``.jsonl``/``.json``/``.parquet`` file, or a list of row dicts / :class:`QAExample`.
        split: which split of a named dataset (files and lists ignore it); ``"train"`` by default, as everywhere.
        limit: keep only the first ``limit`` questions.
        data_dir: local folder overriding the hub for named datasets.
    """
    if isinstance(dataset, (str, os.PathLike)) and str(dataset) == "world":
        from searchenv.data.world.generator import default_world

        examples = list(default_world().dataset(split))
    elif isinstance(dataset, str) and dataset in HUB_DATASETS:
        examples = [
            example_from_row(r, i, data_source=dataset) for i, r in enumerate(_hub_rows(dataset, split, data_dir))
        ]
    elif isinstance(dataset, (str, os.PathLike)):
        path = Path(dataset)
        if not path.is_file():
            raise FileNotFoundError(
                f"dataset {str(dataset)!r} is neither a file nor a known name; names: 'world', "
                f"{', '.join(HUB_DATASETS)}"
            )
        examples = [example_from_row(r, i, data_source=path.stem) for i, r in enumerate(_read_rows(path))]
    elif isinstance(dataset, Sequence):
        examples = [r if isinstance(r, QAExample) else example_from_row(r, i) for i, r in enumerate(dataset)]
    else:
        raise TypeError(f"dataset must be a name, a path or a list of rows, got {type(dataset).__name__}")
    if not examples:
        raise ValueError(f"dataset {dataset!r} (split {split!r}) holds no questions")
    return examples[:limit] if limit is not None else examples
