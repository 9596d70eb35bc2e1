"""``SearchQA-v0``: one question per episode, answered by an LLM that may call a search engine.

The class docstring of :class:`SearchQAEnv` is the manual. Stepping many episodes at once with one engine call
is :mod:`searchenv.env.stepping`; the rules of a step, shared by both, are :mod:`searchenv.env.step_rules`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

import gymnasium as gym

from searchenv.checks import choice, integer, non_negative_int, positive_int
from searchenv.components import check_examples_for_reward, env_components
from searchenv.corpus import Corpus
from searchenv.data.datasets import DEFAULT_SPLIT, example_from_row
from searchenv.env.merged_scoring import DEFAULT_SCORE_MERGER, ScoreMerger, ascore_outcomes, scores_async
from searchenv.env.merged_search import DEFAULT_MERGER, SearchMerger
from searchenv.env.spaces import UnicodeText
from searchenv.env.step_rules import (
    Found,
    StepOutcome,
    StepResult,
    apply_outcome,
    arun_open,
    plan_step,
    run_open,
    run_search,
    step_outcome,
)
from searchenv.episode.episode import EndReason, Episode
from searchenv.episode.reward_contract import RewardResult, Rollout
from searchenv.episode.turns import Facts
from searchenv.protocol import Protocol
from searchenv.types import QAExample, Retriever, TakesTrainingStep

__all__ = ["SearchQAEnv"]

Budget = Literal["actions", "extra-answer-turn"]
_BUDGETS: tuple[str, ...] = ("actions", "extra-answer-turn")
RetrievalErrorPolicy = Literal["observe", "raise"]


class SearchQAEnv(gym.Env[str, str]):
    """Answer a question, searching as often as the action budget allows.

    ## Description

    One question per episode. The policy is a language model: it reasons in text, asks the search engine by
    writing a query between the protocol's search tags, reads the passages the environment inserts, and ends
    the episode by writing its answer between the answer tags (Search-R1 and its successors). The environment
    is text in, text out: it reads each action, runs the search, and returns the text to append.

    ## Action Space

    ``UnicodeText()``: any ``str``, the text the model generated for one turn — up to and including a closing
    search or answer tag (``stop_strings`` in the reset info), or up to the end of the sequence. It is read as

    - *search*: a complete search call; its query (cut at ``max_query_chars``) is run while the budget allows;
    - *open* (protocols that have it: ``asearcher``'s ``<access> N </access>``, the ``open`` tool of
      ``tool-call-open``): result N of the latest search (or a URL / id) is opened and its document shown, cut at
      ``max_page_words``; it counts against the budget like a search (``info["open_error"]`` when it fails);
    - *answer*: a complete answer; it ends the episode;
    - *invalid*: anything else; the protocol's corrective hint is appended (``info["invalid_reason"]``).

    Text after the first complete call is not part of the action (``info["dropped_text"]``).

    ## Observation Space

    ``UnicodeText()``: ``reset`` returns the prompt (instructions and question); ``step`` returns the text the
    environment appends after the action — an information block with the passages found (at most
    ``max_information_words`` words), the corrective hint, a short "search unavailable" block when the engine
    failed (``info["retrieval_error"]``), or ``""`` when the episode has ended. The transcript is
    ``env.episode`` (``render()`` returns it as text).

    ## Rewards

    0 on every step but the terminal one, which gets the reward spec's score of the whole episode: ``"em"``
    (default) is 1 when the answer matches a golden answer exactly after normalisation, else 0; ``"f1"``,
    ``"format"`` and the other specs in ``reward_specs/specs`` score differently (``"hop-credit"`` gives a wrong
    answer partial credit for every hop whose answer was shown, and refuses a dataset without hop answers when the
    environment is built, or a row without them at ``reset``). The terminal info holds ``reward_parts``,
    ``prediction`` and ``episode_metrics``.

    ## Starting State

    ``reset(seed=s)`` draws a question of the dataset split with the seeded generator, so the same seed replays
    the same episode; ``options={"index": i}`` or ``options={"example": row}`` chooses it. The reset info holds
    ``id``, ``question``, ``golden_answers``, ``data_source``, ``stop_strings`` (and ``tools`` for a
    tool-call protocol).

    ## Episode End

    The episode ends when one of the following occurs; ``info["end_reason"]`` says which:

    1. Termination, ``"answer"``: the action is an answer.
    2. Truncation, ``"action_budget"``: the budget's last action is not an answer (``max_turns`` actions, or
       one more under ``budget="extra-answer-turn"``).
    3. Truncation, ``"trainer_cut"`` or ``"context_limit"``: the trainer calls :meth:`truncate`.

    Every end is scored; ``terminated`` and ``truncated`` are never both true. ``step`` after the end raises
    until ``reset``.

    ## Arguments

    ``gym.make("SearchQA-v0", **kwargs)`` passes these to the constructor:

    - ``dataset``: ``"world"`` (the embedded generated world, default), a paper dataset name (``"nq"``,
      ``"hotpotqa"``, …), a path to a FlashRAG jsonl / Search-R1 parquet file, or a list of row dicts.
    - ``split``: split of a named dataset (``"train"``/``"test"`` for the world); ``"train"`` by default in
      every searchenv entry point, so training never touches held-out questions unless asked to.
    - ``corpus``: passage jsonl path or :class:`~searchenv.corpus.Corpus`; defaults to the world's own corpus.
    - ``retriever``: ``"bm25"`` (default), ``"random"``, ``"e5-exact"``, ``"e5-hnsw"``, an ``http://`` URL of
      a retrieval server, or any object with ``search(queries, k)``.
    - ``reward``: a reward spec name (``"em"``, ``"f1"``, ``"format"``, …), a path to a spec file, or a spec.
    - ``topk``: passages per search (3).
    - ``max_turns``: the action budget B (4).
    - ``budget``: ``"actions"`` (default; the paper's Algorithm 1 — every action counts and the episode is
      truncated after B actions) or ``"extra-answer-turn"`` (Search-R1's code: B actions that may search,
      then one more in which a search is not executed).
    - ``protocol``: ``"search-r1"`` (default), ``"r1-searcher"``, ``"r-search"``, a tool-call protocol name,
      or a :class:`~searchenv.protocol.Protocol`.
    - ``invalid_hint``: overrides the protocol's corrective hint.
    - ``max_information_words``: cap on passage words per information block (400, ≈ the paper's 500 tokens),
      shared fairly among the block's passages (each is cut to a common share, so none is hidden); ``None``
      disables it.
    - ``max_page_words``: cap on the words of an opened document (1,000; the passages' clipping rule);
      ``None`` disables it.
    - ``max_query_chars``: longer queries are cut before they reach the engine (2,000).
    - ``on_retrieval_error``: ``"observe"`` (default) — a failed search becomes an information block saying
      so and ``info["retrieval_error"]``, the episode goes on; ``"raise"`` — the exception propagates.
    - ``retriever_options``: keyword options for the engine (``seed``, ``engine``, ``index_dir``, …).
    - ``data_dir``: local folder overriding the hub for named datasets.
    - ``render_mode``: ``"ansi"`` (``render()`` returns the transcript) or ``"human"`` (prints it).

    ```python
    >>> import gymnasium as gym, searchenv
    >>> with gym.make("SearchQA-v0", retriever="bm25", reward="em") as env:
    ...     prompt, info = env.reset(seed=0)
    ...     observation, reward, terminated, truncated, info = env.step("<answer>Paris</answer>")
    ...     info["end_reason"]
    'answer'

    ```

    ## Vectorized Environment

    ``gym.make_vec("SearchQA-v0", num_envs=N, **kwargs)`` builds a
    :class:`~searchenv.env.vector.SearchQAVectorEnv`: N episodes sharing one retriever, each vector step one
    batched ``search`` call. Trainers that hold their own environments (built once, then :meth:`sibling`)
    step them together with :func:`~searchenv.env.stepping.step_batch`, or
    :func:`~searchenv.env.stepping.step_batch_async` inside an event loop: one ``search`` per (retriever,
    k), and all episodes step or none do.

    ## Asynchronous stepping

    Asynchronous trainers (veRL's fully-async mode, SkyRL's async generator, TRL's ``AsyncGRPOTrainer``) step
    each episode on its own, whenever its model turn is done. ``await env.unwrapped.step_async(action)`` is
    :meth:`step` as a coroutine: the same result, ``info`` and errors, and a search that never blocks the event
    loop. Searches of concurrent episodes that share one retriever object (environments built with
    :meth:`sibling`, or named engines, which the process shares) are merged into one engine call: a call waits
    up to 2 ms for more searches once searches arrive together, and searches arriving while a call runs form
    the next one (:class:`~searchenv.env.merged_search.SearchMerger`, the policy of the retrieval service's
    micro-batcher). A bad query fails only its own episode. ``search_merger`` holds the setting::

        from searchenv.env import SearchMerger
        env.unwrapped.search_merger = SearchMerger(wait_ms=5.0)

    The terminal step's reward is awaited the same way when the spec waits on a service (the LLM judge's
    ``ascore_batch``): episodes that end together are judged in one concurrent batch while the loop keeps running
    (:class:`~searchenv.env.merged_scoring.ScoreMerger`, held by ``score_merger``; ``truncate_async`` too).

    ```python
    >>> import asyncio
    >>> with gym.make("SearchQA-v0") as env:
    ...     _ = env.reset(seed=0)
    ...     asyncio.run(env.unwrapped.step_async("<answer>Paris</answer>")).info["end_reason"]
    'answer'

    ```

    ## Closing

    ``close()`` (or leaving a ``with`` block) drops the episode, and the environment refuses to step or reset
    afterwards. Engines named by string are shared by every environment of the process and belong to the
    composition root, which built them: :func:`searchenv.components.close_shared` closes them. A retriever
    object passed in belongs to the caller.

    ## Version History

    * v0: this release.
    """

    metadata = {"render_modes": ["ansi", "human"]}
    #: Merges the searches of concurrent :meth:`step_async` calls (see "Asynchronous stepping"); set it on an
    #: instance (``env.unwrapped.search_merger = SearchMerger(wait_ms=5)``) to change the wait window.
    search_merger: SearchMerger = DEFAULT_MERGER
    #: Merges the terminal scoring of concurrent :meth:`step_async` calls whose reward spec has ``ascore_batch``.
    score_merger: ScoreMerger = DEFAULT_SCORE_MERGER

    def __init__(
        self,
        dataset: str | os.PathLike[str] | Sequence[Mapping[str, Any] | QAExample] = "world",
        split: str = DEFAULT_SPLIT,
        corpus: str | os.PathLike[str] | Corpus | None = None,
        retriever: str | Retriever = "bm25",
        reward: Any = "em",
        topk: int = 3,
        max_turns: int = 4,
        budget: Budget = "actions",
        protocol: str | Protocol = "search-r1",
        invalid_hint: str | None = None,
        max_information_words: int | None = 400,
        max_page_words: int | None = 1_000,
        max_query_chars: int = 2_000,
        on_retrieval_error: RetrievalErrorPolicy = "observe",
        retriever_options: Mapping[str, Any] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        render_mode: str | None = None,
    ):
        positive_int(topk, "topk")
        positive_int(max_turns, "max_turns (the action budget B)")
        choice(budget, "budget", _BUDGETS)
        choice(on_retrieval_error, "on_retrieval_error", ("observe", "raise"))
        if max_page_words is not None:
            non_negative_int(max_page_words, "max_page_words", fix="or None for no cap")
        choice(render_mode, "render_mode", [*self.metadata["render_modes"], None])
        parts = env_components(dataset, split, corpus, retriever, reward, protocol, retriever_options, data_dir)
        # A custom hint becomes part of the protocol, so the text path recognises it as the environment's text.
        self.protocol = parts.protocol if invalid_hint is None else replace(parts.protocol, invalid_hint=invalid_hint)
        self.examples = parts.examples
        self.retriever, self.reward_spec = parts.retriever, parts.reward_spec
        self.opener = parts.opener  # opens results for protocols with an open action (None for the others)
        self.topk = topk
        self.max_turns = max_turns
        self.budget: Budget = budget
        self.invalid_hint = self.protocol.invalid_hint
        self.max_information_words = max_information_words
        self.max_page_words = max_page_words
        self.max_query_chars = max_query_chars
        self.on_retrieval_error: RetrievalErrorPolicy = on_retrieval_error
        self.render_mode = render_mode
        self.observation_space = UnicodeText()
        self.action_space = UnicodeText()
        self._episode: Episode | None = None
        self._closed = False

    # -- Gymnasium API ----------------------------------------------------------------------------------
    @property
    def episode(self) -> Episode:
        """The current episode's transcript and counters; raises once the environment is closed."""
        if self._episode is None:
            if self._closed:
                raise RuntimeError("the environment is closed; make a new one (gym.make or SearchQAEnv)")
            raise RuntimeError("no episode yet: call reset() first")
        return self._episode

    def sibling(self) -> SearchQAEnv:
        """A new environment sharing this one's dataset, retriever and reward spec, with its own random state.

        Building N environments this way loads the data and the index once; stepping them together with
        :func:`~searchenv.env.stepping.step_batch` makes one ``search`` call per step.
        """
        clone = copy.copy(self)
        clone._np_random = None
        clone._np_random_seed = None
        clone._episode = None
        return clone

    @property
    def action_limit(self) -> int:
        """How many actions an episode may take under the configured budget."""
        return self.max_turns + (1 if self.budget == "extra-answer-turn" else 0)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode.

        ``options`` may hold ``"index"`` (which question of the dataset) or ``"example"`` (a row dict or
        :class:`~searchenv.types.QAExample` to answer instead). Without either, the question is drawn with the
        seeded generator, so ``reset(seed=s)`` always replays the same episode.
        """
        if self._closed:
            raise RuntimeError("the environment is closed; make a new one (gym.make or SearchQAEnv)")
        super().reset(seed=seed)
        options = options or {}
        if "example" in options:
            example = options["example"]
            if not isinstance(example, QAExample):
                example = example_from_row(example)
            check_examples_for_reward(self.reward_spec, [example])  # the built dataset's were checked when built
        elif "index" in options:
            index = integer(options["index"], "options['index']", 0, len(self.examples) - 1)
            example = self.examples[index]
        else:
            example = self.examples[int(self.np_random.integers(len(self.examples)))]
        prompt = self.protocol.prompt(example.question)
        self._episode = Episode(example=example, prompt=prompt, protocol=self.protocol)
        info = {
            "id": example.id,
            "question": example.question,
            "golden_answers": list(example.golden_answers),
            "data_source": example.data_source,
            "stop_strings": self.protocol.stop_strings,
        }
        if self.protocol.tools_json:
            from searchenv.protocol.tool_calls import tools_of

            info["tools"] = tools_of(self.protocol)
        return prompt, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Take one action through the phases of :mod:`.step_rules`, as a batch of one would (one ``search``)."""
        episode = self.episode
        plan = plan_step(self, episode, action)
        found: Found | None = None
        raises = self.on_retrieval_error == "raise"
        if plan.query is not None:
            golds = [episode.example.golden_answers]
            (found,) = run_search(self.retriever, [plan.query], self.topk, raises, golds)
        elif plan.open_ref is not None:
            (found,) = run_open(self.opener, [plan.open_ref], raises, [episode.example.question])
        return self.apply_step(step_outcome(self, episode, plan, found))

    async def step_async(self, action: str) -> StepResult:
        """:meth:`step` as a coroutine, for trainers that step each episode on its own inside an event loop.

        Same result, ``info`` and errors as :meth:`step`, through the same step rules. The search never runs on
        the event loop (``asearch`` is awaited, any other engine's ``search`` runs in a worker thread), and
        searches of concurrent episodes that share this retriever object become one engine call
        (:attr:`search_merger`). A terminal step's reward is awaited too when the spec has ``ascore_batch`` (the
        LLM judge), merged with the episodes that end at nearly the same moment (:attr:`score_merger`). Nothing is
        applied until the search and the scoring are back: a cancelled step leaves the episode as it was, and a
        step whose episode was reset, closed or stepped meanwhile raises.
        """
        episode = self.episode
        plan = plan_step(self, episode, action)
        found: Found | None = None
        turns = len(episode.turns)
        raises = self.on_retrieval_error == "raise"
        if plan.query is not None:
            golds = episode.example.golden_answers
            found = await self.search_merger.search(self.retriever, plan.query, self.topk, golds, raises)
        elif plan.open_ref is not None:
            (found,) = await arun_open(self.opener, [plan.open_ref], raises, [episode.example.question])
        waited = plan.query is not None or plan.open_ref is not None
        outcome = step_outcome(self, episode, plan, found, score=not scores_async(self.reward_spec))
        if outcome.rollout is not None and outcome.reward is None:
            await ascore_outcomes([self.reward_spec], [outcome], self.score_merger)
            waited = True
        if waited and (self._episode is not episode or len(episode.turns) != turns):
            raise RuntimeError(
                "the episode was reset, closed or stepped while this step_async was searching or being scored, so "
                "the step was not applied; await each step of an environment before its next step or reset"
            )
        return self.apply_step(outcome)

    def apply_step(self, outcome: StepOutcome) -> StepResult:
        """Write a step's outcome (see :mod:`.step_rules`) to the episode and return the step tuple: the last
        phase of :meth:`step` and of :func:`~searchenv.env.stepping.step_batch`."""
        apply_outcome(self.episode, outcome)
        return self._step_result(outcome.info, outcome.reward, outcome.facts)

    def render(self) -> str | None:
        if self._episode is None:
            return None
        text = self._episode.prompt + self._episode.response_text
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        """Drop the episode and refuse further steps; closing twice is fine.

        The retriever and reward spec are not closed here: built from names, they are shared by every
        environment of the process and belong to the composition root (:func:`searchenv.components.close_shared`);
        passed in as objects, they belong to the caller.
        """
        self._episode = None
        self._closed = True
        super().close()

    def _step_result(self, info: dict[str, Any], reward: RewardResult | None, record: Facts | None) -> StepResult:
        """The step tuple; on the terminal step ``reward`` and ``record`` (the episode's facts) are given."""
        episode = self._episode
        assert episode is not None  # only called for a running episode
        if reward is None or record is None:
            info["num_searches"] = episode.num_searches
            info["num_actions"] = len(episode.turns)
            return StepResult(episode.turns[-1].observation, 0.0, False, False, info)
        # Copied, so a spec that reuses its mapping cannot rewrite a finished episode or an earlier info.
        parts = dict(reward.parts)
        episode.reward, episode.reward_parts = float(reward.reward), parts
        info["num_searches"] = record.num_searches
        info["num_actions"] = record.num_actions
        info["end_reason"] = episode.end_reason
        info["prediction"] = record.prediction
        info["reward_parts"] = parts
        if reward.notes:  # e.g. why the judge gave no verdict
            info["reward_notes"] = dict(reward.notes)
        info["episode_metrics"] = episode.metrics(record)
        # An ended episode is terminated (an answer) or truncated, never both: ``not truncated`` is
        # ``episode.terminated`` without reading the turns again.
        return StepResult("", episode.reward, not episode.truncated, episode.truncated, info)

    def set_training_step(self, step: int) -> None:
        """Tell the environment's parts the trainer's step, which schedules over training are read at (a degraded
        engine's ``p``, the simulated engine's ``p_noisy``: ZeroSearch's curriculum). A step, not a count of
        search calls, so that a curriculum does not depend on the batch size; parts without a schedule ignore it.
        Our trainers call it before each rollout."""
        for part in (self.retriever, self.reward_spec):
            if isinstance(part, TakesTrainingStep):
                part.set_step(step)

    def truncate(self, reason: EndReason = "trainer_cut") -> StepResult:
        """End the running episode as truncated and score it.

        For trainers whose own limit (turns, tokens, wall time) stops an episode before an answer or the action
        budget: the episode gets its terminal reward like any other, so every sample of a batch carries a
        reward and the same parts. ``reason`` is ``"trainer_cut"`` or ``"context_limit"`` (the context is full).
        """
        rollout = self._to_truncate(reason)
        return self._truncated(reason, rollout, self.reward_spec(rollout))

    async def truncate_async(self, reason: EndReason = "trainer_cut") -> StepResult:
        """:meth:`truncate` for coroutines: a reward spec with ``ascore_batch`` (the LLM judge) is awaited, merged
        with the other episodes that end at nearly the same moment, so the event loop keeps running."""
        rollout = self._to_truncate(reason)
        if not scores_async(self.reward_spec):
            return self._truncated(reason, rollout, self.reward_spec(rollout))
        episode = self.episode
        turns = len(episode.turns)
        result = await self.score_merger.score(self.reward_spec, rollout)
        if self._episode is not episode or len(episode.turns) != turns or episode.done:
            raise RuntimeError("the episode was reset, closed, stepped or ended while truncate_async scored it")
        return self._truncated(reason, rollout, result)

    def _to_truncate(self, reason: EndReason) -> Rollout:
        """The running episode's rollout, once ``reason`` and the episode are checked."""
        if reason not in ("trainer_cut", "context_limit"):
            raise ValueError(f"truncate(reason=...) takes 'trainer_cut' or 'context_limit', got {reason!r}")
        if self.episode.done:
            raise RuntimeError("the episode has already ended")
        return Rollout.from_episode(self.episode)

    def _truncated(self, reason: EndReason, rollout: Rollout, result: RewardResult) -> StepResult:
        episode = self.episode
        episode.truncated = True
        episode.end_reason = reason
        info = {"action": None, "query": None, "passage_ids": [], "dropped_text": ""}
        return self._step_result(info, result, rollout.facts)
