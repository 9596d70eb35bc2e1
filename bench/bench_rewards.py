"""Reward scoring cost: searchenv's specs against Search-R1's EM scorer (as vendored by skyrl-gym), same run.

1. Score 1,000 Search-R1-style responses built from NQ questions (one search round, three real wiki-18
   passages, answer right or wrong): skyrl-gym's ``compute_score`` (EM only, regex extraction) against
   searchenv's ``Rollout.from_text`` + ``em`` and + ``format-retrieval`` (format state machine + retrieval hit).
2. Retrieval hit over the same 1,000 responses (three passages each), with ``--search-r1 PATH``: Search-R1's own
   ``is_retrieval_correct(response, golden_answers)`` (``verl/utils/reward_score/qa_em_format.py`` of a checkout
   of github.com/PeterGriffinJin/Search-R1, loaded from that file: it is not a package) against searchenv's
   ``answer_in_passages`` over the passages the episode recorded.
3. Adversarial inputs (linear-time reading): ~1 MB responses of unmatched closing tags, unmatched opening tags,
   nested answers, and ~3 MB of search/information cycles, scored by the text path (trusted, ``format-retrieval``) and,
   for a single 1 MB action, by the environment's step.

    python bench/bench_rewards.py [--questions 1000] [--repeats 3] [--search-r1 PATH/Search-R1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

from search_r1_peer import import_file  # bench/search_r1_peer.py, beside this script
from skyrl_gym.envs.search import utils as peer

from searchenv.protocol import PROTOCOLS
from searchenv.reward_specs import Rollout, answer_in_passages, load_reward
from searchenv.types import Passage, split_contents

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    """Fastest of ``repeats`` wall-clock runs, in seconds (the least disturbed by the shared machine)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def search_r1_reward_module(checkout: Path) -> ModuleType:
    """Search-R1's ``qa_em_format.py`` (its retrieval check lives there), imported from a checkout by path."""
    path = checkout / "verl" / "utils" / "reward_score" / "qa_em_format.py" if checkout.is_dir() else checkout
    if not path.is_file():
        raise SystemExit(f"--search-r1: {path} not found; pass a checkout of github.com/PeterGriffinJin/Search-R1")
    return import_file(path, "search_r1_qa_em_format")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--search-r1", type=Path, help="a Search-R1 checkout: compare its retrieval check too")
    args = parser.parse_args()

    rng = random.Random(0)
    rows = [json.loads(line) for line in (SHARED / "qa" / "nq_test_1000.jsonl").open()][: args.questions]
    corpus = [json.loads(line)["contents"] for line in (SHARED / "corpus" / "wiki18_ros.jsonl").open()]
    protocol = PROTOCOLS["search-r1"]
    cases = []
    for row in rows:
        passages = [Passage(str(i), *split_contents(corpus[i])) for i in rng.sample(range(len(corpus)), 3)]
        answer = row["golden_answers"][0] if rng.random() < 0.5 else "no idea"
        response = (
            f"<think>I should look this up.</think>\n<search> {row['question']} </search>"
            f"{protocol.format_passages(passages)}<think>Now I know.</think>\n<answer> {answer} </answer>"
        )
        cases.append((response, row["golden_answers"], [p.contents for p in passages]))

    em_spec, fr_spec = load_reward("em"), load_reward("format-retrieval")
    n = len(cases)
    timings = {
        "skyrl-gym compute_score (EM)": best_of(
            args.repeats, lambda: [peer.compute_score(r, {"target": g}) for r, g, _ in cases]
        ),
        "searchenv from_text + em": best_of(
            args.repeats, lambda: [em_spec(Rollout.from_text(r, g)) for r, g, _ in cases]
        ),
        "searchenv from_text (trusted) + format-retrieval": best_of(
            args.repeats, lambda: [fr_spec(Rollout.from_text(r, g, trust_transcript=True)) for r, g, _ in cases]
        ),
    }
    agree = sum(
        float(peer.compute_score(r, {"target": g})) == em_spec(Rollout.from_text(r, g)).reward for r, g, _ in cases
    )
    print(f"## scoring {n} responses (EM agreement with skyrl-gym: {agree}/{n})")
    base = timings["skyrl-gym compute_score (EM)"]
    for name, seconds in timings.items():
        print(f"| {name} | {seconds / n * 1e6:.1f} µs/response | {base / seconds:.2f}× skyrl-gym |")

    if args.search_r1 is None:
        print("## retrieval hit: skipped (pass --search-r1 PATH to time Search-R1's is_retrieval_correct beside ours)")
    else:
        search_r1 = search_r1_reward_module(args.search_r1)
        peer_s = best_of(args.repeats, lambda: [search_r1.is_retrieval_correct(r, g) for r, g, _ in cases])
        ours_s = best_of(args.repeats, lambda: [answer_in_passages(g, t) for _, g, t in cases])
        peer_hits = sum(bool(search_r1.is_retrieval_correct(r, g)) for r, g, _ in cases)
        ours_hits = sum(answer_in_passages(g, t) for _, g, t in cases)
        print(f"## retrieval hit, {n} responses × 3 passages (hits: Search-R1 {peer_hits}, searchenv {ours_hits})")
        print(f"| Search-R1 is_retrieval_correct(response) | {peer_s / n * 1e6:.1f} µs/response | 1.00× |")
        ratio = peer_s / ours_s
        print(f"| searchenv answer_in_passages(passages) | {ours_s / n * 1e6:.1f} µs/response | {ratio:.2f}× |")
    adversarial(args.repeats)


class FixedRetriever:
    """One short passage for any query: the step's cost is the environment's, not an engine's."""

    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        return [[Passage("1", "T", "some passage text")] for _ in queries]


def adversarial(repeats: int) -> None:
    """Scoring time of ~1 MB hostile responses: every reader must stay linear."""
    from searchenv import SearchQAEnv

    info = PROTOCOLS["search-r1"].format_passages([Passage("1", "T", "some passage text")])
    cases = {
        "unmatched </answer> ×110k (1 MB)": "</answer>" * 110_000,
        "unmatched <answer> ×125k (1 MB)": "<answer>" * 125_000,
        "nested <answer> ×90k then one close (1 MB)": "<answer> x " * 90_000 + "</answer>",
        "end markers <|im_end|> ×100k (1 MB)": "<think>a</think><answer>x</answer>" + "<|im_end|>" * 100_000,
        "search/information cycles ×40k (3 MB)": ("<search>q</search>" + info + "<think>t</think>") * 40_000,
    }
    spec = load_reward("format-retrieval")
    print("## adversarial responses, text path (trusted) + format-retrieval, and one 1 MB env step")
    print("| input | chars | text path | env step |")
    for name, text in cases.items():
        scored = best_of(repeats, lambda t=text: spec(Rollout.from_text(t, ["x"], trust_transcript=True)))
        env = SearchQAEnv(
            dataset=[{"id": "a", "question": "q", "golden_answers": ["x"]}],
            retriever=FixedRetriever(),
            reward=spec,
            max_turns=1,
        )

        def step(t: str = text) -> None:
            env.reset(options={"index": 0})
            env.step(t)

        stepped = best_of(repeats, step)
        print(f"| {name} | {len(text):,} | {scored * 1e3:.1f} ms | {stepped * 1e3:.1f} ms |")


if __name__ == "__main__":
    main()
