"""Demonstrations for a supervised warm start: episodes the environment plays itself, and transcripts users bring.

A model too small to discover the protocol by reinforcement learning (no search-RL gain is published below 0.5B,
and 0.5B needed a distilled warm start, DGPO) first learns it from demonstrations. Two sources, one format:

- :func:`world_demonstrations`: a scripted demonstrator over the embedded world's questions. The world knows
  every question's hop chain (``metadata["entities"]``, ``["relations"]``, ``["hop_answers"]``), so the
  demonstrator plans its hops, searches one key phrase per hop (``"<entity> <relation word>"``), says in its think
  block what the passage told it and what comes next, and answers. The *environment* plays these actions: the
  information blocks are the real engine's results under the run's settings, and only episodes whose every hop
  answer was shown and whose answer scores are kept, so a demonstration never teaches copying what was not on the
  page.
- :func:`transcript_demonstrations`: ``searchenv eval`` transcripts (a stronger model's, say), filtered by reward:
  distillation as DGPO and verifiers' "SFT warm-up on filtered rollouts" do.

Both give :class:`Demonstration` values, tokenized by the one token path (:func:`searchenv.tokenize_segments`): the
loss reads the model's tokens only, and the environment's text tokenizes exactly as it will in a rollout.
Demonstrations are training data: they are drawn from the train split only. A transcript of a held-out question is
refused by its label (the ``split`` every ``searchenv eval`` record carries) and by its content (the embedded
world's test questions, and the ``test.jsonl`` beside the dataset file it came from), so a mislabelled or older
record cannot slip a test question into a warm start.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchenv.types import QAExample

__all__ = [
    "RELATION_WORDS",
    "Demonstration",
    "Transcripts",
    "demonstrator_actions",
    "transcript_demonstrations",
    "transcript_settings",
    "world_demonstrations",
]

#: Per world relation: the word the demonstrator's query adds to the entity, and how its think block names it.
RELATION_WORDS: dict[str, tuple[str, str]] = {
    "birthplace": ("born", "birthplace"),
    "birth_year": ("born", "birth year"),
    "employer": ("employer", "employer"),
    "teacher": ("teacher", "teacher"),
    "founder": ("founder", "founder"),
    "seat": ("based", "seat"),
    "founded": ("founded", "founding year"),
    "region": ("region", "region"),
    "city_founded": ("founded", "founding year"),
    "capital": ("capital", "capital"),
    "governor": ("governor", "first governor"),
    "author": ("author", "author"),
    "published": ("published", "publication year"),
}


@dataclass(frozen=True)
class Demonstration:
    """One episode to imitate: the prompt the environment wrote and the transcript after it, as
    ``(author, text)`` segments (``"model"`` or ``"env"``), with the question's id and hop count."""

    id: str
    prompt: str
    segments: tuple[tuple[str, str], ...]
    hops: int | None = None


def demonstrator_actions(example: QAExample) -> list[str]:
    """The scripted demonstrator's actions for one world question: a plan naming every hop first ("I need the
    founder of X, then its employer."), then per hop a key-phrase search and a think block saying what the passage
    gave and what comes next, then the answer (the question's first gold). The plan carries the hop count through
    the episode, so whether to search again is read off the plan rather than guessed after every passage."""
    meta = example.metadata
    relations, entities, answers = meta["relations"], meta["entities"], meta["hop_answers"]
    names = [RELATION_WORDS[relation][1] for relation in relations]
    plan = f"I need the {names[0]} of {entities[0]}" + "".join(f", then its {name}" for name in names[1:]) + "."
    actions, thought = [], plan
    for hop, relation in enumerate(relations):
        query_word = RELATION_WORDS[relation][0]
        actions.append(f"<think> {thought} </think>\n<search> {entities[hop]} {query_word} </search>")
        thought = f"The {names[hop]} of {entities[hop]} is {answers[hop]}."
        if hop + 1 < len(relations):
            thought += f" Next: the {names[hop + 1]} of {answers[hop]}."
    actions.append(f"<think> {thought} </think>\n<answer> {example.golden_answers[0]} </answer>")
    return actions


def world_demonstrations(
    env_kwargs: dict[str, Any],
    *,
    max_hops: int | None = None,
    limit: int | None = None,
    held_out: int = 0,
) -> tuple[list[Demonstration], dict[str, int]]:
    """Play the scripted demonstrator on the world's **train** questions in the environment ``env_kwargs`` builds
    (its retriever, passage cap and protocol), and keep the episodes that show every hop's answer and score EM 1.

    ``max_hops`` keeps questions of at most that many hops (the rest is left for reinforcement learning to
    discover); ``limit`` stops after that many kept demonstrations; ``held_out`` leaves the last N train questions
    alone (the validation questions of the reinforcement-learning stage, ``PPOConfig.validation``). Returns the
    demonstrations and counts of what was played and why episodes were dropped.
    """
    import gymnasium as gym

    from searchenv.registration import ENV_ID
    from searchenv.reward_specs.metrics import answer_in_passages

    kwargs = dict(env_kwargs)
    if kwargs.get("split", "train") != "train":
        raise ValueError("demonstrations come from the train split only; the test split is for evaluation")
    kwargs["split"] = "train"
    env = gym.make(ENV_ID, **kwargs).unwrapped
    counts = {"played": 0, "kept": 0, "hop_not_shown": 0, "wrong_answer": 0, "over_budget": 0}
    kept: list[Demonstration] = []
    try:
        for index, example in enumerate(env.examples[: len(env.examples) - held_out]):
            hops = example.metadata.get("hops")
            if hops is None or "hop_answers" not in example.metadata:
                raise ValueError(
                    f"question {example.id!r} has no hop chain: the scripted demonstrator needs the generated "
                    "world's questions (dataset='world' or a `searchenv world` folder)"
                )
            if max_hops is not None and hops > max_hops:
                continue
            actions = demonstrator_actions(example)
            if len(actions) > env.max_turns:
                counts["over_budget"] += 1
                continue
            prompt, _ = env.reset(options={"index": index})
            counts["played"] += 1
            shown_all = True
            for hop, action in enumerate(actions):
                obs, _, terminated, truncated, _ = env.step(action)
                if hop < hops and not answer_in_passages([example.metadata["hop_answers"][hop]], [obs]):
                    shown_all = False
                if terminated or truncated:
                    break
            if not shown_all:
                counts["hop_not_shown"] += 1
                continue
            if env.episode.reward_parts.get("em", 0.0) < 1.0:
                counts["wrong_answer"] += 1
                continue
            segments = tuple((s.author, s.text) for s in env.episode.segments)
            kept.append(Demonstration(example.id, prompt, segments, hops))
            counts["kept"] += 1
            if limit is not None and len(kept) >= limit:
                break
    finally:
        env.close()
    return kept, counts


@dataclass(frozen=True)
class Transcripts:
    """What :func:`transcript_demonstrations` read: the demonstrations kept, the counts behind them (``read``,
    ``kept``, ``below_reward``, ``other_policy``) and the episode settings they were played under (the
    :data:`~searchenv.evaluation.checkpoint.REPLAYED` keys every kept record shares, plus ``reward``, and
    ``retriever`` and ``dataset`` where one) — what the checkpoint must record so that ``searchenv eval`` replays
    the environment the demonstrations show."""

    demonstrations: list[Demonstration]
    counts: dict[str, int]
    settings: dict[str, Any]


def _question_key(text: str) -> str:
    """A question as compared for held-out content: case and spacing do not make a test question new."""
    return " ".join(str(text).lower().split())


def _held_out_questions(sources: Iterable[str]) -> set[str]:
    """Questions no warm start may see: the embedded world's test split, and the ``test.jsonl`` beside every
    dataset file a record came from (a ``searchenv world`` folder, or a ``<name>/<split>.jsonl`` data folder)."""
    from searchenv.data.datasets import load_dataset
    from searchenv.data.world.generator import default_world

    held = {_question_key(q.question) for q in default_world().dataset("test")}
    for folder in {Path(source).parent for source in sources}:
        if (folder / "test.jsonl").is_file():
            held |= {_question_key(q.question) for q in load_dataset(folder / "test.jsonl")}
    return held


def _labelled_held_out(record: Mapping[str, Any]) -> bool:
    """Whether a record says it answered a question outside the train split (``split``, or in older records
    ``settings.split``; a record of a file has no split)."""
    return (record.get("split") or (record.get("settings") or {}).get("split") or "train") != "train"


def _read_record(path: Path, line_no: int, line: str) -> dict[str, Any]:
    """One transcript record, checked: JSON with a prompt, a question, segments of ``model``/``env`` text (at least
    one the model's) and a finite reward. A record that fails is named with the fix, before any model loads."""
    where = f"{path}:{line_no}"
    try:
        record = json.loads(line)
        missing = [name for name in ("prompt", "question", "segments", "reward") if name not in record]
        if missing:
            raise KeyError(", ".join(missing))
        reward = float(record["reward"])
        pieces = tuple((str(s["author"]), str(s["text"])) for s in record["segments"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"{where}: not a transcript record (missing or malformed: {exc}); pass the transcripts.jsonl that "
            "`searchenv eval` writes (one JSON object per line with prompt, question, segments and reward)"
        ) from None
    if not math.isfinite(reward):
        raise ValueError(f"{where}: reward is {record['reward']!r}, not a number; fix or remove that record")
    authors = {author for author, _ in pieces}
    if "model" not in authors or not authors <= {"model", "env"}:
        raise ValueError(
            f"{where}: segments by {sorted(authors)}; a demonstration needs at least one 'model' segment and only "
            "'model' or 'env' ones (the model's text is what it learns)"
        )
    record["segments"], record["reward"] = pieces, reward
    return record


def transcript_settings(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The one set of episode settings ``records`` were played under; records of different settings are refused
    (a checkpoint records one environment, and :func:`searchenv.evaluation.checkpoint.replay_settings` replays
    it)."""
    from searchenv.evaluation.checkpoint import REPLAYED

    seen: dict[tuple[tuple[str, str], ...], int] = {}
    for record in records:
        shown = record.get("settings") or {}
        key = tuple((name, json.dumps(shown[name])) for name in (*REPLAYED, "reward") if name in shown)
        seen[key] = seen.get(key, 0) + 1
    if len(seen) > 1:
        kinds = "; ".join(f"{n} with " + ", ".join(f"{k} {v}" for k, v in key) for key, n in seen.items())
        raise ValueError(
            f"the demonstrations were played under {len(seen)} different settings ({kinds}); a checkpoint records "
            "one environment: pass the transcripts of one setting (an evaluation's --output folder holds one)"
        )
    settings = {name: json.loads(value) for name, value in next(iter(seen), ())}
    for name in ("retriever", "dataset"):
        values = {record.get(name) for record in records}
        if len(values) == 1 and None not in values:
            settings[name] = values.pop()
    return settings


def transcript_demonstrations(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    *,
    min_reward: float = 1.0,
    policies: Iterable[str] | None = None,
) -> Transcripts:
    """Episodes from ``searchenv eval`` transcripts (``transcripts.jsonl``: one record per line with ``prompt``,
    ``question``, ``segments`` and ``reward``) whose reward is at least ``min_reward``, optionally of some policies
    only, with the counts behind them and the settings they were played under (:class:`Transcripts`).

    Every record is checked first (:func:`_read_record`). Held-out questions are refused, all of them counted in one
    error: a record labelled with a split other than ``train`` (``searchenv eval`` writes ``split``), and — whatever
    its labels say — a record whose question is a held-out one by content (:func:`_held_out_questions`)."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    wanted = set(policies) if policies is not None else None
    records = [
        _read_record(Path(path), line_no, line)
        for path in paths
        for line_no, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1)
        if line.strip()
    ]
    held = _held_out_questions(r["source"] for r in records if r.get("source"))
    labelled = sum(_labelled_held_out(r) for r in records)
    held_out = sum(_labelled_held_out(r) or _question_key(r["question"]) in held for r in records)
    if held_out:
        raise ValueError(
            f"{held_out} of {len(records)} transcript records are held-out questions "
            f"({labelled} labelled with a split other than train, {held_out - labelled} more whose question is in the "
            "world's test split or a test.jsonl beside their dataset file); a warm start must never see one: "
            "evaluate the teacher on training questions (--split train, or a world folder's train.jsonl)"
        )
    counts = {"read": len(records), "kept": 0, "below_reward": 0, "other_policy": 0}
    kept = []
    for record in records:
        if wanted is not None and record.get("policy") not in wanted:
            counts["other_policy"] += 1
        elif not record["reward"] >= min_reward:
            counts["below_reward"] += 1
        else:
            kept.append(record)
    counts["kept"] = len(kept)
    demonstrations = [Demonstration(str(r.get("id")), r["prompt"], r["segments"], r.get("hops")) for r in kept]
    return Transcripts(demonstrations, counts, transcript_settings(kept))
