"""Environment overhead per step and vectorised stepping throughput.

1. Overhead: parse + format + reward with retrieval excluded (a retriever that returns ready passages),
   p50/p99 per action kind. The peer, skyrl-gym's ``search`` env, answers in the same run **on the same inputs**:
   the 1,000 NQ test questions with each one's gold answers, answered with its first gold; and a one-letter
   case (question ``q``, gold ``x``, answer ``x``), the cheapest possible answer for both. Reward parts and
   episode metrics are plain dicts filled on the terminal step; the answer step is timed both with the ``info``
   left unread and with every part and metric copied, as a logger would. A whole one-answer episode is
   timed too, skyrl-gym's as SkyRL's generator runs one (``skyrl_gym.make`` per trajectory), and the two answer
   steps once more in alternating blocks (``--rounds``) per input, so load spikes land on both.
2. ``make_vec`` with N envs and the bm25 retriever on ../shared/data/corpus/union.jsonl (NQ questions as
   queries): environment steps per second, one batched search per vector step.

    python bench/bench_env.py [--steps 20000] [--num-envs 64] [--vec-steps 30] [--rounds 12 --block 3000]
    python bench/bench_env.py --long-episodes 20   # 3. only: the step cost along 4- and 32-turn episodes
    python bench/bench_env.py --breakdown 6        # 4. only: what each part of the answer step costs

3. Long episodes: 4 and 32 turns of 1,500 think words each (searching, then answering), the whole episode's
   stepping time and the first and last non-final step's: a step must cost the same late in an episode as early.

4. Breakdown: the `em` answer step in its phases (read the action; the turn and the episode's facts; the reward
   spec, and within it the answer scores and the format grammar; metrics and ``info``), each timed on the same
   inputs as skyrl-gym's answer step, in blocks alternating with it; the figure is the median block's p50.

For a steadier ratio on a shared machine, pin it to one core: ``taskset -c 1 python bench/bench_env.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import gymnasium as gym
import numpy as np

import searchenv  # noqa: F401
from searchenv import Corpus, QAExample, SearchQAEnv, load_dataset

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


class ReadyPassages:
    """Returns the same three passages for every query: retrieval cost is zero, so only overhead remains."""

    def __init__(self, corpus: Corpus):
        self.hits = [corpus.passage(i, 1.0) for i in range(3)]

    def search(self, queries, k):
        return [self.hits[:k] for _ in queries]


ANSWER = "<think>I know it.</think>\n<answer> {a} </answer>"


def inputs() -> dict[str, list[QAExample]]:
    """The questions both environments answer, by name: real NQ golds, and the one-letter floor."""
    return {
        "NQ": load_dataset(SHARED / "qa" / "nq_test_1000.jsonl"),
        "one-letter": [QAExample("x", "q", ("x",))],
    }


def percentiles(samples_ns: list[int]) -> tuple[float, float, float]:
    ordered = np.sort(np.asarray(samples_ns)) / 1000.0
    return float(np.percentile(ordered, 50)), float(np.percentile(ordered, 99)), 1e6 / float(np.mean(ordered))


def overhead(steps: int, corpus: Corpus) -> list[tuple[str, float, float, float]]:
    questions = inputs()
    envs = {
        reward: SearchQAEnv(dataset=questions["NQ"], retriever=ReadyPassages(corpus), reward=reward)
        for reward in ("em", "format")
    }
    rows = []
    cases = {
        "search (parse + format block)": ("em", "<think>I should look this up.</think>\n<search> {q} </search>", False),
        "answer, `em` spec, every part and metric read": ("em", ANSWER, True),
        "answer, `format` spec (parts not read)": ("format", ANSWER, False),
        "invalid (parse + hint)": ("em", "I am not sure what {q} means", False),
    }
    for name, (reward, template, read_parts) in cases.items():
        rows.append((f"searchenv {name}", *percentiles(_time_steps(envs[reward], template, steps, read_parts))))
    rows.append(("searchenv reset", *percentiles(_time_resets(envs["em"], steps))))
    for label, examples in questions.items():
        env = SearchQAEnv(dataset=examples, retriever=ReadyPassages(corpus), reward="em")
        rows.append(
            (f"{label}: searchenv answer, `em` spec (parts not read)", *percentiles(_time_steps(env, ANSWER, steps)))
        )
        peer = _skyrl_answer(examples, steps)
        if peer:
            rows.append((f"{label}: skyrl-gym 0.4 search env answer step", *percentiles(peer[0])))
        rows.append((f"{label}: searchenv episode, reset + answer step", *percentiles(_time_episodes(env, steps))))
        if peer:
            rows.append((f"{label}: skyrl-gym episode, `skyrl_gym.make` + `init` + answer step", *percentiles(peer[1])))
    return rows


def _time_episodes(env: SearchQAEnv, steps: int) -> list[int]:
    """A one-action episode whole: what a trainer pays per trajectory that answers at once."""
    answers = [ANSWER.format(a=example.golden_answers[0]) for example in env.examples]
    samples = []
    for i in range(steps):
        start = time.perf_counter_ns()
        env.reset(options={"index": i % len(answers)})
        env.step(answers[i % len(answers)])
        samples.append(time.perf_counter_ns() - start)
    return samples


def _time_steps(env: SearchQAEnv, template: str, steps: int, read_parts: bool = False) -> list[int]:
    samples = []
    for i in range(steps):
        _, info = env.reset(options={"index": i % len(env.examples)})
        action = template.format(q=info["question"], a=info["golden_answers"][0])
        start = time.perf_counter_ns()
        _, _, _, _, info = env.step(action)
        if read_parts:  # what a logger that keeps every part pays
            dict(info["reward_parts"]), dict(info["episode_metrics"])
        samples.append(time.perf_counter_ns() - start)
    return samples


def alternating(rounds: int, block: int, corpus: Corpus) -> dict[str, tuple[list[float], list[float]]]:
    """The `em` answer step of searchenv and of skyrl-gym in alternating blocks, per input: the p50 of each
    block, so a load spike on this shared machine lands on both."""
    blocks: dict[str, tuple[list[float], list[float]]] = {}
    for label, examples in inputs().items():
        if _skyrl_answer(examples, 1) is None:
            return {}
        env = SearchQAEnv(dataset=examples, retriever=ReadyPassages(corpus), reward="em")
        ours, peer = blocks[label] = ([], [])
        for _ in range(rounds):
            ours.append(percentiles(_time_steps(env, ANSWER, block))[0])
            peer.append(percentiles(_skyrl_answer(examples, block)[0])[0])  # type: ignore[index]
    return blocks


def breakdown(rounds: int, block: int, corpus: Corpus) -> list[tuple[str, list[float]]]:
    """The answer step's phases on the NQ inputs, each phase's p50 per block, blocks alternating with
    skyrl-gym's answer step (whose p50s come last, under its own name)."""
    from searchenv.env.step_rules import plan_step, score_outcomes, step_outcome
    from searchenv.reward_specs.format_check import check_format
    from searchenv.reward_specs.metrics import answer_scores

    examples = inputs()["NQ"]
    env = SearchQAEnv(dataset=examples, retriever=ReadyPassages(corpus), reward="em")
    answers = [ANSWER.format(a=example.golden_answers[0]) for example in examples]
    names = (
        "read the action (parse, plan)",
        "the turn and the episode's facts (counts, think 4-grams, texts)",
        "the reward spec: every part",
        "  of which the answer scores (EM, F1, cover-EM)",
        "  of which the format grammar",
        "metrics and `info` (apply)",
        "searchenv answer step, whole",
    )
    phases: dict[str, list[float]] = {name: [] for name in (*names, "skyrl-gym answer step")}
    clock = time.perf_counter_ns
    for _ in range(rounds):
        samples: list[list[int]] = [[] for _ in names]
        for i in range(block):
            env.reset(options={"index": i % len(examples)})
            episode, action = env.episode, answers[i % len(examples)]
            t0 = clock()
            plan = plan_step(env, episode, action)
            t1 = clock()
            outcome = step_outcome(env, episode, plan, None, score=False)
            t2 = clock()
            score_outcomes([env.reward_spec], [outcome])
            t3 = clock()
            answer_scores(outcome.facts.prediction, episode.example.golden_answers)  # type: ignore[union-attr]
            t4 = clock()
            check_format(outcome.facts.response, env.protocol)  # type: ignore[union-attr]
            t5 = clock()
            env.apply_step(outcome)
            t6 = clock()
            env.reset(options={"index": i % len(examples)})
            t7 = clock()
            env.step(action)
            t8 = clock()
            for kept, spent in zip(samples, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t8 - t7)):
                kept.append(spent)
        for name, kept in zip(names, samples):
            phases[name].append(percentiles(kept)[0])
        phases["skyrl-gym answer step"].append(percentiles(_skyrl_answer(examples, block)[0])[0])  # type: ignore[index]
    return list(phases.items())


def _time_resets(env: SearchQAEnv, steps: int) -> list[int]:
    samples = []
    for i in range(steps):
        start = time.perf_counter_ns()
        env.reset(options={"index": i % len(env.examples)})
        samples.append(time.perf_counter_ns() - start)
    return samples


def _skyrl_answer(examples: Sequence[QAExample], steps: int) -> tuple[list[int], list[int]] | None:
    """skyrl-gym's answer step alone, and its one-action episode as SkyRL's generator runs one: a fresh env from
    ``skyrl_gym.make`` per trajectory with the question's gold answers, ``init`` with the question, then the
    step answering its first gold — the inputs searchenv's rows get."""
    try:
        import skyrl_gym
        from omegaconf import OmegaConf
    except ImportError:
        return None
    config = OmegaConf.create(
        {"search_url": "http://127.0.0.1:9/retrieve", "topk": 3, "timeout": 1, "log_requests": False}
    )
    step_samples, episode_samples = [], []
    for i in range(steps):
        example = examples[i % len(examples)]
        extras = {"reward_spec": {"ground_truth": {"target": list(example.golden_answers)}}, "max_turns": 2}
        action = ANSWER.format(a=example.golden_answers[0])
        start = time.perf_counter_ns()
        env = skyrl_gym.make("search", env_config=config, extras=extras)
        env.init([{"role": "user", "content": example.question}])
        stepped = time.perf_counter_ns()
        env.step(action)
        end = time.perf_counter_ns()
        step_samples.append(end - stepped)
        episode_samples.append(end - start)
    return step_samples, episode_samples


def vectorised(num_envs: int, vec_steps: int) -> tuple[float, float, float]:
    corpus_path = SHARED / "corpus" / "union.jsonl"
    questions = SHARED / "qa" / "nq_test_1000.jsonl"
    start = time.perf_counter()
    venv = gym.make_vec(
        "SearchQA-v0",
        num_envs=num_envs,
        dataset=str(questions),
        corpus=str(corpus_path),
        retriever="bm25",
        max_turns=vec_steps + 1,
    )
    build = time.perf_counter() - start
    _, infos = venv.reset(seed=0)
    actions = [f"<search>{q}</search>" for q in infos["question"]]
    times = []
    for _ in range(vec_steps):
        start = time.perf_counter()
        venv.step(actions)
        times.append(time.perf_counter() - start)
    per_step = statistics.median(times)
    return build, num_envs / per_step, per_step * 1000


def long_episodes(turns: int, think_words: int, episodes: int, corpus: Corpus) -> tuple[float, float, float]:
    """An episode of ``turns`` actions, each thinking ``think_words`` words, then searching (the last answers):
    median whole-episode stepping time (ms), and the median time of its first and of its last non-final step
    (µs). A step whose cost grows with the transcript so far shows as a last step dearer than the first."""
    import random

    rng = random.Random(turns * 7919 + think_words)
    vocab = [f"w{i}" for i in range(400)]
    thoughts = [" ".join(rng.choice(vocab) for _ in range(think_words)) for _ in range(turns)]
    actions = [f"<think>{t}</think>\n<search> query {i} </search>" for i, t in enumerate(thoughts[:-1])]
    actions.append(f"<think>{thoughts[-1]}</think>\n<answer> x </answer>")
    env = SearchQAEnv(dataset=[QAExample("x", "q", ("x",))], retriever=ReadyPassages(corpus), max_turns=turns)
    totals, firsts, lasts = [], [], []
    for _ in range(episodes):
        env.reset(seed=0)
        steps = []
        for action in actions:
            start = time.perf_counter_ns()
            env.step(action)
            steps.append(time.perf_counter_ns() - start)
        totals.append(sum(steps) / 1e6)
        firsts.append(steps[0] / 1e3)
        lasts.append(steps[-2] / 1e3 if turns > 1 else steps[0] / 1e3)
    return statistics.median(totals), statistics.median(firsts), statistics.median(lasts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--vec-steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=12, help="alternating answer-step blocks vs skyrl-gym (0: skip)")
    parser.add_argument("--block", type=int, default=3_000, help="steps per alternating block")
    parser.add_argument(
        "--breakdown", type=int, default=0, help="only time the answer step's phases, this many blocks (0: no)"
    )
    parser.add_argument(
        "--long-episodes",
        type=int,
        default=0,
        help="only time episodes of 4 and 32 turns x 1,500 think words, this many of each (0: the usual sections)",
    )
    args = parser.parse_args()
    corpus = Corpus.from_jsonl(SHARED / "corpus" / "flashrag_sample.jsonl")
    if args.breakdown:
        rows = breakdown(args.breakdown, args.block, corpus)
        peer = statistics.median(rows[-1][1])
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"NQ answer step, {args.breakdown} blocks of {args.block} alternating with skyrl-gym; load {load}")
        print("| part | median block p50 µs (blocks) | × skyrl-gym's whole step |\n|---|---|---|")
        for name, p50s in rows:
            spread = f"{min(p50s):.1f}–{max(p50s):.1f}"
            print(f"| {name} | {statistics.median(p50s):.1f} ({spread}) | {statistics.median(p50s) / peer:.2f} |")
        return
    if args.long_episodes:
        print("| turns x think words | episode ms (median) | first step µs | last non-final step µs |")
        print("|---|---|---|---|")
        for turns in (4, 32):
            total, first, last = long_episodes(turns, 1500, args.long_episodes, corpus)
            print(f"| {turns} x 1,500 | {total:.2f} | {first:.0f} | {last:.0f} |")
        return
    print("| step | p50 µs | p99 µs | steps/s |\n|---|---|---|---|")
    for name, p50, p99, rate in overhead(args.steps, corpus):
        print(f"| {name} | {p50:.1f} | {p99:.1f} | {rate:,.0f} |")
    blocks = alternating(args.rounds, args.block, corpus) if args.rounds else {}
    for label, (ours, peer) in blocks.items():
        ratios = [a / b for a, b in zip(ours, peer, strict=True)]
        print(
            f"\n{label}: answer step, `em`, {args.rounds} alternating blocks of {args.block}: median block p50 "
            f"{statistics.median(ours):.1f} µs vs skyrl-gym {statistics.median(peer):.1f} µs, ratio "
            f"{statistics.median(ratios):.2f}× (blocks {min(ratios):.2f}–{max(ratios):.2f}×)"
        )
    build, rate, ms = vectorised(args.num_envs, args.vec_steps)
    print(
        f"\nmake_vec N={args.num_envs}, bm25 on union.jsonl (build {build:.1f} s): "
        f"{rate:,.0f} env-steps/s, {ms:.1f} ms per vector step (median of {args.vec_steps})"
    )


if __name__ == "__main__":
    main()
