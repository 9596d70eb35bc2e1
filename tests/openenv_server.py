"""``searchenv openenv-serve`` in a child process on a free loopback port, for the OpenEnv tests."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from servers import free_port


@contextmanager
def openenv_server(*args: str, startup_timeout: float = 240.0) -> Iterator[str]:
    """Run the real command with ``args`` until the block ends; yields its base URL once ``/health`` answers."""
    import httpx

    port = free_port()
    command = [sys.executable, "-m", "searchenv.cli", "openenv-serve", *args, "--port", str(port)]
    log = tempfile.TemporaryFile()  # noqa: SIM115 - the child writes to it until it is terminated
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if process.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"openenv-serve exited: {log.read().decode(errors='replace')[-3000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"openenv-serve did not come up in {startup_timeout:.0f} s")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
