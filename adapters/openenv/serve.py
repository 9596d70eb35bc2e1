"""``searchenv openenv-serve``: SearchQA as an OpenEnv server (OpenEnv's own app under uvicorn, loopback by default).

Every ``SearchQAEnv`` option is a flag, spelt and checked as in every other command
(:func:`searchenv.cli.arguments.add_env_arguments`), so a protocol, engine, reward spec or dataset served here is
the one ``searchenv eval`` or a trainer would build from the same flags.
"""

from __future__ import annotations

import argparse
from typing import Any

from searchenv.adapters.openenv.defaults import DEFAULT_MAX_SESSIONS
from searchenv.cli.arguments import add_env_arguments, env_kwargs, positive_int

__all__ = ["add_parser", "run_openenv_serve"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``searchenv openenv-serve`` (imports nothing of OpenEnv: the CLI builds without the extra)."""
    parser = subparsers.add_parser(
        "openenv-serve",
        description="Serve SearchQA as an OpenEnv environment: OpenEnv's HTTP routes (/reset, /step, /state, "
        "/schema, /health), its WebSocket sessions (/ws, what EnvClient uses) and the Task API (splits, tasks, "
        "reset(split=, index=)), on 127.0.0.1 by default. Needs searchenv[openenv].",
    )
    add_env_arguments(parser)
    serve = parser.add_argument_group("openenv")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (loopback by default; 0.0.0.0 exposes it)")
    serve.add_argument("--port", type=positive_int, default=8000, help="port (OpenEnv's manifests use 8000)")
    serve.add_argument(
        "--max-sessions",
        type=positive_int,
        default=DEFAULT_MAX_SESSIONS,
        help="concurrent WebSocket sessions, each with its own episode",
    )
    serve.add_argument("--log-level", default="warning", help="uvicorn's log level")
    parser.set_defaults(handler=run_openenv_serve)
    return parser


def run_openenv_serve(args: argparse.Namespace) -> int:
    """Check the options, build the app (questions, engine and reward spec load once), serve until interrupted."""
    kwargs = env_kwargs(args)  # checked before anything loads
    import uvicorn

    from searchenv.adapters.openenv.app import create_app

    app = create_app(max_sessions=args.max_sessions, **kwargs)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    return 0
