"""The OpenEnv server of SearchQA: :func:`create_app` builds it on OpenEnv's own ``create_app``.

Every route OpenEnv defines is served as OpenEnv serves it — ``/reset``, ``/step``, ``/state``, ``/schema``,
``/metadata``, ``/health``, the WebSocket sessions at ``/ws`` that ``EnvClient`` uses, and the Task API routes —
because the app *is* OpenEnv's; this module only decides what each session's environment shares (one
:class:`~searchenv.adapters.openenv.environment.SearchQATasks`: questions, engine and reward spec built once).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from searchenv.adapters.openenv.defaults import DEFAULT_MAX_SESSIONS
from searchenv.adapters.openenv.environment import SearchQAEnvironment, SearchQATasks
from searchenv.adapters.openenv.models import SearchAction, SearchObservation, SearchState

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["ENV_NAME", "create_app"]

#: The name OpenEnv's manifest and task routes use.
ENV_NAME = "searchqa"
#: Concurrent WebSocket sessions a server accepts unless told otherwise (each holds one episode, not an engine).


def create_app(max_sessions: int = DEFAULT_MAX_SESSIONS, **env_kwargs: Any) -> FastAPI:
    """OpenEnv's FastAPI app serving SearchQA; ``env_kwargs`` are ``SearchQAEnv`` arguments (``dataset``,
    ``split``, ``retriever``, ``reward``, ``protocol``, ``topk``, ``max_turns``, …), checked and loaded now.

    ``max_sessions`` bounds the concurrent WebSocket sessions (OpenEnv's ``max_concurrent_envs``).
    """
    from openenv.core.env_server.http_server import create_app as openenv_create_app

    if not isinstance(max_sessions, int) or isinstance(max_sessions, bool) or max_sessions < 1:
        raise ValueError(f"max_sessions must be a positive integer, got {max_sessions!r}")
    tasks = SearchQATasks(env_kwargs)
    return openenv_create_app(
        functools.partial(SearchQAEnvironment, tasks),
        SearchAction,
        SearchObservation,
        env_name=ENV_NAME,
        max_concurrent_envs=max_sessions,
        state_cls=SearchState,
    )
