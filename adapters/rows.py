"""Search-R1 / veRL rows: write them as parquet, and turn a row back into a SearchQA episode.

veRL, Search-R1 and SkyRL all train from the same row layout (SPEC §6)::

    {data_source, prompt: [{role, content}], ability,
     reward_model: {style, ground_truth: {target: [...]}}, extra_info: {split, index, question, ...}}

veRL picks the agent loop per row from an ``agent_name`` column; SkyRL picks the environment from
``env_class`` and hands every other column to the environment as ``extras`` (the gold answers under
``reward_spec``). This module writes both flavours (:func:`build_rows`, :func:`write_rows`,
:func:`write_paper_datasets`; the command line is ``searchenv verl-data``, :mod:`searchenv.cli.verl_data`) and
holds what both trainer adapters use to play a row: :func:`row_example` (question and gold answers),
:func:`choose_conversation` (the first conversation) and :func:`episode_env` (an environment reset with the row,
sharing the config's retriever and reward spec through the composition root).

Named datasets come from the hub unless ``data_dir`` (or ``SEARCHENV_DATA_DIR``) holds ``<name>/<split>.jsonl``
(:func:`searchenv.data.datasets.load_dataset`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from searchenv.data.datasets import HUB_DATASETS, example_from_row, load_dataset
from searchenv.env.defaults import env_default
from searchenv.env.search_qa import SearchQAEnv
from searchenv.protocol import Protocol, get_protocol
from searchenv.reward_specs.hops import hop_answers
from searchenv.types import QAExample

__all__ = [
    "AGENT_NAME",
    "PAPER_EVAL",
    "PAPER_TRAIN",
    "PROMPT_MODES",
    "SKYRL_ENV_CLASS",
    "build_rows",
    "choose_conversation",
    "episode_env",
    "eval_split",
    "plain",
    "row_example",
    "search_r1_row",
    "write_paper_datasets",
    "write_rows",
]

#: The veRL agent loop name (``@register`` in :mod:`searchenv.adapters.verl.agent_loop`, ``agent_name`` column).
AGENT_NAME = "searchenv_agent"
#: The SkyRL-gym environment id (:func:`searchenv.adapters.skyrl.env.register_skyrl_env`, ``env_class`` column).
SKYRL_ENV_CLASS = "searchenv"
#: How an adapter picks the first conversation (see :func:`choose_conversation`).
PROMPT_MODES = ("auto", "dataset", "env")
#: What Search-R1 writes in the ``ability`` column.
ABILITY = "fact-reasoning"
#: Search-R1's training mix (SPEC §6): the NQ and HotpotQA train splits.
PAPER_TRAIN = ("nq", "hotpotqa")
#: The seven evaluation sets, each on its test split, or dev where it has no public test split.
PAPER_EVAL = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")

Trainer = Literal["verl", "skyrl"]

# What an adapter passes to every episode's SearchQAEnv unless its config says otherwise; every other option is
# SearchQAEnv's own default. Rows bring their questions but no corpus, so a bare config searches the embedded world.
_ADAPTER_DEFAULTS: dict[str, Any] = {"corpus": "world"}
# Per-row fields: the adapters take them from the row, never from the trainer-wide config.
_ROW_FIELDS = ("dataset", "split")
# Configurations already warned about searching the world's corpus.
_WARNED: set[str] = set()
_LOG = logging.getLogger(__name__)


def plain(value: Any) -> Any:
    """Trainer configs arrive as OmegaConf ``DictConfig``; the environment wants plain dicts and lists."""
    if type(value).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=True)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # SkyRL's typed config sections
        return plain(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "tolist"):  # numpy arrays and scalars out of parquet / veRL's non-tensor batch
        return plain(value.tolist())
    return value


# -- writing rows -------------------------------------------------------------------------------------------------
def search_r1_row(
    example: QAExample, protocol: Protocol, split: str, index: int, trainer: Trainer = "verl"
) -> dict[str, Any]:
    """One training row in the Search-R1 layout, with the column the given trainer dispatches on."""
    ground_truth = {"target": list(example.golden_answers)}
    row: dict[str, Any] = {
        "data_source": example.data_source,
        "prompt": [{"role": "user", "content": protocol.prompt(example.question)}],
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": split, "index": index, "question": example.question, "id": example.id},
    }
    hops = hop_answers(example.metadata)
    if hops is not None:  # for rewards that read them (hop-credit); row_example reads them back
        row["extra_info"]["hop_answers"] = list(hops)
    if trainer == "verl":
        row["agent_name"] = AGENT_NAME
    elif trainer == "skyrl":
        row["env_class"] = SKYRL_ENV_CLASS
        row["reward_spec"] = {"method": "rule", "ground_truth": ground_truth}
    else:
        raise ValueError(f"trainer must be 'verl' or 'skyrl', got {trainer!r}")
    return row


def write_rows(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write rows as a parquet file (veRL's ``data.train_files`` / SkyRL's ``data.train_data``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise ValueError(f"no rows to write to {path}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(list(rows)), path)
    return path


# -- reading a row back --------------------------------------------------------------------------------------------
def row_example(
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    prompt: Any = None,
    data_source: str | None = None,
) -> QAExample:
    """The question and gold answers of one row, as veRL / SkyRL hand the row's fields over.

    ``ground_truth`` is Search-R1's ``{"target": [...]}``, a plain string (as in some public parquet files),
    or a list. The question is ``extra_info["question"]`` when present, else read from the last prompt message.
    ``extra_info["hop_answers"]`` (written by :func:`search_r1_row` for questions that have them) becomes the
    example's metadata, for rewards that read it (``hop-credit``).
    """
    row: dict[str, Any] = {"reward_model": {"ground_truth": plain(ground_truth)}, "extra_info": plain(extra_info) or {}}
    if row["extra_info"].get("hop_answers") is not None:
        row["metadata"] = {"hop_answers": row["extra_info"]["hop_answers"]}
    if prompt is not None:
        row["prompt"] = plain(prompt)
    if data_source is not None:
        row["data_source"] = str(data_source)
    if not row["extra_info"].get("question") and prompt is None:
        raise ValueError("a row needs extra_info['question'] or a prompt to read the question from")
    return example_from_row(row)


def _with_env_prompt(messages: Any, prompt_text: str) -> list[dict[str, str]]:
    """The conversation with its last user message replaced by the environment's prompt.

    System messages and earlier turns of the dataset's conversation are kept; without any user message the
    prompt becomes the single user message.
    """
    conversation = [dict(m) for m in (plain(messages) or [])]
    for message in reversed(conversation):
        if message.get("role") == "user":
            message["content"] = prompt_text
            return conversation
    return [*conversation, {"role": "user", "content": prompt_text}]


def choose_conversation(messages: Any, env_prompt: str, protocol: Protocol, mode: str = "auto") -> list[dict[str, str]]:
    """The conversation the model starts from, by ``mode``.

    ``"dataset"`` keeps the row's messages; ``"env"`` puts the environment's prompt in the last user message;
    ``"auto"`` keeps the row's messages only when they already teach the protocol (the last user message names
    its search tag, as Search-R1's files do) — a bare question, as in many public parquet files, gets the
    environment's instructions instead of none.
    """
    if mode not in PROMPT_MODES:
        raise ValueError(f"prompt mode must be one of {PROMPT_MODES}, got {mode!r}")
    conversation = [dict(m) for m in (plain(messages) or [])]
    if mode == "dataset" and conversation:
        return conversation
    if mode == "auto":
        users = [m for m in conversation if m.get("role") == "user"]
        if users and protocol.search_tags[0] in str(users[-1].get("content", "")):
            return conversation
    return _with_env_prompt(conversation, env_prompt)


def _warn_world_corpus(options: Mapping[str, Any]) -> None:
    """Say once per configuration that a row without a corpus searches the built-in world's."""
    retriever = options.get("retriever", env_default("retriever"))
    key = json.dumps(options, sort_keys=True)
    if options["corpus"] != "world" or str(retriever).startswith("http") or key in _WARNED:
        return
    _WARNED.add(key)
    _LOG.warning(
        "searchenv: %s searches the built-in world's corpus (no corpus configured); set corpus to a passage jsonl "
        "for any other dataset",
        retriever,
    )


def episode_env(example: QAExample, options: Mapping[str, Any] | None = None) -> tuple[SearchQAEnv, dict[str, Any]]:
    """A :class:`~searchenv.env.SearchQAEnv` playing one row: built from the trainer config's options, then reset
    with ``options={"example": row}``; returns it with its reset ``info``.

    ``options`` are SearchQAEnv keyword arguments from the trainer config (``retriever``, ``corpus``,
    ``reward``, ``topk``, ``max_turns``, ``protocol``, …). They are plain config values, so the composition root
    (:mod:`searchenv.components`) gives every environment built from equal options the same retriever (one index,
    one HTTP client) and reward spec: an environment per row costs its checks and an empty episode, nothing more.
    """
    merged = {**_ADAPTER_DEFAULTS, **(plain(options) or {})}
    misplaced = [k for k in _ROW_FIELDS if k in merged]
    if misplaced:
        raise ValueError(f"{misplaced} come from each training row, not from the adapter config; remove them")
    try:
        json.dumps(merged, sort_keys=True)
    except TypeError as exc:
        raise ValueError(f"adapter env options must be plain config values (names, paths, numbers): {exc}") from None
    _warn_world_corpus(merged)
    env = SearchQAEnv(dataset=[example], **merged)
    _, info = env.reset(options={"example": example})
    return env, info


# -- command line --------------------------------------------------------------------------------------------------
def build_rows(
    datasets: Sequence[str],
    splits: Sequence[str],
    protocol: str | Protocol = env_default("protocol"),
    trainer: Trainer = "verl",
    limit: int | None = None,
    data_dir: str | Path | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Rows per split: every dataset's questions of that split, concatenated in the order given."""
    return {
        split: _mixed_rows([(dataset, split) for dataset in datasets], split, protocol, trainer, limit, data_dir)
        for split in splits
    }


def _mixed_rows(
    sources: Sequence[tuple[str, str]],
    split_name: str,
    protocol: str | Protocol,
    trainer: Trainer,
    limit: int | None,
    data_dir: str | Path | None,
) -> list[dict[str, Any]]:
    """One file's rows from several ``(dataset, split)`` sources, concatenated in order, indexed from 0."""
    proto = get_protocol(protocol)
    rows: list[dict[str, Any]] = []
    for dataset, split in sources:
        for example in load_dataset(dataset, split, limit=limit, data_dir=data_dir):
            rows.append(search_r1_row(example, proto, split_name, len(rows), trainer))
    return rows


def eval_split(name: str) -> str:
    """The split a named dataset is evaluated on: ``test``, or ``dev`` where there is no public test split."""
    if name not in HUB_DATASETS:
        raise ValueError(f"unknown dataset {name!r}; names: {', '.join(HUB_DATASETS)}")
    return "test" if "test" in HUB_DATASETS[name] else "dev"


def write_paper_datasets(
    output: str | Path,
    protocol: str | Protocol = env_default("protocol"),
    trainer: Trainer = "verl",
    limit: int | None = None,
    data_dir: str | Path | None = None,
    splits: Sequence[str] = ("train", "test"),
) -> list[Path]:
    """Search-R1's data: ``train.parquet`` (NQ + HotpotQA train) and ``test.parquet`` (the seven sets mixed).

    Each test row keeps its ``data_source``, so veRL's validation reports every set separately. ``limit`` keeps
    the first N questions of each source; ``splits`` picks which of the two files to write.
    """
    sources = {
        "train": [(name, "train") for name in PAPER_TRAIN],
        "test": [(name, eval_split(name)) for name in PAPER_EVAL],
    }
    unknown = [s for s in splits if s not in sources]
    if unknown:
        raise ValueError(f"paper data has splits 'train' and 'test', not {unknown}")
    written = []
    for split in splits:
        rows = _mixed_rows(sources[split], split, protocol, trainer, limit, data_dir)
        path = write_rows(rows, Path(output) / f"{split}.parquet")
        print(f"wrote {len(rows)} rows to {path}")
        written.append(path)
    return written
