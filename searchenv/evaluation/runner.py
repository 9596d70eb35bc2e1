"""Play evaluation episodes in batches and keep every finished one in an append-only transcripts file.

A *cell* is one (policy, method, retriever, dataset) combination over a fixed list of questions. Episodes of a
cell are played in batches: each turn, one :meth:`Policy.generate` call continues every running episode and one
:func:`searchenv.step_batch` call steps them (a single ``search`` call for the batch). Every number recorded
comes from the environment's :class:`~searchenv.episode.episode.Episode` (its prediction, counters, ``retrieved``
passages and ``reward_parts``), never from re-reading the text.

Finished episodes are appended to ``transcripts.jsonl`` (one JSON object per line, flushed per batch) keyed by
``(policy, method, retriever, dataset, id, sample)``. A rerun of the same command skips keys already there, so an
interrupted evaluation loses at most the batch in flight.

``sample`` numbers the episodes played for one question when several are drawn (``searchenv eval --samples K``, for
pass@k at a temperature above 0): sample 0 is played with the run's seed, sample ``s`` with :func:`sample_seed`.
Records written before samples existed are sample 0.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchenv.episode.health import HEALTH_METRICS
from searchenv.evaluation.baselines import forced_first_action, method_budget, method_protocol
from searchenv.evaluation.policies import Context, Policy, TokenPolicy
from searchenv.evaluation.progress import EvalProgress
from searchenv.evaluation.report import search_failed
from searchenv.protocol import get_protocol
from searchenv.registration import ENV_ID
from searchenv.reward_specs.metrics import answer_in_passages, answer_scores
from searchenv.types import QAExample, Retriever

__all__ = ["Cell", "TranscriptStore", "episode_record", "exclusive_output", "record_key", "run_cell", "sample_seed"]


@dataclass
class Cell:
    """One (policy, method, retriever, dataset) combination and the questions it is evaluated on.

    ``settings`` are the episode and decoding settings (protocol, chat_template, max_turns, budget, topk,
    max_information_words, reward, temperature, top_p, token caps); they are stored with every record so that a
    rerun with different settings cannot silently mix results. ``sample`` is which draw of each question this cell
    plays (0 unless several are drawn); it is not a setting, so drawing more samples later keeps the earlier ones.
    ``split`` (of a named dataset; ``None`` for a file)
    and ``source`` (the file's absolute path; ``None`` for a name) go into every record too, so that a record says
    which questions it answered: ``train-sft --transcripts`` refuses held-out ones.
    """

    policy: str
    method: str
    retriever: str
    dataset: str
    examples: list[tuple[str, QAExample]]  # (record id, example)
    settings: dict[str, Any]
    train_retriever: str | None = None
    mismatches: list[str] = field(default_factory=list)
    sample: int = 0
    split: str | None = None
    source: str | None = None


def record_key(
    policy: str, method: str, retriever: str, dataset: str, example_id: str, sample: int = 0
) -> tuple[str, ...]:
    return (policy, method, retriever, dataset, example_id, str(sample))


def _key_of(record: Mapping[str, Any]) -> tuple[str, ...]:
    parts = (record["policy"], record["method"], record["retriever"], record["dataset"], record["id"])
    return record_key(*parts, int(record.get("sample", 0)))


def sample_seed(seed: int, sample: int) -> int:
    """The sampling seed of draw ``sample`` of a run seeded ``seed``: ``seed`` itself for draw 0 (so a run of one
    sample plays as it always did), else a seed mixed from both, so no two draws of a run, nor of runs with nearby
    seeds, share a random stream."""
    if sample == 0:
        return seed
    import numpy as np

    return int(np.random.SeedSequence((seed, sample)).generate_state(1, dtype=np.uint32)[0])


class TranscriptStore:
    """The append-only JSONL of finished episodes that makes an evaluation resumable.

    On open, a last line cut off by an interrupt (no newline, not valid JSON) is removed — it was not a finished
    episode — and said so; a malformed line anywhere else is an error naming the line, since dropping it would
    lose a result.
    """

    def __init__(self, path: str | os.PathLike[str], log: Callable[[str], None] = print):
        self.path = Path(path)
        self.records: dict[tuple[str, ...], dict[str, Any]] = {}
        if self.path.exists():
            self._load(log)

    def _load(self, log: Callable[[str], None]) -> None:
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            tail = data[cut:]
            try:
                json.loads(tail)
            except (json.JSONDecodeError, UnicodeDecodeError):
                with self.path.open("r+b") as handle:
                    handle.truncate(cut)
                log(f"{self.path}: removed an unfinished last line ({len(tail)} bytes) left by an interrupted run")
                data = data[:cut]
            else:
                with self.path.open("ab") as handle:
                    handle.write(b"\n")
        for line_no, line in enumerate(data.decode("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                key = _key_of(record)
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(
                    f"{self.path}:{line_no}: not a transcript record ({exc}); this file holds finished episodes, "
                    "one JSON object per line — fix that line or pass another --output folder"
                ) from None
            self.records[key] = record

    def done(self, key: tuple[str, ...], settings: Mapping[str, Any]) -> bool:
        """Whether this episode is already finished — with the same settings (else resuming would mix runs).

        An episode in which a search failed is kept (it is what happened) but is not a result: it is played again
        on resume, and its newer record replaces it.
        """
        record = self.records.get(key)
        if record is None or search_failed(record):
            return False
        if record.get("settings") != dict(settings):
            raise ValueError(
                f"{self.path} already holds {key} evaluated with settings {record.get('settings')}, not "
                f"{dict(settings)}; use another --output folder for different settings"
            )
        return True

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        records = list(records)
        if not records:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
            handle.flush()
            os.fsync(handle.fileno())
        for r in records:
            self.records[_key_of(r)] = r


@contextmanager
def exclusive_output(folder: Path) -> Iterator[None]:
    """Hold ``folder`` for one evaluation run: a second run into it stops with a clear message instead of
    interleaving its lines with this one's. The lock (``flock`` on ``folder/.lock``) is released on exit, and by
    the operating system if the process dies; where ``flock`` does not exist (Windows) nothing is locked. A run
    that ends having written nothing (an error before the first episode) removes the lock file, and the folder if
    it made it, so a failed command leaves nothing behind."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / ".lock"
    try:
        with lock.open("w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RuntimeError(
                    f"another searchenv eval is writing to {folder}; wait for it to finish or pass another --output"
                ) from None
            try:
                yield
            finally:
                if [p.name for p in folder.iterdir()] == [lock.name]:
                    lock.unlink()
                fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        if made and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def episode_record(cell: Cell, record_id: str, env: Any, prompt: str, response_tokens: int) -> dict[str, Any]:
    """Everything reported about one finished episode, read from the environment's episode."""
    episode = env.unwrapped.episode
    golds = list(episode.example.golden_answers)
    parts = {k: float(v) for k, v in episode.reward_parts.items()}
    scores = answer_scores(episode.prediction, golds)  # the same metrics the reward specs report as parts
    retrieved = [p for hits in episode.retrieved for p in hits]
    searched = cell.method != "direct"
    return {
        "policy": cell.policy,
        "method": cell.method,
        "retriever": cell.retriever,
        "dataset": cell.dataset,
        "split": cell.split,
        "source": cell.source,
        "id": record_id,
        "sample": cell.sample,
        "train_retriever": cell.train_retriever,
        "question": episode.example.question,
        "golden_answers": golds,
        "prediction": episode.prediction,
        "reward": float(episode.reward),
        "reward_parts": parts,
        "em": parts.get("em", scores["em"]),
        "f1": parts.get("f1", scores["f1"]),
        "cem": parts.get("cem", scores["cem"]),
        "retrieval_hit": float(answer_in_passages(golds, [p.contents for p in retrieved])) if searched else None,
        "num_searches": episode.num_searches,
        "num_failed_searches": episode.facts.num_failed_searches,
        "num_invalid": episode.num_invalid,
        "num_actions": episode.num_actions,
        "end_reason": episode.end_reason,
        "response_tokens": response_tokens,
        **{k: v for k, v in episode.metrics().items() if k in HEALTH_METRICS},  # reasoning health
        "prompt": prompt,
        "segments": [{"author": s.author, "text": s.text} for s in episode.segments],
        "retrieved": [[{"id": p.id, "title": p.title} for p in hits] for hits in episode.retrieved],
        "settings": cell.settings,
        "mismatches": cell.mismatches,
    }


def _make_envs(cell: Cell, retriever: Retriever, n: int) -> list[Any]:
    import gymnasium as gym

    s = cell.settings
    protocol = method_protocol(cell.method, get_protocol(s["protocol"]))
    first = gym.make(
        ENV_ID,
        dataset=[example for _, example in cell.examples],
        retriever=retriever,
        reward=s["reward"],
        protocol=protocol,
        topk=s["topk"],
        max_turns=method_budget(cell.method, s["max_turns"]),
        budget=s["budget"] if cell.method == "agent" else "actions",
        max_information_words=s["max_information_words"],
    ).unwrapped
    return [first, *(first.sibling() for _ in range(n - 1))]


def _play_batch(
    envs: Sequence[Any],
    policy: Policy | TokenPolicy,
    cell: Cell,
    indices: Sequence[int],
    progress: EvalProgress | None = None,
) -> list[tuple[str, int]]:
    """Play one episode per environment (``indices`` into the cell's examples); returns (prompt, model tokens).

    A policy whose weights are here plays token in, token out (:func:`_play_tokens`); an endpoint plays text."""
    if hasattr(policy, "generator"):
        return _play_tokens(envs, policy, cell, indices, progress)
    from searchenv.env.stepping import step_batch

    prompts = [env.reset(options={"index": i})[0] for env, i in zip(envs, indices)]
    protocol = envs[0].protocol
    tokens = [0] * len(envs)
    forced = [forced_first_action(cell.method, protocol, cell.examples[i][1].question) for i in indices]
    if forced[0] is not None:
        step_batch(envs, forced)  # RAG: the harness's retrieval (budget 2: it cannot end the episode)
    active = [j for j, env in enumerate(envs) if not env.episode.done]
    while active:
        contexts = [Context(prompts[j], envs[j].episode.response_text, protocol.tools_json) for j in active]
        replies = policy.generate(contexts, protocol.stop_strings)
        if progress is not None:
            progress.turn_done([reply.num_tokens for reply in replies])
        for j, reply in zip(active, replies):
            tokens[j] += reply.num_tokens
        step_batch([envs[j] for j in active], [reply.text for reply in replies])
        active = [j for j in active if not envs[j].episode.done]
    return list(zip(prompts, tokens))


def _play_tokens(
    envs: Sequence[Any], policy: TokenPolicy, cell: Cell, indices: Sequence[int], progress: EvalProgress | None
) -> list[tuple[str, int]]:
    """The token path (:class:`searchenv.rollout.EpisodeDriver`): the same ids, masks and inserted-text encoding as
    in training; RAG's retrieval is written by the harness into the context (mask 0)."""
    import torch

    from searchenv.rollout import EpisodeDriver

    torch.manual_seed(policy.seed)  # each batch samples from the same seed, as a rerun of it would
    driver = EpisodeDriver(envs, policy.tokenizer, policy.sampling)
    prompts = driver.start(indices)
    protocol = envs[0].protocol
    driver.force([forced_first_action(cell.method, protocol, cell.examples[i][1].question) for i in indices])
    while requests := driver.requests():
        turns = driver.sample(policy.generator, requests)
        if progress is not None:
            progress.turn_done([len(turn.token_ids) for turn in turns.values()])
        driver.apply(turns)
    return [(prompt, result.tokens.num_model_tokens) for prompt, result in zip(prompts, driver.results())]


def run_cell(
    cell: Cell,
    policy: Policy,
    retriever: Retriever,
    store: TranscriptStore,
    *,
    batch_size: int = 8,
    judge: Callable[[list[dict[str, Any]]], None] | None = None,
    progress: EvalProgress | None = None,
) -> int:
    """Play the cell's unfinished episodes, appending each finished batch to ``store``; returns how many ran.

    Draw ``cell.sample`` > 0 is played by the policy reseeded with :func:`sample_seed` (``policy.with_seed``)."""
    key = (cell.policy, cell.method, cell.retriever, cell.dataset)
    todo = [
        i
        for i, (record_id, _) in enumerate(cell.examples)
        if not store.done(record_key(*key, record_id, cell.sample), cell.settings)
    ]
    if not todo:
        return 0
    if cell.sample:
        if not hasattr(policy, "with_seed"):
            raise ValueError(
                f"policy {cell.policy!r} cannot draw sample {cell.sample}: it has no with_seed(seed) to reseed it; "
                "give it one, or play one sample"
            )
        policy = policy.with_seed(sample_seed(policy.seed, cell.sample))
    envs = _make_envs(cell, retriever, min(batch_size, len(todo)))
    for start in range(0, len(todo), batch_size):
        batch = todo[start : start + batch_size]
        played = _play_batch(envs[: len(batch)], policy, cell, batch, progress)
        records = [
            episode_record(cell, cell.examples[i][0], env, prompt, n_tokens)
            for i, env, (prompt, n_tokens) in zip(batch, envs, played)
        ]
        if judge is not None:
            judge(records)
        store.append(records)
        if progress is not None:
            progress.episodes_done(len(batch))
    return len(todo)
