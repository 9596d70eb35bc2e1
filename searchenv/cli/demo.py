"""``searchenv demo``: a real small language model plays SearchQA episodes and the transcripts are printed.

It is the quickest end-to-end check of an installation: dataset, retriever, protocol, a real model's
multi-turn generation with stop strings, and the reward — on CPU, in about a minute.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

__all__ = ["run_demo"]

_RULE = "─" * 100


def run_demo(args: argparse.Namespace, env_kwargs: dict[str, Any], make_env: Callable[[dict[str, Any]], Any]) -> int:
    """Play ``args.episodes`` episodes with ``args.model`` and print each transcript and its score.

    ``env_kwargs`` are checked ``SearchQAEnv`` arguments (:func:`searchenv.cli.arguments.env_kwargs`), so a wrong
    option has failed before the model loads.
    """
    from searchenv.adapters.rollout.generation import HFGenerator, SamplingConfig, load_policy, rollout

    print(f"loading {args.model} …", flush=True)
    model, tokenizer = load_policy(args.model)
    sampling = SamplingConfig(
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        max_total_tokens=2048,
        chat_template={"auto": None, "on": True, "off": False}[args.chat_template],
    )
    generator = HFGenerator(model, tokenizer, sampling)
    first = make_env(env_kwargs)
    envs = [first, *(first.unwrapped.sibling() for _ in range(args.episodes - 1))]
    start = time.perf_counter()
    results = rollout(envs, generator, sampling, seed=args.seed)
    elapsed = time.perf_counter() - start
    for number, (env, result) in enumerate(zip(envs, results), 1):
        episode = env.unwrapped.episode
        print(f"\n{_RULE}\nepisode {number}: {episode.example.question}")
        print(f"gold: {list(episode.example.golden_answers)}\n{_RULE}")
        for segment in episode.segments:
            prefix = "MODEL » " if segment.author == "model" else "ENV   » "
            print(prefix + segment.text.strip().replace("\n", "\n        "))
        parts = ", ".join(f"{k}={v:g}" for k, v in result.reward_parts.items())
        print(f"{_RULE}\nreward {result.reward:g}  prediction {episode.prediction!r}  ({parts})")
    mean = sum(r.reward for r in results) / len(results)
    searches = sum(r.metrics["num_searches"] for r in results) / len(results)
    print(f"\n{len(results)} episodes in {elapsed:.1f} s: mean reward {mean:.3f}, {searches:.2f} searches per episode")
    return 0
