"""Token-level episodes: the one loop that plays SearchQA environments with a policy, for training, evaluation,
the demo and the reward audit.

Every caller needs the same thing: feed each episode's context to the policy, sample one action per episode
(stopping at the protocol's closing tags), step all environments together, append what the environment wrote,
repeat until every episode is over. :class:`EpisodeDriver` is that loop cut at its seams, so that a caller that
owns the engine (a trainer's synchronised turn, an evaluation harness that writes RAG's first action) can drive
it step by step:

- :meth:`EpisodeDriver.start` resets the environments and encodes their prompts;
- :meth:`EpisodeDriver.sample` asks a :class:`~searchenv.rollout.turn_generator.TurnGenerator` for one turn of every
  running episode (episodes out of token budget are scored as cut first);
- :meth:`EpisodeDriver.apply` hands the sampled turns to the environments in one batched step and appends what
  they wrote;
- :meth:`EpisodeDriver.results` gives one :class:`EpisodeResult` per environment.

:func:`rollout` runs the whole loop in one call.

Why token-in/token-out: the ids the policy sampled are kept exactly as sampled (never decoded and re-encoded),
environment text is tokenized on its own and masked out, so the loss mask lines up with what the model actually
produced (SPEC §2), and an evaluated checkpoint reads exactly the token sequences it was trained on. When an
engine runs past a closing tag, the surplus tokens are cut together with the text the environment drops
(:meth:`searchenv.tokenization.EpisodeTokens.add_action`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from searchenv.rollout.turn_generator import GeneratedTurn, TurnGenerator
from searchenv.sampling import SamplingConfig
from searchenv.tokenization import EpisodeTokens, TokenizedEpisode, encode_prompt

if TYPE_CHECKING:
    from searchenv.env.search_qa import SearchQAEnv

__all__ = ["EpisodeDriver", "EpisodeResult", "TurnRequest", "make_envs", "rollout"]


@dataclass
class EpisodeResult:
    """One finished episode, ready for a trainer or an evaluation record.

    Attributes:
        tokens: prompt ids, response ids (model + env, in order), loss mask and sampled-token logprobs.
        reward: the environment's terminal reward (an episode cut by the token budget is scored as truncated).
        reward_parts: named parts of the reward (``em``, ``format_ok``, ...), as the environment reported them.
        metrics: the episode's :meth:`~searchenv.episode.Episode.metrics` (``num_searches``, ``num_invalid``,
            ``end_reason/context_limit`` = 1.0 when the token budget ended it, ...) plus ``rollout/response_tokens``
            (all response ids) and ``rollout/model_tokens`` (mask 1).
        index: the dataset index the environment was reset to.
        info: the environment's ``info`` of the last step.
    """

    tokens: TokenizedEpisode
    reward: float
    reward_parts: dict[str, float]
    metrics: dict[str, float]
    index: int | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TurnRequest:
    """One running episode's next turn: the context to continue, where to stop, and how many tokens it may take."""

    row: int
    context_ids: list[int]
    stop_strings: tuple[str, ...]
    max_new_tokens: int


class EpisodeDriver:
    """Plays one episode in each of ``envs`` with token ids in and token ids out (see the module docstring).

    Args:
        envs: environments to reset and play, typically sharing one retriever so that each turn makes a single
            batched ``search`` call (:func:`searchenv.step_batch`).
        tokenizer: the policy's tokenizer (prompts and environment text are encoded with it).
        sampling: the per-turn and per-episode token caps, and whether the prompt goes in the chat template.
        policy_version: the weights version that samples (the trainer's step), recorded with every turn in
            ``episode.generations`` and told to each environment (``set_training_step``), so that schedules over
            training steps (a degraded engine's ``p``, the simulated engine's ``p_noisy``) follow the trainer.
    """

    def __init__(
        self,
        envs: Sequence[SearchQAEnv],
        tokenizer: Any,
        sampling: SamplingConfig,
        *,
        policy_version: int | None = None,
    ):
        self.envs = list(envs)
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.policy_version = policy_version
        self.indices: list[int | None] = [None] * len(self.envs)
        self._builders: list[EpisodeTokens] = []
        self._stops: list[tuple[str, ...]] = []
        self._final_infos: list[dict[str, Any]] = [{} for _ in self.envs]
        self._rewards = [0.0] * len(self.envs)
        self._active: list[int] = []

    # -- start ------------------------------------------------------------------------------------------------
    def start(self, indices: Sequence[int] | None = None, seed: int | None = None) -> list[str]:
        """Reset every environment (``options={"index": indices[i]}`` when given, ``seed + i`` when seeded) and
        encode its prompt; returns the prompts as text. ``seed`` also seeds torch's sampler, so the same call gives
        the same episodes."""
        if indices is not None and len(indices) != len(self.envs):
            raise ValueError(
                f"got {len(indices)} indices for {len(self.envs)} environments; pass one index per environment"
            )
        if seed is not None:
            import torch

            torch.manual_seed(seed)
        if self.policy_version is not None:
            for env in self.envs:
                env.unwrapped.set_training_step(self.policy_version)
        prompts = []
        self._builders, self._stops = [], []
        for i, env in enumerate(self.envs):
            options = {"index": int(indices[i])} if indices is not None else None
            obs, info = env.reset(seed=None if seed is None else seed + i, options=options)
            self.indices[i] = None if indices is None else int(indices[i])
            protocol = env.unwrapped.protocol  # tool-call protocols: tools declared, tool turns framed by the template
            prompt_ids = encode_prompt(
                self.tokenizer, obs, chat_template=self.sampling.chat_template, tools=info.get("tools")
            )
            self._builders.append(EpisodeTokens(self.tokenizer, prompt_ids, protocol, episode=env.unwrapped.episode))
            self._stops.append(tuple(info.get("stop_strings") or protocol.stop_strings))
            prompts.append(obs)
        self._final_infos = [{} for _ in self.envs]
        self._rewards = [0.0] * len(self.envs)
        self._active = list(range(len(self.envs)))
        return prompts

    def force(self, actions: Sequence[str | None]) -> None:
        """Step the episodes with actions the harness wrote, not the model (RAG's retrieval for the question):
        ``actions[i]`` for environment ``i``, ``None`` to leave it. Their tokens are in the context with mask 0."""
        from searchenv.env.stepping import step_batch

        rows = [i for i in self._active if actions[i] is not None]
        if not rows:
            return
        for i in rows:
            self._builders[i].add_forced(str(actions[i]))
        self._absorb(rows, step_batch([self.envs[i] for i in rows], [str(actions[i]) for i in rows]))

    # -- sample -----------------------------------------------------------------------------------------------
    def requests(self) -> list[TurnRequest]:
        """The next turn of every running episode. An episode with no token budget left is scored first, as cut
        by the trainer (``truncate("context_limit")``, like veRL's length cut), and asks for nothing."""
        requests = []
        for i in list(self._active):
            builder = self._builders[i]
            budget = self.sampling.budget(len(builder.prompt_ids), len(builder.response_ids))
            if budget <= 0:
                _, self._rewards[i], _, _, self._final_infos[i] = self.envs[i].unwrapped.truncate("context_limit")
                self._active.remove(i)
                continue
            cap = min(self.sampling.max_new_tokens, budget)
            requests.append(TurnRequest(i, builder.context_ids, self._stops[i], cap))
        return requests

    def sample(
        self,
        generator: TurnGenerator,
        requests: Sequence[TurnRequest] | None = None,
        on_turn: Callable[[int], Any] | None = None,
    ) -> dict[int, GeneratedTurn]:
        """One turn for each request (default: :meth:`requests`), by row. Rows of one engine call share stop
        strings; protocols may differ between environments, so requests are grouped by them. ``on_turn`` hears
        the number of tokens each engine call sampled (progress bars)."""
        requests = self.requests() if requests is None else requests
        turns: dict[int, GeneratedTurn] = {}
        for stops in dict.fromkeys(r.stop_strings for r in requests):
            group = [r for r in requests if r.stop_strings == stops]
            out = generator.generate([r.context_ids for r in group], list(stops), [r.max_new_tokens for r in group])
            for request, turn in zip(group, out, strict=True):
                turns[request.row] = turn
            if on_turn is not None:
                on_turn(sum(len(t.token_ids) for t in out))
        return turns

    # -- apply ------------------------------------------------------------------------------------------------
    def apply(self, turns: Mapping[int, GeneratedTurn]) -> None:
        """Hand each sampled turn to its environment (one batched step) and append what the environments wrote."""
        from searchenv.env.stepping import step_batch

        rows = [i for i in self._active if i in turns]
        actions = [
            self._builders[i].add_action(
                turns[i].token_ids, turns[i].logprobs, self.envs[i].unwrapped.protocol, self.policy_version
            )
            for i in rows
        ]
        if rows:
            self._absorb(rows, step_batch([self.envs[i] for i in rows], actions))

    def _absorb(self, rows: Sequence[int], results: Sequence[tuple]) -> None:
        for i, (obs, reward, terminated, truncated, info) in zip(rows, results, strict=True):
            if obs:
                self._builders[i].add_env(obs)
            if terminated or truncated:
                self._rewards[i] = float(reward)
                self._final_infos[i] = dict(info)
                self._active.remove(i)

    # -- results ----------------------------------------------------------------------------------------------
    def stop_strings(self, row: int) -> tuple[str, ...]:
        """Where the episode in ``row`` stops a turn (its protocol's closing tags)."""
        return self._stops[row]

    @property
    def running(self) -> bool:
        """Whether some episode is still being played."""
        return bool(self._active)

    def results(self) -> list[EpisodeResult]:
        """One result per environment, in order (call when :attr:`running` is false)."""
        if self._active:
            raise RuntimeError(f"{len(self._active)} episodes are still running; sample and apply until none is")
        out = []
        for i, env in enumerate(self.envs):
            tokens = self._builders[i].result()
            info = self._final_infos[i]
            metrics = {
                **env.unwrapped.episode.metrics(),
                "rollout/response_tokens": float(len(tokens.response_ids)),
                "rollout/model_tokens": float(sum(tokens.loss_mask)),
            }
            parts = {k: float(v) for k, v in (info.get("reward_parts") or {}).items()}
            out.append(EpisodeResult(tokens, self._rewards[i], parts, metrics, self.indices[i], info))
        return out


def rollout(
    envs: Sequence[SearchQAEnv],
    generator: TurnGenerator,
    sampling: SamplingConfig,
    *,
    indices: Sequence[int] | None = None,
    seed: int | None = None,
    turn_sync: Callable[[bool], bool] | None = None,
    on_turn: Callable[[int], Any] | None = None,
    policy_version: int | None = None,
) -> list[EpisodeResult]:
    """Play one episode in each environment with ``generator`` and return the token-level results.

    Args:
        envs, sampling, policy_version: see :class:`EpisodeDriver`.
        generator: the inference engine.
        indices / seed: see :meth:`EpisodeDriver.start`.
        turn_sync: for several processes whose engine calls are collective (vLLM with tensor parallelism or
            server mode, FSDP): called once per turn with "this process still has episodes", it returns "some
            process still has episodes". A process whose episodes are over keeps calling the engine with no
            contexts until every process is done, so all processes make the same number of calls.
        on_turn: called after every engine call with the number of tokens it sampled (progress bars).

    Returns:
        one :class:`EpisodeResult` per environment, in order.
    """
    driver = EpisodeDriver(envs, generator.tokenizer, sampling, policy_version=policy_version)
    driver.start(indices, seed)
    while True:
        requests = driver.requests()
        if turn_sync is not None and turn_sync(bool(requests)) and not requests:
            generator.generate([], list(driver.stop_strings(0)), [])  # a collective call with nothing to add
            continue
        if not requests:
            break
        driver.apply(driver.sample(generator, requests, on_turn))
    return driver.results()


def make_envs(n: int, **env_kwargs: Any) -> list[SearchQAEnv]:
    """``n`` SearchQA environments sharing one dataset and retriever (built once), so a batch turn is one search call.

    ``env_kwargs`` are :class:`~searchenv.env.SearchQAEnv` arguments (``dataset``, ``retriever``, ``reward``, ...).
    """
    import gymnasium as gym

    from searchenv.registration import ENV_ID

    if n < 1:
        raise ValueError(f"need at least one environment, got n={n}")
    first = gym.make(ENV_ID, **env_kwargs).unwrapped
    return [first, *(first.sibling() for _ in range(n - 1))]
