"""veRL adapter: an agent loop that plays SearchQA episodes, and a ``compute_score`` backed by reward specs.

**Agent loop** (``agent_name: searchenv_agent``). veRL runs one :meth:`SearchEnvAgentLoop.run` coroutine per
sample, token-in/token-out against its rollout servers (vLLM/SGLang). Each turn the loop asks the server to
continue the episode's context, stopping at the protocol's closing tags, steps the environment without
blocking the event loop (``SearchQAEnv.step_async``: the searches of concurrent episodes become few engine
calls), and appends the environment's text with :class:`~searchenv.tokenization.EpisodeTokens`, so
``response_mask`` is 1 exactly on sampled tokens and 0 on inserted information blocks and hints (SPEC §2).

**Reward from the episode.** The score is the finished episode's reward (``env.unwrapped.episode.reward``, computed
by the environment's reward spec from what the episode actually did) and goes out as ``reward_score``. veRL turns
it into ``rm_scores`` on the last response token and, because it is set, never runs its reward manager on this
sample (``AgentLoopWorker._compute_score`` only scores outputs whose ``reward_score`` is ``None``). The episode's
metrics (:meth:`~searchenv.episode.Episode.metrics`, plus veRL's ``score`` and ``verl/...`` token counts) go to
``extra_fields["reward_extra_info"]``, which veRL logs.

**Fields veRL's servers report.** Each turn's ``TokenOutput.extra_fields`` (weights version ``global_steps`` /
``min_global_steps`` / ``max_global_steps``, prefix-cache hits, speculative-decoding counts, and whatever a later
veRL adds) is carried into the output's ``extra_fields`` by :func:`merge_server_fields`, merged across turns as
veRL's own tool loop does; veRL's v1 trainer reads the weights versions of every trajectory.

Select it with ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` (required: the ``env`` options live
there) pointing at a YAML such as
``adapters/verl/configs/agent_loop.yaml``::

    - name: searchenv_agent
      _target_: searchenv.adapters.verl.agent_loop.SearchEnvAgentLoop
      env: {retriever: "http://127.0.0.1:8000", reward: em, topk: 3, max_turns: 4}
      max_action_tokens: 500

and the ``agent_name`` column that :mod:`searchenv.adapters.rows` writes.

**Reward function: the text path.** :func:`compute_score` scores a decoded response string with a reward spec,
for whatever veRL asks its reward workers to score: ``reward.custom_reward_function.path=pkg://searchenv.adapters.verl``
with ``name=compute_score`` and optional ``reward_kwargs`` (``reward``, ``protocol``, ``trust_transcript``). A response
from this agent loop carries the environment's character spans in ``extra_fields["env_spans"]``, which veRL's reward
loop merges into ``extra_info``; with them the text is read exactly as the environment read it, so searches and
retrieved passages are credited. Without them (veRL's single-turn loop, saved responses) the text cannot show who
wrote an information block, and nothing retrieved is credited unless ``trust_transcript`` is set.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    _agent_loop_registry,
    register,
)
from verl.experimental.agent_loop.tool_agent_loop import SPEC_DECODE_EXTRA_KEYS
from verl.workers.rollout.replica import TokenOutput

from searchenv.adapters.rows import AGENT_NAME, PROMPT_MODES, choose_conversation, episode_env, plain, row_example
from searchenv.data.datasets import golden_answers
from searchenv.env.search_qa import SearchQAEnv
from searchenv.episode.episode import metrics_of
from searchenv.episode.reward_contract import Rollout
from searchenv.reward_specs import load_reward
from searchenv.tokenization import EpisodeTokens

__all__ = ["SearchEnvAgentLoop", "compute_score", "env_spans", "merge_server_fields"]


def env_spans(tokenizer: Any, response_ids: Sequence[int], response_mask: Sequence[int]) -> list[list[int]] | None:
    """``[start, end]`` character spans of the environment's tokens (mask 0) in the response as veRL decodes it.

    veRL's reward managers hand ``compute_score`` ``tokenizer.decode(response_ids, skip_special_tokens=True)``, so
    the spans are measured in that string: each boundary is the length of the decoded prefix before it. ``None``
    when a decoded prefix is not a prefix of the whole (a character split across a boundary): the spans would then
    point into the wrong text, and no spans is the honest answer.
    """
    ids = list(response_ids)
    full = tokenizer.decode(ids, skip_special_tokens=True)

    def offset(k: int) -> int | None:
        prefix = tokenizer.decode(ids[:k], skip_special_tokens=True)
        return len(prefix) if full.startswith(prefix) else None

    spans: list[list[int]] = []
    start = None
    for k, mask in enumerate([*response_mask, 1]):  # the sentinel closes a final environment run
        if mask == 0 and start is None:
            start = k
        elif mask != 0 and start is not None:
            begin, end = offset(start), offset(k)
            if begin is None or end is None:
                return None
            spans.append([begin, end])
            start = None
    return spans


def merge_server_fields(fields: dict[str, Any], turn_fields: Mapping[str, Any]) -> None:
    """Fold one turn's ``TokenOutput.extra_fields`` into the episode's, in place.

    The first turn's fields are taken whole. Later turns update ``max_global_steps`` (the newest weights version
    that generated part of the trajectory) and add up the speculative-decoding counts, as veRL's tool agent loop
    does; keys a later turn brings that earlier turns lacked are added, so a field a new veRL reports is never
    dropped. Every other key keeps its first-turn value (``min_global_steps``: the oldest weights version).
    """
    if not fields:
        fields.update(turn_fields)
        return
    for key, value in turn_fields.items():
        if key not in fields:
            fields[key] = value
        elif key == "max_global_steps" and value is not None:
            fields[key] = value
        elif key in SPEC_DECODE_EXTRA_KEYS and value is not None and fields[key] is not None:
            fields[key] = int(fields[key]) + int(value)


class SearchEnvAgentLoop(AgentLoopBase):
    """Multi-turn SearchQA rollouts inside veRL's agent-loop workers.

    Args (besides veRL's own, which it passes on):
        env: SearchQAEnv options shared by every episode (``retriever``, ``corpus``, ``reward``, ``topk``,
            ``max_turns``, ``protocol``, ``budget``, …); required, so that a loop veRL builds without the YAML
            fails instead of searching the built-in world. The question and gold answers come from each row.
        prompt: ``"auto"`` (default), ``"dataset"`` or ``"env"``: whether the row's ``prompt`` messages or the
            environment's prompt start the episode (:func:`searchenv.adapters.rows.choose_conversation`;
            ``auto`` keeps the row's messages when they already name the search tag).
        max_action_tokens: cap on tokens generated per turn (Search-R1: 500); the whole response is further
            capped by ``rollout.response_length``.
        stop: pass the protocol's closing tags to the engine as stop strings (needs
            ``rollout.skip_tokenizer_init=False`` with vLLM). Without them the engine runs on and the tokens
            after the first closing tag are cut, as Search-R1 does.
    """

    def __init__(
        self,
        *args: Any,
        env: Mapping[str, Any] | None = None,
        prompt: str = "auto",
        max_action_tokens: int = 500,
        stop: bool = True,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        if env is None:
            raise ValueError(
                f"{AGENT_NAME} was built without env options, so it would search BM25 over the built-in world: point "
                "actor_rollout_ref.rollout.agent.agent_loop_config_path at a YAML whose entry has an `env:` block "
                "(retriever, corpus, reward, ...); `searchenv verl files DIR` writes an example"
            )
        if prompt not in PROMPT_MODES:
            raise ValueError(f"searchenv_agent: prompt must be one of {PROMPT_MODES}, got {prompt!r}")
        if int(max_action_tokens) < 1:
            raise ValueError(f"searchenv_agent: max_action_tokens must be positive, got {max_action_tokens!r}")
        self.env_options = dict(plain(env) or {})
        self.prompt_mode = prompt
        self.max_action_tokens = int(max_action_tokens)
        self.stop = bool(stop)
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Play one episode for one dataset row (veRL passes the row's columns as ``kwargs``)."""
        reward_model = plain(kwargs.get("reward_model")) or {}
        if "ground_truth" not in reward_model:
            raise ValueError(
                "searchenv_agent needs reward_model.ground_truth in every row "
                "(write the data with: python -m searchenv.adapters.rows)"
            )
        messages = kwargs.get("raw_prompt")
        example = row_example(
            reward_model["ground_truth"], kwargs.get("extra_info"), messages, kwargs.get("data_source")
        )
        # The first episode of a config may build an index: keep that off the event loop.
        env, info = await asyncio.to_thread(episode_env, example, self.env_options)
        conversation = choose_conversation(messages, env.episode.prompt, env.protocol, self.prompt_mode)
        prompt_ids = await self.ct_build_initial_tokens(conversation)

        tokens = EpisodeTokens(self.tokenizer, prompt_ids, env.protocol, episode=env.episode)
        params = dict(sampling_params)
        if self.stop:
            params["stop"] = list(info["stop_strings"])
        request_id = uuid4().hex
        timing = {"generate_sequences": 0.0, "tool_calls": 0.0}
        preempted = -1
        server_fields: dict[str, Any] = {}
        routed_experts = None
        while not env.episode.done:
            room = self.response_length - len(tokens.response_ids)
            if room <= 0:
                break
            params["max_tokens"] = min(self.max_action_tokens, room)
            started = time.perf_counter()
            output = await self.server_manager.generate(
                request_id=request_id, prompt_ids=tokens.context_ids, sampling_params=params
            )
            timing["generate_sequences"] += time.perf_counter() - started
            if output.num_preempted is not None:
                preempted = max(preempted, 0) + output.num_preempted
            merge_server_fields(server_fields, output.extra_fields)
            if output.routed_experts is not None:
                routed_experts = output.routed_experts  # the last turn's routing spans the whole context
            action = self._add_turn(env, tokens, output)
            started = time.perf_counter()
            observation = (await env.step_async(action)).observation
            timing["tool_calls"] += time.perf_counter() - started
            if observation:
                tokens.add_env(observation)
        if not env.episode.done:
            # The response budget ran out before an answer or the action budget: score what there is, so every
            # sample of the batch carries a reward and the same metric keys (``end_reason/context_limit``); a
            # judge reward is awaited, not run on this loop's thread.
            await env.truncate_async("context_limit")
        return self._output(env, tokens, timing, preempted, server_fields, routed_experts)

    def _add_turn(self, env: SearchQAEnv, tokens: EpisodeTokens, output: TokenOutput) -> str:
        """Record one generated turn and return the action text the environment gets.

        Tokens after the first complete search/answer tag are cut together with the text the environment
        drops; the action is decoded without special tokens (an end-of-sequence token is not part of it). The
        turn's weights versions are veRL's ``min_global_steps`` / ``max_global_steps`` of this turn: under the
        fully-async policy, ``FullyAsyncLLMServerClient`` resumes a turn aborted at a weight sync from the ids
        generated so far, so one turn may span two versions; both go into ``episode.generations``.
        """
        fields = output.extra_fields or {}
        first = fields.get("min_global_steps", fields.get("global_steps"))
        last = fields.get("max_global_steps", first) if first is not None else None
        return tokens.add_action(output.token_ids, output.log_probs, env.protocol, first, last)

    def _output(
        self,
        env: SearchQAEnv,
        tokens: EpisodeTokens,
        timing: dict[str, float],
        preempted: int,
        server_fields: Mapping[str, Any],
        routed_experts: Any,
    ) -> AgentLoopOutput:
        episode = env.episode
        built = tokens.result()
        n = self.response_length
        metrics = {
            "score": float(episode.reward),
            **episode.metrics(),
            "verl/response_tokens": float(min(len(built.response_ids), n)),
            "verl/model_tokens": float(sum(built.loss_mask[:n])),
        }
        return AgentLoopOutput(
            prompt_ids=built.prompt_ids,
            response_ids=built.response_ids[:n],
            response_mask=built.loss_mask[:n],
            response_logprobs=built.logprobs[:n] if built.logprobs is not None else None,
            routed_experts=routed_experts[: len(built.prompt_ids) + n] if routed_experts is not None else None,
            num_turns=1 + len(episode.segments),
            reward_score=float(episode.reward),
            metrics=AgentLoopMetrics(**timing, num_preempted=preempted),
            extra_fields={
                **server_fields,
                "reward_extra_info": metrics,
                "turn_scores": [],
                "tool_rewards": [],
                "env_spans": env_spans(self.tokenizer, built.response_ids[:n], built.loss_mask[:n]),
            },
        )


# veRL's AgentLoopWorker first loads the agent-loop YAML into its registry, then imports this module while building
# the first loop: a plain @register here would then replace the YAML entry (and its env options) with a bare one for
# every later episode. The bare entry is only added when no YAML entry is there.
if AGENT_NAME not in _agent_loop_registry:
    register(AGENT_NAME)(SearchEnvAgentLoop)


# -- custom_reward_function --------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=16)
def _reward_spec(name: str) -> Any:
    return load_reward(name)


@functools.cache
def _warn_uncredited(spec_name: str) -> None:
    """Once per process and spec: the reward will never pay for a search."""
    warnings.warn(
        f"compute_score: reward spec {spec_name!r} pays for searches and retrieved passages, but this response came "
        "without the environment's env_spans (they come with responses of searchenv's agent loop through veRL's "
        "reward loop) and trust_transcript is off, so no search is credited. Play episodes with the "
        "searchenv_agent loop, or set reward.custom_reward_function.reward_kwargs.trust_transcript=true if the "
        "environment wrote every information block of these responses",
        RuntimeWarning,
        stacklevel=3,
    )


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Mapping[str, Any] | None = None,
    reward: str = "em",
    protocol: str = "search-r1",
    trust_transcript: bool = False,
    reward_router_address: str | None = None,
    reward_model_tokenizer: Any = None,
    **unknown: Any,
) -> dict[str, float]:
    """veRL's reward-function signature, scored by a searchenv reward spec from the response text.

    Args:
        data_source: the row's data source (unused; every source is scored the same way).
        solution_str: the decoded response: model turns and inserted information blocks, without the prompt.
        ground_truth: ``{"target": [...]}`` (Search-R1), a plain string, or a list of strings.
        extra_info: the row's ``extra_info`` (its ``question`` and ``hop_answers`` are passed to specs that use
            them), with veRL's reward
            loop adding the agent loop's ``extra_fields``: ``env_spans`` (:func:`env_spans`) marks the text the
            environment inserted, so searches and passages are read as the environment recorded them.
        reward: reward spec name or spec file path (set it with ``custom_reward_function.reward_kwargs``).
        protocol: the tag protocol of the responses.
        trust_transcript: without ``env_spans``, credit every information block as the environment's (only for
            responses known to come from the environment; a model could write one itself).
        reward_router_address, reward_model_tokenizer: passed by veRL's reward loop when a reward model is
            served; unused.

    Returns:
        ``{"score": reward, **metrics}``: veRL's ``score`` and the episode metrics under the names every adapter
        logs (:func:`~searchenv.episode.episode.metrics_of`: ``reward/em``, ``num_searches``, ...); veRL logs
        every key.

    Raises:
        TypeError: for a keyword argument it does not know (a misspelt ``reward_kwargs`` key would else be lost).
    """
    if unknown:
        raise TypeError(
            f"compute_score got unknown keyword argument(s) {sorted(unknown)}; it accepts {list(_ACCEPTED)} "
            "(reward, protocol and trust_transcript are set with reward.custom_reward_function.reward_kwargs)"
        )
    info = plain(extra_info) or {}
    spans = info.get("env_spans")
    spec = _reward_spec(reward)
    # A spec that pays for searches scored without spans or trust never pays them: almost always a mistake.
    if spans is None and not trust_transcript and getattr(spec, "reads_retrieval", False):
        _warn_uncredited(spec.name)
    rollout = Rollout.from_text(
        solution_str,
        golden_answers(plain(ground_truth)),
        protocol=protocol,
        question=str(info.get("question") or ""),
        env_spans=None if spans is None else [(int(start), int(end)) for start, end in spans],
        trust_transcript=bool(trust_transcript),
        metadata={"hop_answers": info["hop_answers"]} if info.get("hop_answers") is not None else None,
    )
    result = spec(rollout)
    # No environment ended this text: an accepted answer is the only end reason it can show.
    end_reason = "answer" if rollout.prediction is not None else None
    return {"score": float(result.reward), **metrics_of(rollout.facts, result.reward, result.parts, end_reason)}


_ACCEPTED = tuple(
    name for name, p in inspect.signature(compute_score).parameters.items() if p.kind is not p.VAR_KEYWORD
)
