"""Deprecated: the rollout loop moved to :mod:`searchenv.rollout` (``searchenv.adapters.rollout.generation`` still
re-exports its names)."""
