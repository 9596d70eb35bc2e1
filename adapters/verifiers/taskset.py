"""searchenv as a verifiers v1 taskset: tasks from any searchenv dataset, searchenv's tools, searchenv's rewards.

The taskset id is ``searchqa`` (the top-level module :mod:`searchqa` re-exports :class:`SearchQATaskset`, which is
what ``verifiers.v1.utils.loaders.taskset_class("searchqa")`` imports). A task's prompt is the environment's own
prompt for the question under the configured tool-call protocol; its toolset is
:class:`~searchenv.adapters.verifiers.toolset.SearchQAToolset`; its reward is the reward spec's score of the
episode the rollout played, obtained by replaying the trace's tool calls and final message through a fresh episode
(:func:`~searchenv.adapters.verifiers.episodes.replay`) — the environment's own record, never a re-parse of the
text. The episode's metrics (searches, failed searches, invalid actions, …) and the reward's parts are metrics;
``tool_outputs_replayed`` is 1.0 when the replay showed the model exactly what its tools returned (a deterministic
engine always does; a live web engine may not). A call the tool server refused (unknown tool, misspelt argument)
never reached the episode, so the replay skips it too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import Field

from searchenv.adapters.verifiers.episodes import ReplayedEpisode, ToolCallStep, base_env, replay
from searchenv.adapters.verifiers.options import SearchQAOptions
from searchenv.adapters.verifiers.toolset import SearchQAToolset, SearchQAToolsetConfig
from searchenv.types import QAExample

__all__ = ["SearchQAData", "SearchQATask", "SearchQATaskConfig", "SearchQATaskset", "SearchQATasksetConfig"]


class SearchQAData(vf.TaskData):
    """One question: the environment's prompt (``prompt``), the question, its gold answers and its source."""

    question: str
    golden_answers: list[str]
    data_source: str = "unknown"

    def row(self) -> dict[str, Any]:
        """The row ``SearchQAEnv.reset(options={"example": row})`` plays."""
        return {
            "id": self.id or "",
            "question": self.question,
            "golden_answers": list(self.golden_answers),
            "data_source": self.data_source,
        }


class SearchQATaskConfig(vf.TaskConfig):
    """Run-time knobs: the environment (engine, reward spec, protocol, budget) every task plays on."""

    options: SearchQAOptions = SearchQAOptions()


def _turns(trace: vf.Trace) -> list[tuple[list[ToolCallStep], str | None]]:
    """The rollout's model turns: each sampled assistant message's tool calls and text."""
    return [
        ([ToolCallStep(call.name, call.arguments) for call in message.tool_calls or []], message.content)
        for message in trace.assistant_messages
    ]


def _tool_texts(trace: vf.Trace) -> list[str]:
    return [m.content if isinstance(m.content, str) else vf.content_text(m.content) for m in trace.tool_messages]


class SearchQATask(vf.Task[SearchQAData, vf.State, SearchQATaskConfig]):
    """One question to answer by searching; rewarded by the configured searchenv reward spec."""

    def __init__(self, data: SearchQAData, config: SearchQATaskConfig | None = None) -> None:
        super().__init__(data, config)
        self._replays: dict[str, ReplayedEpisode] = {}  # trace id -> its replay, from the metric to the reward

    @classmethod
    def toolsets(cls, config: SearchQATaskConfig) -> list[vf.Toolset]:
        """One :class:`SearchQAToolset` per rollout, searching with the task config's engine."""
        return [SearchQAToolset(SearchQAToolsetConfig(options=config.options))]

    def _replayed(self, trace: vf.Trace, keep: bool) -> ReplayedEpisode:
        """The trace's episode, replayed once per trace: ``Task.score`` runs the metrics (``keep``: held for the
        reward) before the rewards (which take it back). Held on the task, not in ``trace.info``, which verifiers
        writes to traces.jsonl."""
        cached = self._replays.pop(trace.id, None)
        if cached is None:
            cached = replay(self.config.options.env_kwargs(), self.data.row(), _turns(trace))
        if keep:
            self._replays[trace.id] = cached
        return cached

    @vf.reward(weight=1.0)
    async def reward(self, trace: vf.Trace) -> dict[str, float]:
        """The reward spec's score of the episode, under the spec's name (``em``, ``f1``, …)."""
        return {self.config.options.reward: float(self._replayed(trace, keep=False).episode.reward)}

    @vf.metric
    async def episode(self, trace: vf.Trace) -> dict[str, float]:
        """The episode's metrics under searchenv's names (``num_searches``, ``reward/<part>``, …) and whether the
        replay returned what the model's tools returned."""
        replayed = self._replayed(trace, keep=True)
        metrics = dict(replayed.episode.metrics())
        shown = _tool_texts(trace)
        same = len(shown) == len(replayed.tool_outputs) and all(
            mine is None or mine == theirs for mine, theirs in zip(replayed.tool_outputs, shown)
        )
        metrics["tool_outputs_replayed"] = float(same)
        return metrics


class SearchQATasksetConfig(vf.TasksetConfig):
    """Which questions load: the task config's dataset and split, at most ``limit`` of them."""

    task: SearchQATaskConfig = SearchQATaskConfig()
    limit: int | None = Field(None, ge=1, description="load only the first N questions")


class SearchQATaskset(vf.Taskset[SearchQATask, SearchQATasksetConfig]):
    """searchenv's questions as verifiers tasks (``searchqa``); see the module docstring."""

    def load(self) -> Iterator[SearchQATask]:
        env = base_env(self.config.task.options.env_kwargs())
        examples: list[QAExample] = env.examples[: self.config.limit] if self.config.limit else env.examples
        for example in examples:
            data = SearchQAData(
                id=example.id,
                name=example.id,
                prompt=env.protocol.prompt(example.question),
                question=example.question,
                golden_answers=list(example.golden_answers),
                data_source=example.data_source,
            )
            yield SearchQATask(data, self.config.task)
