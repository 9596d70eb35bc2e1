"""SkyRL-gym episode cost: searchenv's adapter against skyrl-gym's own ``search`` env, same server, same run.

SkyRL's generator builds one environment per trajectory (``skyrl_gym.make``), calls ``init`` and then ``step``
per turn, so the cost per episode — construction included — is what a training run pays on the CPU side. Both
environments play ``<search>question</search>`` then ``<answer>gold</answer>`` (max_turns 2) for NQ questions,
against one ``searchenv serve`` BM25 server on ../shared/data/corpus/union.jsonl over loopback HTTP, with the
server's query cache off so neither side benefits from the other's requests. Blocks of episodes alternate
between the two environments to spread machine noise evenly.

    python bench/bench_adapters.py [--episodes 300] [--block 50] [--port 8765]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def start_server(port: int) -> subprocess.Popen:
    corpus = SHARED / "corpus" / "union.jsonl"
    command = [
        sys.executable,
        "-m",
        "searchenv.retrievers.server",
        "--retriever",
        "bm25",
        "--corpus",
        str(corpus),
        "--port",
        str(port),
    ]
    server = subprocess.Popen([*command, "--cache-size", "0", "--log-level", "warning"])
    url = f"http://127.0.0.1:{port}/health"
    for _ in range(300):
        try:
            if json.load(urllib.request.urlopen(url, timeout=2)).get("ready"):
                return server
        except OSError:
            pass
        time.sleep(1)
    server.kill()
    sys.exit(f"server on port {port} not ready after 300 s")


def play(make, rows) -> tuple[list[float], list[float]]:
    """Seconds per whole episode and per search step, for each row."""
    episodes, searches = [], []
    for question, gold in rows:
        start = time.perf_counter()
        env = make(question, gold)
        env.init([{"role": "user", "content": f"Question: {question}"}])
        before = time.perf_counter()
        env.step(f"<search>{question}</search>")
        searches.append(time.perf_counter() - before)
        env.step(f"<answer>{gold[0]}</answer>")
        env.close()
        episodes.append(time.perf_counter() - start)
    return episodes, searches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()

    import skyrl_gym
    from skyrl_gym.envs.search.env import SearchEnv, SearchEnvConfig

    from searchenv.adapters.skyrl.env import ENV_ID, register_skyrl_env
    from searchenv.data.datasets import load_dataset

    examples = load_dataset(SHARED / "qa" / "nq_test_1000.jsonl")[: args.episodes]
    rows = [(e.question, list(e.golden_answers)) for e in examples]
    base = f"http://127.0.0.1:{args.port}"
    register_skyrl_env()

    def ours(question, gold):
        extras = {"reward_spec": {"ground_truth": {"target": gold}}, "extra_info": {"question": question}}
        return skyrl_gym.make(ENV_ID, env_config={"retriever": base}, extras={**extras, "max_turns": 2})

    def peer(question, gold):
        extras = {"reward_spec": {"ground_truth": {"target": gold}}, "max_turns": 2}
        return SearchEnv(SearchEnvConfig(search_url=f"{base}/retrieve"), extras=extras)

    server = start_server(args.port)
    try:
        play(ours, rows[:5]), play(peer, rows[:5])  # warm up connections and the adapter's shared retriever
        results = {"searchenv adapter": ([], []), "skyrl-gym search env": ([], [])}
        for i in range(0, len(rows), args.block):
            block = rows[i : i + args.block]
            for name, make in (("searchenv adapter", ours), ("skyrl-gym search env", peer)):
                episodes, searches = play(make, block)
                results[name][0].extend(episodes)
                results[name][1].extend(searches)
    finally:
        server.terminate()
        server.wait()

    print(f"{len(rows)} episodes each; BM25 server on union.jsonl (cache off), loopback HTTP\n")
    print("| environment | episodes/s | search step p50 | search step p99 | episode p50 |")
    print("|---|---|---|---|---|")
    rates = {}
    for name, (episodes, searches) in results.items():
        rates[name] = len(episodes) / sum(episodes)
        q = statistics.quantiles(searches, n=100)
        print(
            f"| {name} | {rates[name]:.0f} | {statistics.median(searches) * 1e3:.2f} ms | {q[98] * 1e3:.2f} ms | "
            f"{statistics.median(episodes) * 1e3:.2f} ms |"
        )
    print(
        f"\nratio (searchenv / skyrl-gym), episodes/s: {rates['searchenv adapter'] / rates['skyrl-gym search env']:.2f}"
    )


if __name__ == "__main__":
    main()
