"""The environment options a verifiers run sets (``--env.taskset.task.options.*``): searchenv's, typed for pydantic.

verifiers configs are pydantic models that travel as JSON (to the toolset's process in ``VF_CONFIG``, into traces),
so the options are plain values: names and paths, never objects. Each is the :class:`~searchenv.env.SearchQAEnv`
argument of the same name with the same default, except ``protocol``, which must be a tool-call protocol whose
answer is the final message: ``tool-call`` (an ``<answer>`` block, as ``searchenv eval --protocol tool-call``
plays), ``tool-call-message`` (the whole final message) or ``tool-call-open`` (adds the ``open`` tool).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field
from pydantic_config import BaseConfig

__all__ = ["SearchQAOptions"]


class SearchQAOptions(BaseConfig):
    """``SearchQAEnv`` arguments for a verifiers taskset (see the module docstring)."""

    dataset: str = Field("world", description="'world', a paper set ('nq', 'hotpotqa', ...) or a jsonl/parquet path")
    split: str = Field("train", description="split of a named dataset ('test' to evaluate)")
    corpus: str | None = Field(None, description="passage jsonl for the engine (the world's own when omitted)")
    retriever: str = Field("bm25", description="engine name ('bm25', 'e5-exact', ...) or a retrieval server URL")
    retriever_options: dict[str, Any] = Field(default_factory=dict, description="the engine's options")
    reward: str = Field("em", description="reward spec name or path ('em', 'f1', ...)")
    protocol: Literal["tool-call", "tool-call-message", "tool-call-open"] = "tool-call"
    topk: int = Field(3, ge=1, description="passages per search")
    max_turns: int = Field(4, ge=1, description="the action budget B")
    max_information_words: int | None = Field(400, description="cap on passage words per search result")
    max_page_words: int | None = Field(1000, description="cap on the words of an opened document")
    data_dir: str | None = Field(None, description="local folder overriding the hub for named datasets")

    def env_kwargs(self) -> dict[str, Any]:
        """The options as ``SearchQAEnv`` keyword arguments."""
        return self.model_dump()
