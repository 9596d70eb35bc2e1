"""Embedded world generation: passages per second and peak memory at several sizes.

Each size runs in a fresh Python process, so its peak RSS (``ru_maxrss``) is that size's alone. The peer in
the same run is the cost of *loading* passages instead of generating them: ``Corpus.from_jsonl(...,
in_memory=True)`` on the shared 19,637-passage wiki-18 union file. Wall time on a shared machine moves with
the load; CPU time (``process_time``) is steadier, so both are reported.

With ``--stream DIR`` each world is written to ``DIR/world-<size>`` by ``write_world`` (passages streamed to
disk in bounded memory, the way a 21M-passage world is made) instead of built in memory.

    python bench/bench_world.py [--sizes 20000,200000,1000000] [--seed 0] [--stream /work/cache]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

UNION = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "corpus" / "union.jsonl"

_CHILD = """
import json, resource, sys, time
from searchenv.corpus import Corpus
from searchenv.data.world.generator import generate_world, write_world
size, seed, peer, stream = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
wall, cpu = time.perf_counter(), time.process_time()
if stream:  # a progress bar on stderr from 200,000 passages
    write_world(stream, size, seed=seed)
else:
    world = generate_world(size, seed=seed)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if stream:  # words over the first 100,000 passages, read back from the file
    with open(f"{stream}/corpus.jsonl", encoding="utf-8") as handle:
        texts = [json.loads(line)["contents"].partition("\\n")[2] for _, line in zip(range(100_000), handle)]
    questions = sum(1 for name in ("train", "test") for _ in open(f"{stream}/{name}.jsonl"))
else:
    texts, questions = world.corpus.texts, len(world.questions)
    del world
words = sum(text.count(" ") + 1 for text in texts) / len(texts)
del texts
peer_cpu = time.process_time()
peer_passages = len(Corpus.from_jsonl(peer, in_memory=True)) if peer else 0
peer_cpu = time.process_time() - peer_cpu
print(json.dumps({"size": size, "questions": questions, "wall": wall, "cpu": cpu,
                  "words": words, "base_rss_kb": base_rss, "peak_rss_kb": peak_rss,
                  "peer_passages": peer_passages, "peer_cpu": peer_cpu}))
"""


def measure(size: int, seed: int, peer: Path | None, stream: Path | None) -> dict:
    """Generate one world of ``size`` passages in a child process and return its figures.

    The child's stderr is passed through, so its progress bar shows during the long sizes.
    """
    target = "" if stream is None else str(stream / f"world-{size}")
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(size), str(seed), str(peer or ""), target],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20000,200000,1000000", help="comma-separated passage counts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stream", type=Path, help="write each world under this directory with write_world")
    args = parser.parse_args()
    peer = UNION if UNION.is_file() else None
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}\n")
    print("| passages | questions | wall s | passages/s (wall) | CPU s | passages/s (CPU) | peak RSS | mean words |")
    print("|---|---|---|---|---|---|---|---|")
    peer_rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        r = measure(size, args.seed, peer, args.stream)
        print(
            f"| {size:,} | {r['questions']:,} | {r['wall']:.2f} | {size / r['wall']:,.0f} | {r['cpu']:.2f} "
            f"| {size / r['cpu']:,.0f} | {r['peak_rss_kb'] / 1024:,.0f} MiB | {r['words']:.1f} |",
            flush=True,
        )
        if r["peer_passages"]:
            peer_rows.append((size, size / r["cpu"], r["peer_passages"] / r["peer_cpu"]))
    if peer_rows:
        print(
            f"\nPeer in the same child process: `Corpus.from_jsonl(in_memory=True)` on the passages of {UNION.name}.\n"
        )
        print("| passages | generated passages/s (CPU) | loaded passages/s (CPU) | generated / loaded |")
        print("|---|---|---|---|")
        for size, generated, loaded in peer_rows:
            print(f"| {size:,} | {generated:,.0f} | {loaded:,.0f} | {generated / loaded:.2f} |")
    print(f"\nRSS after imports, before generating: {r['base_rss_kb'] / 1024:,.0f} MiB")
    if args.stream:
        print("Worlds streamed to disk with write_world; mean words over the first 100,000 passages read back.")


if __name__ == "__main__":
    main()
