"""What the policy sampled for one model turn: token ids, their log-probabilities and the weights that made them.

Asynchronous trainers (veRL's fully-async policy, TRL's ``AsyncGRPOTrainer``, SkyRL's fully-async trainer) keep
generating while the trainer updates the weights, so one episode may be sampled by several policy versions and
even one turn may be cut at a weight sync and finished by newer weights. An off-policy correction (decoupled PPO,
truncated importance sampling, a staleness filter) then needs, per turn, the ids exactly as sampled, the sampler's
per-token log-probabilities, and the policy version(s) behind them. :class:`Generation` is that record; the
:class:`~searchenv.episode.episode.Episode` keeps one per model turn (``episode.generations``), so a resumed or
re-scored episode takes its ids from the record and never re-tokenises text the model already wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Generation"]


@dataclass(frozen=True, slots=True)
class Generation:
    """One model turn as the generator produced it, cut where the environment cut the action.

    Attributes:
        token_ids: the sampled ids the turn keeps (tokens the engine ran on past the first complete search or
            answer are dropped with the text the environment dropped).
        logprobs: the sampler's log-probability of each kept id, or ``None`` when the generator gave none.
        policy_version: the weights version that sampled the turn's first token (veRL's ``min_global_steps``; the
            trainer's step in our own loops); ``None`` when the generator does not report versions.
        last_policy_version: the version that sampled its last token; newer than ``policy_version`` only when a
            weight sync interrupted the turn and newer weights finished it (veRL's ``max_global_steps``). Defaults
            to ``policy_version``.
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None = None
    policy_version: int | None = None
    last_policy_version: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "token_ids", tuple(int(t) for t in self.token_ids))
        if self.logprobs is not None:
            object.__setattr__(self, "logprobs", tuple(float(x) for x in self.logprobs))
            if len(self.logprobs) != len(self.token_ids):
                raise ValueError(
                    f"Generation has {len(self.logprobs)} logprobs for {len(self.token_ids)} token ids; pass one "
                    "log-probability per sampled id, or logprobs=None when the generator reports none"
                )
        if self.last_policy_version is None:
            object.__setattr__(self, "last_policy_version", self.policy_version)
        elif self.policy_version is None:
            raise ValueError("Generation got last_policy_version without policy_version; pass both or neither")
        if self.policy_version is not None and self.policy_version > int(self.last_policy_version):
            raise ValueError(
                "Generation policy versions must satisfy policy_version <= last_policy_version (the first token's "
                f"weights are never newer than the last one's), got {self.policy_version}, {self.last_policy_version}"
            )

    @classmethod
    def sampled(
        cls,
        token_ids: Sequence[int],
        logprobs: Sequence[float] | None,
        policy_version: int | None = None,
        last_policy_version: int | None = None,
    ) -> Generation:
        """A record from an engine's output: an empty ``logprobs`` list for a non-empty turn means the engine
        was not asked for log-probabilities (veRL's and vLLM's clients report ``[]`` then), so it becomes ``None``."""
        if token_ids and logprobs is not None and not len(logprobs):
            logprobs = None
        return cls(
            tuple(token_ids),
            None if logprobs is None else tuple(logprobs),
            None if policy_version is None else int(policy_version),
            None if last_policy_version is None else int(last_policy_version),
        )

    def kept(self, count: int) -> Generation:
        """The record of the first ``count`` ids (the action the environment kept), versions unchanged."""
        if count == len(self.token_ids):
            return self
        logprobs = None if self.logprobs is None else self.logprobs[:count]
        return Generation(self.token_ids[:count], logprobs, self.policy_version, self.last_policy_version)
