"""Running the retrieval service: one process, or several uvicorn workers sharing a port.

A server whose retriever cannot be built exits non-zero with the cause: with one process the load failure stops
uvicorn; with several workers the parent builds the retriever once before starting them (which also builds an
index directory once instead of N workers racing to build it).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from searchenv.retrievers.server.app import ServerConfig, build_retriever, create_app

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["CONFIG_ENV", "RetrieverBuildError", "app_from_env", "serve"]

log = logging.getLogger("searchenv.server")

#: Environment variable through which :func:`serve` hands the configuration to uvicorn worker processes.
CONFIG_ENV = "SEARCHENV_SERVE_CONFIG"


class RetrieverBuildError(RuntimeError):
    """The configured retriever could not be built; the service did not (or no longer does) serve."""


def app_from_env() -> FastAPI:
    """App factory for uvicorn worker processes: reads :class:`ServerConfig` JSON from ``$SEARCHENV_SERVE_CONFIG``."""
    text = os.environ.get(CONFIG_ENV)
    if not text:
        raise RuntimeError(f"${CONFIG_ENV} is not set; start the server with `searchenv serve` or serve()")
    return create_app(ServerConfig.from_json(text))


def serve(
    config: ServerConfig, host: str = "127.0.0.1", port: int = 8000, workers: int = 1, log_level: str = "info"
) -> None:
    """Run the service until interrupted (blocking); raises :class:`RetrieverBuildError` when the retriever fails.

    With ``workers > 1`` uvicorn starts that many processes on one socket; each builds its retriever from the
    same files, so engines that memory-map their index share its pages through the OS page cache.
    """
    import uvicorn

    if workers > 1:
        try:
            build_retriever(config)  # discarded: proves the configuration works and leaves built indexes on disk
        except Exception as exc:
            raise RetrieverBuildError(f"{type(exc).__name__}: {exc}") from exc
        os.environ[CONFIG_ENV] = config.to_json()
        uvicorn.run(
            "searchenv.retrievers.server.run:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
            access_log=False,
        )
        return
    failures: list[str] = []

    def stop(cause: str) -> None:
        failures.append(cause)
        server.should_exit = True

    app = create_app(config, on_load_failure=stop)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False))
    server.run()
    if failures:
        raise RetrieverBuildError(failures[0])
