"""The papers' evaluation set in one call: the seven QA sets' test splits (dev where there is no test), mixed.

Search-R1 and the study evaluate on NQ, TriviaQA, PopQA (test) and HotpotQA, 2WikiMultiHopQA, MuSiQue (dev: no
public test split) and Bamboogle (test). :func:`build_eval_set` loads them through
:func:`searchenv.load_dataset` (hub, or the local override ``data_dir`` / ``SEARCHENV_DATA_DIR``);
:func:`write_eval_set` writes a FlashRAG jsonl and a veRL / Search-R1 parquet (``searchenv eval-data``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from searchenv.data.datasets import HUB_DATASETS, load_dataset
from searchenv.types import QAExample

__all__ = ["EVAL_DATASETS", "build_eval_set", "eval_split", "subsample", "write_eval_set"]

#: The seven evaluation sets, general QA first, as the papers' tables list them.
EVAL_DATASETS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")


def eval_split(dataset: str) -> str:
    """The split the papers evaluate a named dataset on: ``test``, or ``dev`` when there is no test split."""
    splits = HUB_DATASETS.get(dataset, ("test",))
    return "test" if "test" in splits else "dev"


def subsample(n: int, limit: int | None, seed: int) -> list[int]:
    """``limit`` positions out of ``n``, drawn with ``seed`` and sorted (all of them when ``limit`` is None)."""
    if limit is None or limit >= n:
        return list(range(n))
    import numpy as np

    return sorted(int(i) for i in np.random.default_rng(seed).choice(n, size=limit, replace=False))


def build_eval_set(
    datasets: Sequence[str] = EVAL_DATASETS,
    *,
    limit: int | None = None,
    seed: int = 0,
    data_dir: str | os.PathLike[str] | None = None,
) -> list[QAExample]:
    """The evaluation questions of every dataset, concatenated; ``limit`` per dataset (seeded subsample).

    Ids are prefixed with the dataset (``nq/test_12``) so that they stay unique in the mix.
    """
    mixed: list[QAExample] = []
    for name in datasets:
        examples = load_dataset(name, eval_split(name), data_dir=data_dir)
        source = name if name in HUB_DATASETS else Path(name).stem
        for i in subsample(len(examples), limit, seed):
            e = examples[i]
            mixed.append(QAExample(f"{source}/{e.id}", e.question, e.golden_answers, source, e.metadata))
    return mixed


def write_eval_set(
    examples: Sequence[QAExample], output: str | os.PathLike[str], protocol: str = "search-r1"
) -> tuple[Path, Path]:
    """Write ``test.jsonl`` (FlashRAG rows plus ``data_source``) and ``test.parquet`` (veRL rows) in ``output``."""
    from searchenv.adapters.rows import search_r1_row, write_rows
    from searchenv.protocol import get_protocol

    folder = Path(output)
    folder.mkdir(parents=True, exist_ok=True)
    jsonl = folder / "test.jsonl"
    with jsonl.open("w", encoding="utf-8") as handle:
        for e in examples:
            row = {"id": e.id, "question": e.question, "golden_answers": list(e.golden_answers)}
            row["data_source"] = e.data_source
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    proto = get_protocol(protocol)
    parquet = write_rows([search_r1_row(e, proto, "test", i) for i, e in enumerate(examples)], folder / "test.parquet")
    return jsonl, parquet
