"""veRL glue for native tool calls: a veRL tool backed by any searchenv retriever, and a tool agent loop whose
reward is the episode's.

**The tool** (:class:`SearchTool`, a ``verl.tools.base_tool.BaseTool``) is declared in a tool config YAML —
``adapters/verl/configs/searchenv_tool.yaml`` ships with the package (:data:`TOOL_CONFIG`) — and loaded by veRL's
``initialize_tools_from_config``. veRL 0.9.1's ``ToolAgentLoop`` parses the model's Hermes ``<tool_call>`` (its
``HermesToolParser``), then per call runs ``create`` → ``execute(instance_id, arguments, agent_data=...)`` →
``release``. Tools are built once per worker and an instance lives for one call, so the trajectory's state — a
:class:`~searchenv.env.SearchQAEnv` episode with a tool-call protocol — is kept on veRL's ``AgentData``. Each call
is stepped through that episode as the canonical tool-call action (:mod:`searchenv.adapters.tool_steps`): the
action budget, query clipping, failed searches, the information cap and neutralisation are the environment's, and
the tool's text is the information block's body, exactly what our own loop shows inside ``<tool_response>``.

**The reward.** veRL's ``ToolAgentLoop`` never calls ``calc_reward`` and scores the decoded text in its reward
workers. :class:`SearchToolAgentLoop` (``agent_name: searchenv_tool_agent``, registered when this module is
imported — which loading the tool config does) is that same loop, plus: it starts the row's episode before the
first turn, steps the final assistant message into it when the loop ends (or truncates it), and returns the
episode's reward as ``reward_score`` with its parts in ``reward_extra_info`` — so veRL's reward workers are not
asked, and no text is re-parsed. ``calc_reward`` returns the same number for callers that use it.

Launch (veRL 0.9.1)::

    actor_rollout_ref.rollout.multi_turn.enable=true
    actor_rollout_ref.rollout.multi_turn.format=hermes
    actor_rollout_ref.rollout.multi_turn.tool_config_path=$(python -c "from searchenv.adapters.verl.tool import \
TOOL_CONFIG; print(TOOL_CONFIG)")
    data rows: agent_name=searchenv_tool_agent (or rollout.agent.default_agent_loop=searchenv_tool_agent)
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from searchenv.adapters.rows import episode_env, plain, row_example
from searchenv.adapters.tool_steps import EPISODE_OVER, call_action, check_tool_protocol, finish_episode, tool_result
from searchenv.env.search_qa import SearchQAEnv
from searchenv.protocol.tool_calls import SEARCH_TOOL
from searchenv.protocol.tools import SEARCH
from searchenv.types import QAExample

__all__ = ["AGENT_NAME", "TOOL_CONFIG", "SearchTool", "SearchToolAgentLoop"]

AGENT_NAME = "searchenv_tool_agent"
TOOL_CONFIG = Path(__file__).resolve().parent / "configs" / "searchenv_tool.yaml"
_EPISODE_ATTR = "searchenv_episode"  # where a trajectory's episode lives on veRL's AgentData
_DEFAULT_OPTIONS: dict[str, Any] = {"protocol": "tool-call-message"}


@dataclass
class _Trajectory:
    """One trajectory's episode; the lock orders parallel calls of one assistant message (max_parallel_calls)."""

    env: SearchQAEnv
    lock: asyncio.Lock
    last_text: str | None = None  # what the tool returned for the latest call, to detect veRL cutting it


class SearchTool(BaseTool):
    """The ``search`` tool: one search through the trajectory's SearchQA episode.

    Config (the ``config`` block of the tool YAML): ``type: native`` (veRL's) and ``env``: SearchQAEnv options
    (``retriever``, ``corpus``, ``retriever_options``, ``reward``, ``topk``, ``max_turns``, ``budget``,
    ``protocol``, ``max_information_words``, …). ``protocol`` defaults to ``tool-call-message``; the question and
    gold answers come from each row, never from the config. The schema defaults to the protocol's search tool.
    """

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        self.env_options = {**_DEFAULT_OPTIONS, **(plain(config.get("env")) or {})}
        probe, _ = episode_env(QAExample("probe", "probe", ()), self.env_options)  # builds the retriever once, now
        check_tool_protocol(probe, answer_tool=False)
        super().__init__(config, tool_schema)
        if self.name != SEARCH.name:
            raise ValueError(f"SearchTool's schema must name the function {SEARCH.name!r}, got {self.name!r}")
        self._examples: dict[str, QAExample | None] = {}
        self._own: dict[str, _Trajectory] = {}  # trajectories of callers that pass no agent_data

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        """The protocols' ``search`` schema, from the one tool vocabulary (:mod:`searchenv.protocol.tools`)."""
        return OpenAIFunctionToolSchema.model_validate(SEARCH_TOOL)

    def start_episode(self, example: QAExample) -> _Trajectory:
        """A fresh episode for one row (environments share the retriever and reward spec of equal options)."""
        env, _ = episode_env(example, self.env_options)
        return _Trajectory(env, asyncio.Lock())

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Record the row's question and gold answers, if the row's ``tools_kwargs`` carry them.

        ``create_kwargs``: ``ground_truth`` (Search-R1's ``{"target": [...]}``, a string or a list) and
        ``question``; used only when no episode was started for the trajectory (plain ``ToolAgentLoop``).
        """
        instance_id = instance_id or uuid4().hex
        create = plain(kwargs.get("create_kwargs")) or {}
        example = None
        if "ground_truth" in create:
            example = row_example(create["ground_truth"], {"question": create.get("question")})
        self._examples[instance_id] = example
        return instance_id, ToolResponse()

    def _trajectory(self, instance_id: str, agent_data: Any) -> _Trajectory:
        """The trajectory's episode: on veRL's AgentData (one per trajectory), else per instance; started on demand."""
        trajectory = self._own.get(instance_id) if agent_data is None else getattr(agent_data, _EPISODE_ATTR, None)
        if trajectory is None:
            example = self._examples.get(instance_id) or _example_from_messages(getattr(agent_data, "messages", None))
            trajectory = self.start_episode(example)
            if agent_data is None:
                self._own[instance_id] = trajectory
            else:
                setattr(agent_data, _EPISODE_ATTR, trajectory)
        return trajectory

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        """Step ``search(parameters)`` through the episode; returns the tool text, step reward 0 and step info."""
        trajectory = self._trajectory(instance_id, kwargs.get("agent_data"))
        async with trajectory.lock:
            env = trajectory.env
            if env.episode.done:
                text, metrics = EPISODE_OVER, {"executed": False}
            else:
                observation, _, _, _, info = await env.step_async(call_action(SEARCH.name, parameters))
                text = tool_result(env, observation, info)
                metrics = {"executed": env.episode.turns[-1].searched, "query": info["query"]}
            trajectory.last_text = text
        return ToolResponse(text=text), 0.0, metrics

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The episode's reward once it has ended (0 before): the same number the agent loop reports."""
        trajectory = self._trajectory(instance_id, kwargs.get("agent_data"))
        return float(trajectory.env.episode.reward) if trajectory.env.episode.done else 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._examples.pop(instance_id, None)
        self._own.pop(instance_id, None)


def _example_from_messages(messages: Any) -> QAExample:
    """Without the row's gold answers (plain ``ToolAgentLoop``, no ``create_kwargs``) searches still follow the
    environment's rules; the reward then has nothing to compare with, so use :class:`SearchToolAgentLoop`."""
    users = [m.get("content") for m in messages or [] if isinstance(m, Mapping) and m.get("role") == "user"]
    question = next((u for u in users if isinstance(u, str) and u.strip()), "unknown question")
    return QAExample("unknown", question, ())


def _strip_special(text: str, special_tokens: list[str]) -> str:
    """``text`` without the special tokens that end it (veRL's Hermes parser decodes with them kept)."""
    stripped = True
    while stripped:
        stripped = False
        for token in special_tokens:
            if token and text.rstrip().endswith(token):
                text, stripped = text.rstrip()[: -len(token)], True
    return text


@register(AGENT_NAME)
class SearchToolAgentLoop(ToolAgentLoop):
    """veRL's ``ToolAgentLoop`` with the searchenv episode as the reward: ``reward_score`` is the episode's reward.

    Needs the :class:`SearchTool` in the tool config. The row's question and gold answers are read as the other
    searchenv adapters read them (``reward_model.ground_truth``, ``extra_info.question`` or the prompt).
    """

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        tool = self.tools.get(SEARCH.name)
        if not isinstance(tool, SearchTool):
            raise ValueError(
                f"{AGENT_NAME} needs searchenv's SearchTool as the 'search' tool: set "
                "actor_rollout_ref.rollout.multi_turn.tool_config_path to searchenv.adapters.verl.tool.TOOL_CONFIG"
            )
        example = row_example(
            (plain(kwargs.get("reward_model")) or {}).get("ground_truth"),
            kwargs.get("extra_info"),
            kwargs.get("raw_prompt"),
            kwargs.get("data_source"),
        )
        self._trajectory = tool.start_episode(example)
        output = await super().run(sampling_params, **kwargs)
        episode = finish_episode(self._trajectory.env, self._final_text())
        output.reward_score = float(episode.reward)
        output.extra_fields["reward_extra_info"] = {"score": float(episode.reward), **episode.metrics()}
        return output

    async def _call_tool(self, tool_call: Any, tools_kwargs: dict[str, Any], agent_data: Any) -> Any:
        """veRL's call, refusing a search result veRL cut (``max_tool_response_length``): the model would read text
        that differs from what the episode records as shown, and the retrieval reward would pay for unseen text."""
        self._trajectory.last_text = None
        response, reward, metrics = await super()._call_tool(tool_call, tools_kwargs, agent_data)
        sent = self._trajectory.last_text
        if tool_call.name == SEARCH.name and sent is not None and response.text != sent:
            raise ValueError(
                f"veRL cut a search result of {len(sent)} characters to actor_rollout_ref.rollout.multi_turn."
                f"max_tool_response_length={self.max_tool_response_length}; raise it (searchenv caps results with "
                "the tool's max_information_words instead)"
            )
        return response, reward, metrics

    def _final_text(self) -> str | None:
        """The model's last reply when it called no tool; ``None`` when it ended on a tool call.

        veRL stops at ``max_assistant_turns`` or the response length *before* parsing the last generation; that
        generation is then read from its token ids (stepping it as a search is refused by ``finish_episode``).
        """
        data, special = self._agent_data, self.tokenizer.all_special_tokens
        replies = sum(m.get("role") == "assistant" for m in data.messages) - self._replies_in_prompt
        if replies < data.assistant_turns:
            return self.tokenizer.decode(data.response_ids, skip_special_tokens=True)
        last = data.messages[-1] if data.messages else None
        if not isinstance(last, Mapping) or last.get("role") != "assistant" or last.get("tool_calls"):
            return None
        content = last.get("content")
        return _strip_special(content, special) if isinstance(content, str) else None

    async def _handle_pending_state(self, agent_data: Any, sampling_params: dict[str, Any]) -> Any:
        setattr(agent_data, _EPISODE_ATTR, self._trajectory)
        self._agent_data = agent_data
        self._replies_in_prompt = sum(m.get("role") == "assistant" for m in agent_data.messages)
        return await super()._handle_pending_state(agent_data, sampling_params)
