"""TRL glue for native tool calls: searchenv as the environment class of ``GRPOTrainer(environment_factory=...)``.

TRL's GRPOTrainer (tested with TRL 1.16.0; ``environment_factory`` needs transformers >= 5.2) plays tool-using
episodes itself: it renders the prompt with the chat template's ``tools=`` (derived from the public methods of the
environment class), parses each completion with the tokenizer's response parser, calls the method a
``<tool_call>`` names with its JSON arguments, and appends the result as a ``tool`` message framed by the same
template (tool tokens get ``tool_mask`` 0). Per rollout it calls ``reset(**row)`` with the dataset row; a string
it returns is appended to the last user message.

Here each rollout's environment wraps a :class:`~searchenv.env.SearchQAEnv` with a tool-call protocol, and every
tool call is stepped through it as the canonical ``<tool_call>`` action, so the action budget, query clipping,
retrieval failures, neutralisation and the information cap are exactly the environment's. The tool's result is the
environment's information block body (what the model would read inside ``<tool_response>`` with our own loop).
The final answer is the last assistant message: :func:`episode_reward` steps it into the episode (or truncates an
episode that never answered) and returns the episode's own reward — never a re-parse of the text.

What the environment does not see: text the model wrote *beside* a tool call in the same message (TRL passes only
the call's arguments), and calls TRL rejects before they reach a method (unknown tool names, wrong argument
names; TRL answers those with ``{"error": ...}``).

Usage::

    factory = environment_factory(dataset="nq", retriever="bm25", protocol="tool-call-message")
    trainer = GRPOTrainer(model, reward_funcs=[episode_reward], train_dataset=make_tool_dataset(factory.env),
                          environment_factory=factory, args=GRPOConfig(...))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from searchenv.adapters.tool_steps import (
    BUDGET_OVER,
    EPISODE_OVER,
    call_action,
    check_tool_protocol,
    finish_episode,
    tool_result,
)
from searchenv.adapters.trl.metrics import log_episode_metrics
from searchenv.protocol.tools import ANSWER, SEARCH

if TYPE_CHECKING:
    from datasets import Dataset

    from searchenv.env.search_qa import SearchQAEnv

__all__ = [
    "EPISODE_OVER",
    "BUDGET_OVER",
    "EnvironmentFactory",
    "RewardingAnswerToolEnvironment",
    "SearchAnswerToolEnvironment",
    "SearchToolEnvironment",
    "environment_factory",
    "episode_reward",
    "make_tool_dataset",
]


class SearchToolEnvironment:
    """One rollout's environment: its public method ``search`` is the tool TRL declares and calls.

    TRL derives the tool's schema from the method's signature and docstring; the docstring is written from the one
    tool vocabulary (:mod:`searchenv.protocol.tools`), so TRL declares the words the protocols and MCP declare.

    The final answer is the last assistant message (protocols ``tool-call`` with an ``<answer>`` block, or
    ``tool-call-message``); :func:`episode_reward` reads it into the episode.
    """

    def __init__(self, env: SearchQAEnv):
        check_tool_protocol(env)
        self.env = env.unwrapped

    def reset(self, **row: Any) -> str:
        """Start the row's episode; returns the environment's prompt, which TRL appends to the user message.

        The row is a dataset row: ``example_index`` (an index into the environment's dataset, as
        :func:`make_tool_dataset` writes) or ``question`` and ``golden_answers`` (any layout
        :func:`searchenv.data.datasets.example_from_row` reads).
        """
        if "example_index" in row:
            options: dict[str, Any] = {"index": int(row["example_index"])}
        else:
            options = {"example": {k: v for k, v in row.items() if k not in ("prompt", "completion")}}
        prompt, _ = self.env.reset(options=options)
        return prompt

    def _step_call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Step one tool call through the environment and return what the tool message should hold."""
        if self.env.episode.done:
            return EPISODE_OVER
        observation, _, _, _, info = self.env.step(call_action(name, arguments))
        return tool_result(self.env, observation, info)

    def search(self, query: str) -> str:
        return self._step_call(SEARCH.name, {"query": query})

    search.__doc__ = SEARCH.docstring(without=("k",))  # TRL declares the tool from it: the one vocabulary's words


class SearchAnswerToolEnvironment(SearchToolEnvironment):
    """A rollout's environment for protocol ``tool-call-answer-tool``: tools ``search`` and ``answer``."""

    def answer(self, answer: str) -> str:
        result = self._step_call(ANSWER.name, {"answer": answer})
        return "Answer recorded." if self.env.episode.terminated and result == "" else result

    answer.__doc__ = ANSWER.docstring()


class RewardingAnswerToolEnvironment(SearchAnswerToolEnvironment):
    """The answer-tool environment that owns its reward (``get_reward``), for TRL's ``AsyncGRPOTrainer``.

    The asynchronous trainer scores a rollout in its worker process and calls reward functions with the completions
    only — never the environments — so :func:`episode_reward` cannot reach the episode there. TRL calls an
    environment's ``get_reward()`` once per finished rollout instead (GRPOTrainer does too, which is why the plain
    classes have none: with :func:`episode_reward` beside it the reward would count twice). Only the answer-tool
    protocol fits: the answer reaches the environment as a tool call, whereas a final plain message never does.
    """

    def get_reward(self) -> float:
        """The episode's reward; an episode the rollout left unfinished (no answer call) is truncated and scored."""
        return float(finish_episode(self.env, None).reward)


class EnvironmentFactory:
    """A zero-argument callable for ``environment_factory=``: each call is a new rollout environment.

    All instances share one dataset, retriever and reward spec (built once, :meth:`SearchQAEnv.sibling`). With
    ``env_reward=True`` the environments own the reward (:class:`RewardingAnswerToolEnvironment`, for
    ``AsyncGRPOTrainer``); that needs the ``tool-call-answer-tool`` protocol.
    """

    def __init__(self, env_reward: bool = False, **env_kwargs: Any):
        import gymnasium as gym

        from searchenv.registration import ENV_ID

        env_kwargs.setdefault("protocol", "tool-call-answer-tool" if env_reward else "tool-call-message")
        self.env: SearchQAEnv = gym.make(ENV_ID, **env_kwargs).unwrapped
        answer_tool = self.env.protocol.answer_mode == "tool"
        if env_reward and not answer_tool:
            raise ValueError(
                f"env_reward=True needs protocol='tool-call-answer-tool' (got {self.env.protocol.name!r}): the "
                "asynchronous trainer never shows the environment a final plain message, so only an answer given "
                "as a tool call can be scored"
            )
        self.environment_class: type[SearchToolEnvironment] = (
            RewardingAnswerToolEnvironment
            if env_reward
            else SearchAnswerToolEnvironment
            if answer_tool
            else SearchToolEnvironment
        )
        self.environment_class(self.env)  # validates the protocol now, not at the first batch

    def __call__(self) -> SearchToolEnvironment:
        return self.environment_class(self.env.sibling())


def environment_factory(env_reward: bool = False, **env_kwargs: Any) -> EnvironmentFactory:
    """The ``environment_factory`` for TRL's GRPOTrainer and AsyncGRPOTrainer; ``env_kwargs`` are
    :class:`SearchQAEnv` arguments.

    ``protocol`` defaults to ``"tool-call-message"`` (the answer is the final message, TRL's natural ending);
    ``"tool-call"`` (answer in ``<answer>`` tags) and ``"tool-call-answer-tool"`` (an ``answer`` tool) work too.
    ``env_reward=True`` (``AsyncGRPOTrainer``, whose reward functions never see the environments): each
    environment scores its own episode through ``get_reward``; the protocol is then ``"tool-call-answer-tool"``
    and no reward function is needed.
    """
    return EnvironmentFactory(env_reward, **env_kwargs)


def make_tool_dataset(env: SearchQAEnv, limit: int | None = None) -> Dataset:
    """One row per question: an empty conversational ``prompt`` (``reset`` supplies the text) and ``example_index``."""
    from datasets import Dataset

    examples = env.unwrapped.examples
    count = min(limit, len(examples)) if limit else len(examples)
    return Dataset.from_list([{"prompt": [{"role": "user", "content": ""}], "example_index": i} for i in range(count)])


def _final_message(completion: Any) -> str | None:
    """The last assistant message's text when it is not a tool call (the model's final answer), else ``None``."""
    if isinstance(completion, str):
        return completion
    last = completion[-1] if completion else None
    if not isinstance(last, Mapping) or last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    content = last.get("content")
    return content if isinstance(content, str) else None


def episode_reward(
    completions: Sequence[Any],
    environments: Sequence[SearchToolEnvironment] | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **_: Any,
) -> list[float]:
    """TRL reward function: finish each rollout's episode with its final message and return the episode's reward.

    An episode still running steps the final assistant message as its last action (an answer, or an invalid
    action); one that is still not over — no final message, an invalid one, budget left — is truncated and
    scored like any truncated episode. Reward parts and episode metrics are logged under their own names
    (:func:`~searchenv.adapters.trl.metrics.log_episode_metrics`).
    """
    if environments is None:
        raise ValueError(
            "episode_reward needs TRL's 'environments' argument: pass environment_factory=environment_factory(...) "
            "to GRPOTrainer (a TRL version with environment_factory, e.g. 1.16)"
        )
    rewards, rows = [], []
    for completion, environment in zip(completions, environments, strict=True):
        episode = finish_episode(environment.env, _final_message(completion))
        rewards.append(float(episode.reward))
        rows.append(episode.metrics())
    log_episode_metrics(log_metric, rows)
    return rewards
