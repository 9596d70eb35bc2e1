"""``SearchQA-v0``: one question per episode, answered by an LLM that may call a search engine.

The environment is text in, text out. ``reset`` returns the prompt; each ``step`` takes one model action
(text generated until a closing search/answer tag or end of sequence) and returns the text the
environment appends — an information block, a corrective hint, or ``""`` when the episode is over. The
reward is 0 until the terminal step. Trainers that step many episodes at once call :func:`step_batch`,
which serves every pending search of the batch with a single ``Retriever.search`` call.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

import gymnasium as gym

from searchenv.components import env_components
from searchenv.corpus import Corpus
from searchenv.data.datasets import DEFAULT_SPLIT, example_from_row
from searchenv.env.spaces import UnicodeText
from searchenv.env.stepping import StepOutcome, StepPlan, StepResult, search_and_commit, step_batch, step_batch_async
from searchenv.episode.episode import EndReason, Episode
from searchenv.episode.rollout import RewardResult, Rollout
from searchenv.episode.turns import Facts, Turn
from searchenv.protocol import Protocol, parse_action
from searchenv.types import Passage, QAExample, Retriever

__all__ = ["SearchQAEnv", "StepResult", "step_batch", "step_batch_async"]

Budget = Literal["actions", "extra-answer-turn"]
_BUDGETS: tuple[str, ...] = ("actions", "extra-answer-turn")
RetrievalErrorPolicy = Literal["observe", "raise"]


# -- shared resources ---------------------------------------------------------------------------------


def _clip_passages(passages: Sequence[Passage], max_words: int | None) -> tuple[list[Passage], bool]:
    """Keep at most ``max_words`` words of passage text in total, in rank order (the paper's 500-token cap)."""
    if max_words is None:
        return list(passages), False
    kept, budget, clipped = [], max_words, False
    for p in passages:
        if budget <= 0:
            clipped = True
            break
        words = p.text.split()
        if len(words) > budget:
            text = " ".join(words[:budget]) + " …"
            stored = None if p.stored_contents is None else f"{p.stored_title_and_text()[0]}\n{text}"
            p = Passage(p.id, p.title, text, p.score, stored)
            clipped = True
        kept.append(p)
        budget -= len(words)
    return kept, clipped


# -- the environment ----------------------------------------------------------------------------------


class SearchQAEnv(gym.Env[str, str]):
    """Answer a question, searching as often as the action budget allows.

    Args:
        dataset: ``"world"`` (the embedded generated world, default), a paper dataset name (``"nq"``,
            ``"hotpotqa"``, …), a path to a FlashRAG jsonl / Search-R1 parquet file, or a list of row dicts.
        split: split of a named dataset (``"train"``/``"test"`` for the world); ``"train"`` by default in every
            searchenv entry point, so training never touches held-out questions unless asked to.
        corpus: passage jsonl path or :class:`~searchenv.corpus.Corpus`; defaults to the world's own corpus.
        retriever: ``"bm25"``, ``"random"``, ``"e5-exact"``, ``"e5-hnsw"``, an ``http://`` URL of a
            retrieval server, or any object with ``search(queries, k)``.
        reward: a reward spec name (``"em"``, ``"f1"``, ``"format"``, …), a path to a spec file, or a spec object.
        topk: passages per search.
        max_turns: the action budget B.
        budget: ``"actions"`` (default; the paper's Algorithm 1 — every action counts and the episode is
            truncated after B actions) or ``"extra-answer-turn"`` (Search-R1's code: B actions that may
            search, then one more in which a search is not executed).
        protocol: ``"search-r1"``, ``"r1-searcher"``, ``"r-search"`` or a :class:`~searchenv.protocol.Protocol`.
        invalid_hint: overrides the protocol's corrective hint.
        max_information_words: cap on passage words per information block (≈ the paper's 500 tokens);
            ``None`` disables it.
        max_query_chars: longer queries are cut before they reach the engine.
        on_retrieval_error: ``"observe"`` (default) — a failed search becomes an information block saying so
            and ``info["retrieval_error"]``, the episode goes on; ``"raise"`` — the exception propagates.
        retriever_options: keyword options for the engine (``seed``, ``engine``, ``index_dir``, …).
        data_dir: local folder overriding the hub for named datasets.
        render_mode: ``"ansi"`` (``render()`` returns the transcript) or ``"human"`` (prints it).
    """

    metadata = {"render_modes": ["ansi", "human"]}

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
        max_query_chars: int = 2_000,
        on_retrieval_error: RetrievalErrorPolicy = "observe",
        retriever_options: Mapping[str, Any] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        render_mode: str | None = None,
    ):
        if not isinstance(topk, int) or topk < 1:
            raise ValueError(f"topk must be a positive integer, got {topk!r}")
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns (the action budget B) must be a positive integer, got {max_turns!r}")
        if budget not in _BUDGETS:
            raise ValueError(f"budget must be one of {_BUDGETS}, got {budget!r}")
        if on_retrieval_error not in ("observe", "raise"):
            raise ValueError(f"on_retrieval_error must be 'observe' or 'raise', got {on_retrieval_error!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None")
        parts = env_components(dataset, split, corpus, retriever, reward, protocol, retriever_options, data_dir)
        # A custom hint becomes part of the protocol, so the text path recognises it as the environment's text.
        self.protocol = parts.protocol if invalid_hint is None else replace(parts.protocol, invalid_hint=invalid_hint)
        self.examples = parts.examples
        self.retriever, self.reward_spec = parts.retriever, parts.reward_spec
        self.topk = topk
        self.max_turns = max_turns
        self.budget: Budget = budget
        self.invalid_hint = self.protocol.invalid_hint
        self.max_information_words = max_information_words
        self.max_query_chars = max_query_chars
        self.on_retrieval_error: RetrievalErrorPolicy = on_retrieval_error
        self.render_mode = render_mode
        self.observation_space = UnicodeText()
        self.action_space = UnicodeText()
        self._episode: Episode | None = None

    # -- Gymnasium API ----------------------------------------------------------------------------------
    @property
    def episode(self) -> Episode:
        """The current episode's transcript and counters."""
        if self._episode is None:
            raise RuntimeError("no episode yet: call reset() first")
        return self._episode

    def sibling(self) -> SearchQAEnv:
        """A new environment sharing this one's dataset, retriever and reward spec, with its own random state.

        Building N environments this way loads the data and the index once; stepping them together with
        :func:`step_batch` makes one ``search`` call per step.
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
        super().reset(seed=seed)
        options = options or {}
        if "example" in options:
            example = options["example"]
            if not isinstance(example, QAExample):
                example = example_from_row(example)
        elif "index" in options:
            index = options["index"]
            if not isinstance(index, int) or not 0 <= index < len(self.examples):
                raise ValueError(f"options['index'] must be an int in [0, {len(self.examples)}), got {index!r}")
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
        plan = self._plan(action)
        if plan.query is None:  # nothing to search: what step_batch would do, without its batch bookkeeping
            return self._commit(self._outcome(plan, None, None))  # type: ignore[return-value]
        return search_and_commit([self], [plan])[0]  # type: ignore[return-value]

    def render(self) -> str | None:
        if self._episode is None:
            return None
        text = self._episode.prompt + self._episode.response_text
        if self.render_mode == "human":
            print(text)
            return None
        return text

    # -- one step in three phases, so that a batch validates everything, then searches once, then commits ------
    def _plan(self, action: str) -> StepPlan:
        """Read one action without changing anything: raises on misuse, before any episode of a batch moves."""
        episode = self._episode
        if episode is None:
            raise RuntimeError("no episode yet: call reset() first")
        if episode.done:
            raise RuntimeError("the episode has ended; call reset() before step()")
        if not isinstance(action, str):
            raise TypeError(f"an action is the text the model generated (str), got {type(action).__name__}")
        number = len(episode.turns) + 1
        final = number >= self.action_limit
        parsed = parse_action(action, self.protocol)
        query = None
        if parsed.kind == "search":
            may_search = not final and not (self.budget == "extra-answer-turn" and number > self.max_turns)
            query = parsed.content[: self.max_query_chars] if may_search else None  # type: ignore[index]
        return StepPlan(parsed, query, final)

    def _outcome(self, plan: StepPlan, passages: list[Passage] | None, error: str | None) -> StepOutcome:
        """What the step does to the episode — its new turn, observation, reward and info — not yet applied."""
        episode, parsed = self._episode, plan.parsed
        assert episode is not None  # _plan checked it
        info: dict[str, Any] = {"action": parsed.kind, "query": None, "passage_ids": [], "dropped_text": parsed.dropped}
        if parsed.reason is not None:
            info["invalid_reason"] = parsed.reason
        if parsed.kind == "search":
            info["query"] = parsed.content[: self.max_query_chars]  # type: ignore[index]
            info["query_clipped"] = len(parsed.content) > self.max_query_chars  # type: ignore[arg-type]
        if plan.query is None:
            if parsed.kind == "search":
                info["search_skipped"] = "action budget exhausted"
                turn = Turn(parsed, search="skipped")
            else:  # an answer, or the final action of the budget, gets nothing inserted after it
                turn = Turn(parsed, "" if parsed.kind == "answer" or plan.final else self.invalid_hint)
        elif error is not None:
            info["retrieval_error"] = error
            turn = Turn(parsed, self.protocol.format_error(), search="failed", error=error)
        else:
            found = tuple(passages or ())
            shown, clipped = _clip_passages(found, self.max_information_words)
            info["passage_ids"] = [p.id for p in shown]
            info["information_clipped"] = clipped
            turn = Turn(parsed, self.protocol.format_passages(shown), "executed", found, tuple(p.id for p in shown))
        truncated = plan.final and parsed.kind != "answer"
        if parsed.kind == "answer" or truncated:
            rollout = Rollout.of_episode(episode, (*episode.turns, turn))
            return StepOutcome(turn, truncated, self.reward_spec(rollout), rollout.facts, info)
        return StepOutcome(turn, False, None, None, info)

    def _commit(self, outcome: StepOutcome) -> StepResult:
        """Apply a step's outcome to the episode and build the Gymnasium step tuple from the episode."""
        episode = self._episode
        assert episode is not None  # _plan checked it
        episode.turns.append(outcome.turn)
        episode.truncated = outcome.truncated
        if outcome.reward is not None:
            episode.end_reason = "action_budget" if outcome.truncated else "answer"
        return self._step_result(outcome.info, outcome.reward, outcome.facts)

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
        info["episode_metrics"] = episode.metrics(record)
        # An ended episode is terminated (an answer) or truncated, never both: ``not truncated`` is
        # ``episode.terminated`` without reading the turns again.
        return StepResult("", episode.reward, not episode.truncated, episode.truncated, info)

    def truncate(self, reason: EndReason = "trainer_cut") -> StepResult:
        """End the running episode as truncated and score it.

        For trainers whose own limit (turns, tokens, wall time) stops an episode before an answer or the action
        budget: the episode gets its terminal reward like any other, so every sample of a batch carries a
        reward and the same parts. ``reason`` is ``"trainer_cut"`` or ``"context_limit"`` (the context is full).
        """
        if reason not in ("trainer_cut", "context_limit"):
            raise ValueError(f"truncate(reason=...) takes 'trainer_cut' or 'context_limit', got {reason!r}")
        episode = self.episode
        if episode.done:
            raise RuntimeError("the episode has already ended")
        rollout = Rollout.from_episode(episode)
        result = self.reward_spec(rollout)
        episode.truncated = True
        episode.end_reason = reason
        info = {"action": None, "query": None, "passage_ids": [], "dropped_text": ""}
        return self._step_result(info, result, rollout.facts)
