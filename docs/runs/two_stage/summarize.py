"""EM, answer rate and searches per episode with 95% intervals, per (policy, method), from eval transcripts.

``searchenv eval`` writes point estimates to metrics.csv; issue 26 asks for intervals, so this reads the same
transcripts and adds them: Wilson intervals for the rates (EM, answer rate; exact at 0, unlike p ± 1.96·se) and a
normal interval for the mean number of searches. EM is also split by the question's hops (the world's metadata),
since the recipe trains 1-hop questions first::

    python docs/runs/two_stage/summarize.py runs/two_stage/eval/transcripts.jsonl > docs/runs/two_stage/intervals.md
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

Z = 1.959964


def wilson(successes: float, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a proportion."""
    if n == 0:
        return (math.nan, math.nan)
    p = successes / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and its 95% normal interval."""
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / max(n - 1, 1)
    half = Z * math.sqrt(var / n)
    return mean, mean - half, mean + half


def main(paths: list[str]) -> None:
    from searchenv.data.datasets import load_dataset

    hops = {e.id: e.metadata["hops"] for e in load_dataset("world", "test")}
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for path in paths:
        for line in Path(path).read_text().splitlines():
            record = json.loads(line)
            cells[(record["policy"], record["method"])].append(record)
    print("| policy | method | n | EM [95% CI] | answer rate [95% CI] | searches / episode [95% CI] | EM 1-hop (n) |")
    print("|---|---|---|---|---|---|---|")
    for (policy, method), records in sorted(cells.items()):
        n = len(records)
        em = sum(r["em"] for r in records)
        answered = sum(r["prediction"] is not None for r in records)
        searches = mean_interval([float(r["num_searches"]) for r in records])
        one_hop = [r for r in records if hops.get(r["id"]) == 1]
        lo, hi = wilson(em, n)
        alo, ahi = wilson(answered, n)
        one = f"{sum(r['em'] for r in one_hop) / max(len(one_hop), 1):.2f} ({len(one_hop)})"
        print(
            f"| {policy} | {method} | {n} | {em / n:.2f} [{lo:.2f}, {hi:.2f}] | {answered / n:.2f} [{alo:.2f}, "
            f"{ahi:.2f}] | {searches[0]:.2f} [{searches[1]:.2f}, {searches[2]:.2f}] | {one} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
