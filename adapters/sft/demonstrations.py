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
Demonstrations are training data: they are drawn from the train split only (the test split is refused).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchenv.types import QAExample

__all__ = [
    "RELATION_WORDS",
    "Demonstration",
    "demonstrator_actions",
    "transcript_demonstrations",
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

    import searchenv
    from searchenv.reward_specs.metrics import answer_in_passages

    kwargs = dict(env_kwargs)
    if kwargs.get("split", "train") != "train":
        raise ValueError("demonstrations come from the train split only; the test split is for evaluation")
    kwargs["split"] = "train"
    env = gym.make(searchenv.ENV_ID, **kwargs).unwrapped
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


def transcript_demonstrations(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    *,
    min_reward: float = 1.0,
    policies: Iterable[str] | None = None,
) -> list[Demonstration]:
    """Episodes from ``searchenv eval`` transcripts (``transcripts.jsonl``: one record per line with ``prompt``,
    ``segments`` and ``reward``) whose reward is at least ``min_reward``, optionally of some policies only.

    Records of the test split are refused: a record's ``settings`` name its split, and a warm start must never
    see a held-out question."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    wanted = set(policies) if policies is not None else None
    out = []
    for path in paths:
        for line_no, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                prompt, segments, reward = record["prompt"], record["segments"], float(record["reward"])
                pieces = tuple((s["author"], s["text"]) for s in segments)
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise ValueError(
                    f"{path}:{line_no}: not a transcript record ({exc}); pass the transcripts.jsonl that "
                    "`searchenv eval` writes (one JSON object per line with prompt, segments and reward)"
                ) from None
            if (record.get("settings") or {}).get("split") == "test":
                raise ValueError(
                    f"{path}:{line_no}: a record of the test split; demonstrations must come from training "
                    "questions (evaluate the teacher with --split train to make them)"
                )
            if reward < min_reward or (wanted is not None and record.get("policy") not in wanted):
                continue
            out.append(Demonstration(str(record.get("id")), prompt, pieces, record.get("hops")))
    return out
