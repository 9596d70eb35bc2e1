"""A judged step under an asynchronous trainer, and an outage behind a proxy: what a slow or dead service costs.

1. ``--episodes`` environments (siblings: one reward spec) end at once under ``step_async`` with ``reward="judge"``
   against a loopback OpenAI-compatible stand-in that holds every request ``--hold`` seconds and answers "yes".
   Reported: the wall time until every episode has its reward, the most judge requests in flight at once (at the
   server), and the longest the event loop was blocked (the largest gap between ticks of a coroutine that sleeps
   5 ms at a time beside the episodes).
2. ``--outage``: ``--envs`` environments search at once through the ``/retrieve`` client (``retry_window=2``)
   against a server answering every request with 502 Bad Gateway (a proxy in front of a dead retrieval server).
   Reported: the wall time of the step and the requests the server received.

    python bench/bench_judge_async.py [--episodes 8] [--hold 1.0] [--outage --envs 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from servers import openai_chat_app, serve_in_thread  # tests/servers.py: loopback servers

from searchenv import SearchQAEnv, step_batch
from searchenv.reward_specs import load_reward


class Held:
    """An ASGI wrapper holding each HTTP request ``hold`` seconds; counts requests and the most in flight."""

    def __init__(self, app: object, hold: float):
        self.app, self.hold, self.now, self.peak, self.count = app, hold, 0, 0, 0

    async def __call__(self, scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return await self.app(scope, receive, send)  # type: ignore[operator]
        self.now, self.count = self.now + 1, self.count + 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(self.hold)
            await self.app(scope, receive, send)  # type: ignore[operator]
        finally:
            self.now -= 1


def judged_step(episodes: int, hold: float) -> None:
    server = Held(openai_chat_app(lambda prompt: "yes"), hold)
    with serve_in_thread(server) as url:
        base = SearchQAEnv(retriever="random", reward=load_reward("judge", url=url, model="judge", retries=0))
        envs = [base] + [base.sibling() for _ in range(episodes - 1)]
        for i, env in enumerate(envs):
            env.reset(seed=i)
        server.count = server.peak = 0  # the reward's build-time check, where there is one

        async def main() -> tuple[float, float]:
            ticks = [time.perf_counter()]
            done = False

            async def ticker() -> None:
                while not done:
                    await asyncio.sleep(0.005)
                    ticks.append(time.perf_counter())

            ticking = asyncio.create_task(ticker())
            await asyncio.sleep(0)
            start = time.perf_counter()
            await asyncio.gather(*(env.step_async("<answer>right</answer>") for env in envs))
            wall = time.perf_counter() - start
            done = True
            await ticking
            return wall, max(b - a for a, b in zip(ticks, ticks[1:]))

        wall, blocked = asyncio.run(main())
    print(
        f"{episodes} judged step_async episodes, judge holding each request {hold:g} s: {wall:.2f} s until all were "
        f"scored; {server.count} requests, at most {server.peak} in flight; event loop blocked at most {blocked:.2f} s"
    )


def outage(envs_count: int) -> None:
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from searchenv.retrievers.remote.retriever import RemoteRetriever

    requests = [0]

    async def retrieve(request: object) -> PlainTextResponse:
        requests[0] += 1
        return PlainTextResponse("502 Bad Gateway", status_code=502)

    with serve_in_thread(Starlette(routes=[Route("/retrieve", retrieve, methods=["POST"])])) as url:
        client = RemoteRetriever(url, retry_window=2.0, seed=0)
        base = SearchQAEnv(retriever=client)
        envs = [base] + [base.sibling() for _ in range(envs_count - 1)]
        for i, env in enumerate(envs):
            env.reset(seed=i)
        start = time.perf_counter()
        results = step_batch(envs, [f"<search>{env.episode.example.question}</search>" for env in envs])
        wall = time.perf_counter() - start
    failed = sum("retrieval_error" in r.info for r in results)
    print(
        f"502 outage, {envs_count} environments, retry_window=2: one step took {wall:.1f} s and {requests[0]} "
        f"requests; {failed} episodes saw the search fail"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--hold", type=float, default=1.0)
    parser.add_argument("--outage", action="store_true", help="also measure a 502 outage of the /retrieve client")
    parser.add_argument("--envs", type=int, default=16)
    args = parser.parse_args()
    judged_step(args.episodes, args.hold)
    if args.outage:
        outage(args.envs)


if __name__ == "__main__":
    main()
