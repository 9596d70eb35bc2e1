"""veRL glue: the agent loop and ``compute_score`` (:mod:`.agent_loop`), the native tool and its agent loop
(:mod:`.tool`), and the packaged launch files (:mod:`.launch`, ``configs/``, ``scripts/``).

The names veRL's configs point at — ``_target_: searchenv.adapters.verl.SearchEnvAgentLoop``,
``reward.custom_reward_function.path=pkg://searchenv.adapters.verl`` with ``name=compute_score`` and the tool's
``class_name`` — are resolved here on first use, so ``searchenv verl write`` works without veRL installed.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["SearchEnvAgentLoop", "SearchTool", "SearchToolAgentLoop", "compute_score"]

_EXPORTS = {
    "SearchEnvAgentLoop": "searchenv.adapters.verl.agent_loop",
    "compute_score": "searchenv.adapters.verl.agent_loop",
    "SearchTool": "searchenv.adapters.verl.tool",
    "SearchToolAgentLoop": "searchenv.adapters.verl.tool",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
