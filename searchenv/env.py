"""``SearchQA-v0``: one question per episode, answered by an LLM that may call a search engine.

The environment is text in, text out. ``reset`` returns the prompt; each ``step`` takes one model action
(text generated until a closing search/answer tag or end of sequence) and returns the text the
environment appends — an information block, a corrective hint, or ``""`` when the episode is over. The
reward is 0 until the terminal step. Trainers that step many episodes at once call :func:`step_batch`,
which serves every pending search of the batch with a single ``Retriever.search`` call.
"""

from __future__ import annotations

import asyncio
import copy
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import gymnasium as gym

from searchenv.components import DEFAULT_SPLIT, env_components
from searchenv.data import example_from_row
from searchenv.episode import Episode, Segment
from searchenv.protocol import ParsedAction, Protocol, parse_action
from searchenv.spaces import UnicodeText
from searchenv.types import Corpus, Passage, QAExample, Retriever

__all__ = ["SearchQAEnv", "StepResult", "step_batch", "step_batch_async"]

Budget = Literal["actions", "extra-answer-turn"]
_BUDGETS: tuple[str, ...] = ("actions", "extra-answer-turn")
RetrievalErrorPolicy = Literal["observe", "raise"]


class StepResult(NamedTuple):
    """The Gymnasium step 5-tuple."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


@dataclass(frozen=True)
class _Pending:
    """An action parsed and counted, waiting for its search results (if it searches)."""

    parsed: ParsedAction
    query: str | None  # set when a search must be executed
    final: bool  # the action budget ends with this action
    info: dict[str, Any]


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
            p = Passage(p.id, p.title, " ".join(words[:budget]) + " …", p.score)
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
        corpus: passage jsonl path or :class:`~searchenv.types.Corpus`; defaults to the world's own corpus.
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
        self.protocol, self.examples = parts.protocol, parts.examples
        self.retriever, self.reward_spec = parts.retriever, parts.reward_spec
        self.topk = topk
        self.max_turns = max_turns
        self.budget: Budget = budget
        self.invalid_hint = self.protocol.invalid_hint if invalid_hint is None else invalid_hint
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
        return prompt, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return tuple(step_batch([self], [action])[0])  # type: ignore[return-value]

    def render(self) -> str | None:
        if self._episode is None:
            return None
        text = self._episode.prompt + self._episode.response_text
        if self.render_mode == "human":
            print(text)
            return None
        return text

    # -- the two halves of a step, split so that a batch shares one search call -------------------------
    def _begin_step(self, action: str) -> _Pending:
        episode = self.episode
        if episode.done:
            raise RuntimeError("the episode has ended; call reset() before step()")
        if not isinstance(action, str):
            raise TypeError(f"an action is the text the model generated (str), got {type(action).__name__}")
        episode.num_actions += 1
        final = episode.num_actions >= self.action_limit
        parsed = parse_action(action, self.protocol)
        if parsed.kind == "search" and not parsed.content:
            parsed = ParsedAction("invalid", None, parsed.kept, parsed.dropped)  # "<search></search>" asks nothing
        episode.segments.append(Segment("model", parsed.kept))
        info: dict[str, Any] = {"action": parsed.kind, "query": None, "passage_ids": [], "dropped_text": parsed.dropped}
        query = None
        if parsed.kind == "search":
            query = parsed.content[: self.max_query_chars]  # type: ignore[index]
            info["query"] = query
            info["query_clipped"] = len(parsed.content) > self.max_query_chars  # type: ignore[arg-type]
            can_search = not final and not (self.budget == "extra-answer-turn" and episode.num_actions > self.max_turns)
            if not can_search:
                info["search_skipped"] = "action budget exhausted"
                query = None
        return _Pending(parsed, query, final, info)

    def _end_step(self, pending: _Pending, passages: list[Passage] | None, error: str | None) -> StepResult:
        episode, parsed, info = self.episode, pending.parsed, pending.info
        observation = ""
        if parsed.kind == "answer":
            episode.prediction = parsed.content
            episode.terminated = True
        elif pending.query is not None:
            if error is not None:
                info["retrieval_error"] = error
                observation = self.protocol.format_error(error)
                episode.retrieved.append([])
            else:
                shown, clipped = _clip_passages(passages or [], self.max_information_words)
                episode.retrieved.append(list(passages or []))
                episode.num_searches += 1
                info["passage_ids"] = [p.id for p in shown]
                info["information_clipped"] = clipped
                observation = self.protocol.format_passages(shown)
        elif parsed.kind == "invalid":
            episode.num_invalid += 1
            observation = self.invalid_hint
        if not episode.terminated and pending.final:
            episode.truncated = True
        if episode.done:
            return self._close(info)
        if observation:
            episode.segments.append(Segment("env", observation))
        info["num_searches"] = episode.num_searches
        info["num_actions"] = episode.num_actions
        return StepResult(observation, 0.0, False, False, info)

    def truncate(self) -> StepResult:
        """End the running episode as truncated and score it.

        For trainers whose own limit (tokens, wall time) stops an episode before an answer or the action
        budget: the episode gets its terminal reward like any other, so every sample of a batch carries a
        reward and the same parts.
        """
        if self.episode.done:
            raise RuntimeError("the episode has already ended")
        self.episode.truncated = True
        return self._close({"action": None, "query": None, "passage_ids": [], "dropped_text": ""})

    def _close(self, info: dict[str, Any]) -> StepResult:
        """Score the finished episode and fill the terminal step's info."""
        episode = self.episode
        result = self.reward_spec(self._rollout())
        episode.reward, episode.reward_parts = float(result.reward), dict(result.parts)
        info.update(
            prediction=episode.prediction,
            reward_parts=dict(result.parts),
            episode=episode.metrics(),
            num_searches=episode.num_searches,
            num_actions=episode.num_actions,
        )
        return StepResult("", episode.reward, episode.terminated, episode.truncated, info)

    def _rollout(self) -> Any:
        from searchenv.reward_specs.base import Rollout

        episode = self.episode
        return Rollout(
            question=episode.example.question,
            golden_answers=episode.example.golden_answers,
            response=episode.response_text,
            model_text=episode.model_text,
            retrieved_texts=tuple(p.contents for hits in episode.retrieved for p in hits),  # titles were shown too
            num_searches=episode.num_searches,
            protocol=self.protocol,
        )


# -- batched stepping ---------------------------------------------------------------------------------


def _group_searches(envs: Sequence[SearchQAEnv], pendings: Sequence[_Pending]) -> dict[tuple[int, int], list[int]]:
    """Indices of episodes that search, grouped by (retriever, k) so each group is one engine call."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (env, pending) in enumerate(zip(envs, pendings)):
        if pending.query is not None:
            groups.setdefault((id(env.retriever), env.topk), []).append(i)
    return groups


def _check_results(results: Any, n: int, retriever: Retriever) -> list[list[Passage]]:
    if not isinstance(results, list) or len(results) != n:
        raise RuntimeError(
            f"{type(retriever).__name__}.search returned {type(results).__name__} of length "
            f"{len(results) if hasattr(results, '__len__') else '?'} for {n} queries; it must return one list per query"
        )
    return results


def _finish(
    envs: Sequence[SearchQAEnv],
    pendings: Sequence[_Pending],
    found: dict[int, list[Passage]],
    errors: dict[int, str],
) -> list[StepResult]:
    return [env._end_step(p, found.get(i), errors.get(i)) for i, (env, p) in enumerate(zip(envs, pendings))]


def _unwrap(envs: Sequence[Any]) -> list[SearchQAEnv]:
    """Accept wrapped environments (``gym.make`` adds checkers) as well as bare ones."""
    unwrapped = [e if isinstance(e, SearchQAEnv) else e.unwrapped for e in envs]
    for e in unwrapped:
        if not isinstance(e, SearchQAEnv):
            raise TypeError(f"step_batch needs SearchQAEnv instances, got {type(e).__name__}")
    return unwrapped


def _begin_all(envs: Sequence[SearchQAEnv], actions: Sequence[str]) -> list[_Pending]:
    if len(envs) != len(actions):
        raise ValueError(f"step_batch got {len(envs)} environments but {len(actions)} actions")
    return [env._begin_step(a) for env, a in zip(envs, actions)]


def _record(
    group: list[int],
    envs: Sequence[SearchQAEnv],
    outcome: list[list[Passage]] | BaseException,
    found: dict[int, list[Passage]],
    errors: dict[int, str],
) -> None:
    if isinstance(outcome, BaseException):
        if any(envs[i].on_retrieval_error == "raise" for i in group):
            raise outcome
        message = f"{type(outcome).__name__}: {outcome}"
        errors.update({i: message for i in group})
    else:
        found.update(zip(group, outcome))


def step_batch(envs: Sequence[SearchQAEnv], actions: Sequence[str]) -> list[StepResult]:
    """Step several episodes at once with one ``search`` call per distinct (retriever, k).

    A retriever that raises does not take the batch down: with ``on_retrieval_error="observe"`` the
    searching episodes get an information block saying the search failed and ``info["retrieval_error"]``.
    """
    envs = _unwrap(envs)
    pendings = _begin_all(envs, actions)
    found: dict[int, list[Passage]] = {}
    errors: dict[int, str] = {}
    for (_, k), group in _group_searches(envs, pendings).items():
        retriever = envs[group[0]].retriever
        queries = [pendings[i].query for i in group]
        try:
            outcome: Any = _check_results(retriever.search(queries, k), len(group), retriever)
        except Exception as exc:  # noqa: BLE001 - reported per episode, see docstring
            outcome = exc
        _record(group, envs, outcome, found, errors)
    return _finish(envs, pendings, found, errors)


async def step_batch_async(envs: Sequence[SearchQAEnv], actions: Sequence[str]) -> list[StepResult]:
    """:func:`step_batch` for event loops: searches run concurrently and never block the loop.

    A retriever with an ``asearch`` coroutine (the HTTP client) is awaited; any other runs in a worker thread.
    """
    envs = _unwrap(envs)
    pendings = _begin_all(envs, actions)
    groups = list(_group_searches(envs, pendings).items())

    async def run(group: list[int], k: int) -> Any:
        retriever = envs[group[0]].retriever
        queries = [pendings[i].query for i in group]
        asearch = getattr(retriever, "asearch", None)
        results = await asearch(queries, k) if asearch else await asyncio.to_thread(retriever.search, queries, k)
        return _check_results(results, len(group), retriever)

    outcomes = await asyncio.gather(*(run(group, k) for (_, k), group in groups), return_exceptions=True)
    found: dict[int, list[Passage]] = {}
    errors: dict[int, str] = {}
    for (_, group), outcome in zip(groups, outcomes):
        _record(group, envs, outcome, found, errors)
    return _finish(envs, pendings, found, errors)
