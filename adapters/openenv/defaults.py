"""Settings the OpenEnv server and its command share, in a module that imports nothing of OpenEnv (the command's
flags build without the ``openenv`` extra)."""

__all__ = ["DEFAULT_MAX_SESSIONS"]

#: Concurrent sessions one server holds by default (OpenEnv's ``max_concurrent_envs``).
DEFAULT_MAX_SESSIONS = 64
