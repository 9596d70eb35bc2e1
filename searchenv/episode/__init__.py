"""One episode as a record: its turns (:mod:`.turns`), the :class:`Episode` that holds them (:mod:`.episode`),
and the reward contract that reads them (:mod:`.reward_contract`: :class:`Rollout` in, :class:`RewardResult` out).

Every reward, metric, ``info`` field and log line is derived from the turns, through one :class:`Facts`."""

from searchenv.episode.episode import METRIC_NAMES, Episode, Segment, aggregate_metrics, metrics_of
from searchenv.episode.generation import Generation
from searchenv.episode.reward_contract import RewardResult, RewardSpec, Rollout
from searchenv.episode.turns import Facts, Turn

__all__ = [
    "METRIC_NAMES",
    "Episode",
    "Facts",
    "Generation",
    "RewardResult",
    "RewardSpec",
    "Rollout",
    "Segment",
    "Turn",
    "aggregate_metrics",
    "metrics_of",
]
