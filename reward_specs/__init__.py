"""Reward specifications (see :mod:`searchenv.reward_specs.base` for the contract)."""
