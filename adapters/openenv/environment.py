"""SearchQA as an OpenEnv ``Environment``: sessions, the Task API over any searchenv dataset, every protocol.

OpenEnv's server (``create_app``) builds one environment per WebSocket session and one short-lived instance per
stateless HTTP call or task-discovery request, so an instance must be cheap and must not share an episode. Here the
expensive parts — each split's questions, the engine, the reward spec — are built once per server in
:class:`SearchQATasks` and every instance plays its own episode on a :meth:`SearchQAEnv.sibling`; that is why the
class may declare ``SUPPORTS_CONCURRENT_SESSIONS``. Concurrent sessions' searches on one engine are merged into one
engine call by :meth:`SearchQAEnv.step_async`, which the server awaits.

Nothing of the episode's rules lives here: parsing, the action budget, retrieval failures, neutralisation and the
reward are the wrapped :class:`~searchenv.env.SearchQAEnv`'s, so an OpenEnv client and ``gym.make("SearchQA-v0")``
with the same options play the same episode. The step's ``info`` travels in the observation's ``metadata``.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from searchenv.adapters.openenv.models import SearchAction, SearchObservation, SearchState
from searchenv.adapters.tool_steps import call_action, tool_result
from searchenv.data.datasets import DEFAULT_SPLIT, HUB_DATASETS
from searchenv.env.search_qa import SearchQAEnv
from searchenv.env.step_rules import StepResult

__all__ = ["SearchQAEnvironment", "SearchQATasks", "dataset_splits"]

#: How many task specs ``list_tasks`` returns at most (OpenEnv allows a bounded preview; ``num_tasks`` is exact).
LIST_PREVIEW = 100


def dataset_splits(dataset: Any, split: str = DEFAULT_SPLIT) -> tuple[str, ...]:
    """The splits a searchenv dataset has: the world's ``train``/``test``, a paper set's published splits, and for
    a file or rows in memory (which have no splits) the one ``split`` they are served under."""
    if isinstance(dataset, str) and dataset == "world":
        from searchenv.data.world import SPLITS

        return tuple(SPLITS)
    if isinstance(dataset, str) and dataset in HUB_DATASETS:
        return HUB_DATASETS[dataset]
    return (split,)


class SearchQATasks:
    """What a server's sessions share: one :class:`SearchQAEnv` per split (built on first use) and its options.

    Args:
        env_kwargs: ``SearchQAEnv`` arguments (``dataset``, ``retriever``, ``reward``, ``protocol``, ``topk``,
            ``max_turns``, ``budget``, …); ``split`` is the split a ``reset()`` without one plays.
    """

    def __init__(self, env_kwargs: Mapping[str, Any] | None = None):
        self.env_kwargs = dict(env_kwargs or {})
        self.default_split = str(self.env_kwargs.pop("split", DEFAULT_SPLIT))
        self.splits = dataset_splits(self.env_kwargs.get("dataset", "world"), self.default_split)
        if self.default_split not in self.splits:
            raise ValueError(f"split {self.default_split!r} is not one of this dataset's splits {list(self.splits)}")
        self._envs: dict[str, SearchQAEnv] = {}
        self._lock = threading.Lock()
        self.base(self.default_split)  # bad options fail when the server starts, not at the first session

    def check_split(self, split: str) -> str:
        """``split`` itself, or a ``ValueError`` naming the splits there are."""
        if split not in self.splits:
            raise ValueError(f"unknown split {split!r}; this environment's splits are {list(self.splits)}")
        return split

    def base(self, split: str) -> SearchQAEnv:
        """The split's shared environment (its questions, engine and reward spec); sessions play its siblings."""
        self.check_split(split)
        with self._lock:
            if split not in self._envs:
                import gymnasium as gym

                from searchenv.registration import ENV_ID

                self._envs[split] = gym.make(ENV_ID, **self.env_kwargs, split=split).unwrapped
            return self._envs[split]

    def task(self, split: str, index: int) -> dict[str, Any]:
        """One task spec: its id, split, index, question and data source (never the gold answers: a client that
        is also the policy must not read them; the reward is computed here)."""
        examples = self.base(split).examples
        if not 0 <= index < len(examples):
            raise IndexError(f"index {index} is out of range for split {split!r} ({len(examples)} tasks)")
        example = examples[index]
        return {
            "id": example.id,
            "split": split,
            "index": index,
            "question": example.question,
            "data_source": example.data_source,
        }


def _json_safe(value: Any) -> Any:
    """``value`` as JSON types (tuples as lists, numpy numbers as Python numbers, anything else as its string)."""
    return json.loads(json.dumps(value, default=lambda v: v.item() if hasattr(v, "item") else str(v)))


class SearchQAEnvironment(Environment[SearchAction, SearchObservation, SearchState]):
    """A SearchQA episode behind OpenEnv's ``Environment`` interface.

    ``reset(split=..., index=...)`` plays a chosen question (the Task API); ``reset(seed=s)`` draws one with the
    seeded generator, as ``SearchQAEnv.reset(seed=s)`` does; ``reset(example={...})`` plays a row of your own
    (``question`` and ``golden_answers``). ``step`` takes a :class:`SearchAction`: the model's turn as text
    (every protocol) or a structured tool call (tool-call protocols). The observation's ``reward`` is 0.0 until
    the terminal step, which carries the reward spec's score; ``metadata`` is the step's ``info``.

    Args:
        tasks: the server's shared :class:`SearchQATasks`; without it, one is built from ``env_kwargs``.
        env_kwargs: ``SearchQAEnv`` arguments, used only when ``tasks`` is not given.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, tasks: SearchQATasks | None = None, **env_kwargs: Any):
        super().__init__()
        if tasks is not None and env_kwargs:
            raise TypeError("give SearchQAEnvironment either tasks= or SearchQAEnv arguments, not both")
        self.tasks = tasks if tasks is not None else SearchQATasks(env_kwargs)
        self.env: SearchQAEnv | None = None
        self._state = SearchState()

    # -- the Task API (OpenEnv's TaskProvider) ------------------------------------------------------------------
    def list_splits(self) -> list[str]:
        """The dataset's splits (``train``/``test`` for the world; a file or rows in memory have one)."""
        return list(self.tasks.splits)

    def num_tasks(self, split: str) -> int:
        """How many questions ``split`` holds."""
        return len(self.tasks.base(split).examples)

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        """Task ``index`` of ``split`` (``IndexError`` when out of range; OpenEnv answers 400)."""
        return self.tasks.task(split, int(index))

    def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        """The task specs of ``split`` in ``[start, stop)``, slice-style."""
        indices = range(self.num_tasks(split))[slice(start, stop)]
        return [self.tasks.task(split, i) for i in indices]

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        """The first :data:`LIST_PREVIEW` task specs of ``split`` (``num_tasks`` gives the true count)."""
        return self.get_task_range(split, 0, LIST_PREVIEW)

    # -- the episode ---------------------------------------------------------------------------------------------
    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        split: str | None = None,
        index: int | None = None,
        example: Mapping[str, Any] | None = None,
        **unknown: Any,
    ) -> SearchObservation:
        """Start an episode on ``split`` (the server's default split when omitted): question ``index``, the row
        ``example``, or one drawn with ``seed``."""
        if unknown:
            raise TypeError(
                f"reset() got unknown arguments {sorted(unknown)}; it takes seed, episode_id, split, index and example"
            )
        if index is not None and example is not None:
            raise ValueError("reset() takes index= (a task of the split) or example= (a row of your own), not both")
        chosen = self.tasks.check_split(split if split is not None else self.tasks.default_split)
        if self.env is not None:
            self.env.close()
        self.env = self.tasks.base(chosen).sibling()
        options: dict[str, Any] = {}
        if index is not None:
            options["index"] = index
        if example is not None:
            options["example"] = dict(example)
        prompt, info = self.env.reset(seed=seed, options=options)
        played = index
        if played is None and example is None:  # a seeded draw: find which question it was
            played = next((i for i, e in enumerate(self.env.examples) if e is self.env.episode.example), None)
        self._state = SearchState(
            episode_id=episode_id or str(uuid.uuid4()),
            split=chosen,
            index=played,
            question=info["question"],
        )
        return SearchObservation(
            text=prompt,
            question=info["question"],
            split=chosen,
            index=played,
            stop_strings=list(info["stop_strings"]),
            tools=_json_safe(info.get("tools", [])),
            metadata=_json_safe({k: v for k, v in info.items() if k not in ("golden_answers", "tools")}),
        )

    def _checked(self, action: SearchAction | Mapping[str, Any]) -> SearchAction:
        """``action`` as a :class:`SearchAction` (a dict, as the HTTP route hands it over, is validated)."""
        if self.env is None:
            raise RuntimeError("no episode yet: call reset() before step()")
        return action if isinstance(action, SearchAction) else SearchAction.model_validate(action)

    def _action_text(self, action: SearchAction) -> str:
        """The text :meth:`SearchQAEnv.step` reads for a turn or a tool call."""
        assert self.env is not None
        if action.text is not None:
            return action.text
        if self.env.protocol.action_format != "tool-call":
            raise ValueError(
                f"protocol {self.env.protocol.name!r} reads tags, not tool calls: send the model's text as "
                "SearchAction(text=...), or serve a tool-call protocol (--protocol tool-call)"
            )
        return call_action(str(action.tool), action.arguments)

    def step(self, action: SearchAction, timeout_s: float | None = None, **kwargs: Any) -> SearchObservation:
        """Apply one turn (or end the episode); the episode's rules and reward are :meth:`SearchQAEnv.step`'s."""
        action = self._checked(action)
        assert self.env is not None
        if action.end is not None:
            return self._observe(self.env.truncate(action.end))
        return self._observe(StepResult(*self.env.step(self._action_text(action))))

    async def step_async(
        self, action: SearchAction, timeout_s: float | None = None, **kwargs: Any
    ) -> SearchObservation:
        """:meth:`step` without blocking the server's event loop; concurrent sessions' searches share engine calls."""
        action = self._checked(action)
        assert self.env is not None
        if action.end is not None:
            return self._observe(await self.env.truncate_async(action.end))
        return self._observe(await self.env.step_async(self._action_text(action)))

    def _observe(self, result: StepResult) -> SearchObservation:
        """The observation of a step: its text, the tool's output (tool-call protocols), reward, end and info."""
        assert self.env is not None
        episode = self.env.episode
        done = bool(result.terminated or result.truncated)
        self._state.step_count = len(episode.turns)
        self._state.done = done
        self._state.num_searches = episode.num_searches
        tool_output = None
        if self.env.protocol.action_format == "tool-call" and not done:
            tool_output = tool_result(self.env, result.observation, result.info)
        return SearchObservation(
            text=result.observation,
            tool_output=tool_output,
            question=episode.example.question,
            split=self._state.split,
            index=self._state.index,
            done=done,
            truncated=bool(result.truncated),
            reward=float(result.reward),
            metadata=_json_safe(result.info),
        )

    @property
    def state(self) -> SearchState:
        """The session's episode id, step count, split, index, question and whether it ended."""
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        """The name, description and version the server publishes at ``/metadata``."""
        from searchenv import __version__

        return EnvironmentMetadata(
            name="searchqa",
            description="Answer a question by searching (Search-R1 protocol and successors): "
            f"dataset {self.tasks.env_kwargs.get('dataset', 'world')!r}, splits {list(self.tasks.splits)}",
            version=__version__,
        )

    def close(self) -> None:
        """End the session's episode; the shared engine belongs to the server (the composition root)."""
        if self.env is not None:
            self.env.close()
            self.env = None
