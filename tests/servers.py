"""Real retrieval servers on loopback for tests and benchmarks: in a thread, or in a child process.

Not part of the product: users run ``searchenv serve``. ``bench/`` scripts import this module too (they put
``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any


@contextmanager
def serve_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a background thread; yields its base URL (``port=0`` picks a free port).

    ``app`` is any ASGI app (the retrieval app, or a fake web-search API in tests).
    """
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, name="searchenv-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the in-thread server did not start on {host}:{port}")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (for child servers that must be told their port)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def spawn_server(
    args: Sequence[str],
    port: int | None = None,
    host: str = "127.0.0.1",
    env: dict[str, str] | None = None,
    startup_timeout: float = 120.0,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``python -m searchenv.retrievers.server ARGS`` in a child process and wait until it is ready.

    Returns the process and its base URL. The child's output goes to a temporary file (a pipe nobody reads
    would stall a long-running server once full) and is quoted in the ``RuntimeError`` raised when the child
    exits, reports that its engine failed, or is not ready within ``startup_timeout`` seconds. The caller owns
    the process (terminate it when done).
    """
    import tempfile

    import httpx

    port = free_port(host) if port is None else port
    command = [sys.executable, "-m", "searchenv.retrievers.server", *args, "--host", host, "--port", str(port)]
    log_file = tempfile.TemporaryFile()  # noqa: SIM115 - the child keeps writing to it after we return
    process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    url = f"http://{host}:{port}"

    def fail(why: str) -> RuntimeError:
        if process.poll() is None:
            process.kill()
            process.wait()
        log_file.seek(0)
        output = log_file.read().decode(errors="replace")[-4000:]
        return RuntimeError(f"server {why}: {' '.join(command)}\n{output}")

    deadline = time.monotonic() + startup_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise fail(f"exited with status {process.returncode}")
        try:
            health = httpx.get(f"{url}/health", timeout=2.0)
            if health.status_code == 200:
                return process, url
            if health.json().get("status") == "error":
                raise fail(f"could not build its retriever ({health.json().get('error')})")
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.05)
    raise fail(f"not ready after {startup_timeout}s")


@contextmanager
def serve_transformers(model_dir: str | os.PathLike[str], startup_timeout: float = 300.0) -> Iterator[str]:
    """A real OpenAI-compatible server: ``transformers serve MODEL_DIR`` on loopback, CPU; yields its base URL.

    The evaluation's endpoint policy, the LLM judge and the simulated search engine are tested against it.
    """
    import httpx

    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(model_dir)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--device", "cpu"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"transformers serve exited: {process.stderr.read()[-2000:]}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"transformers serve did not come up in {startup_timeout:.0f} s")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def openai_chat_app(reply: Any, asked: list[str] | None = None) -> Any:
    """A loopback stand-in speaking OpenAI's ``/v1/chat/completions`` wire format, for fast tests of clients.

    ``reply(prompt)`` gives the assistant's text, or an int HTTP status to fail with; every prompt asked is
    appended to ``asked``. Not a model: the tests that need one use :func:`serve_transformers`.
    """
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def chat(request: Any) -> Any:
        body = await request.json()
        prompt = body["messages"][-1]["content"]
        if asked is not None:
            asked.append(prompt)
        answer = reply(prompt)
        if isinstance(answer, int):
            return JSONResponse({"error": {"message": "stand-in failure"}}, status_code=answer)
        choice = {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
        return JSONResponse({"choices": [choice], "usage": {"completion_tokens": len(answer.split())}})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
