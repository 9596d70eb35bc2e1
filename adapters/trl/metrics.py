"""What the TRL adapters log: a batch's episode metrics under their own names, through TRL's ``log_metric``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from searchenv.episode import aggregate_metrics

__all__ = ["log_episode_metrics"]


def log_episode_metrics(log_metric: Callable[[str, float], None] | None, rows: Iterable[Mapping[str, float]]) -> None:
    """Log the batch means of :meth:`~searchenv.episode.Episode.metrics` rows (``reward/em``, ``num_searches``,
    ``end_reason/answer``, ``rollout/model_tokens``, ...) under the names every adapter uses.

    ``reward`` is left out: TRL logs its own ``reward`` (the weighted sum of all reward functions), and two
    series under one name would be averaged together.
    """
    if log_metric is None:
        return
    for key, value in aggregate_metrics(rows).items():
        if key != "reward":
            log_metric(key, value)
