"""Reward specifications: answer metrics, the format check and declarative reward specs.

``load_reward("format", lambda_f=0.4)`` builds a reward; ``Rollout.from_text(response, golds)`` turns a
text-only trainer's response into what every reward reads. See :mod:`searchenv.reward_specs.formulas` for the
formulas and :mod:`searchenv.episode.reward_contract` for the contract. Nothing here imports a heavy library.
"""

from searchenv.episode.reward_contract import RewardResult, RewardSpec, Rollout
from searchenv.reward_specs.format_check import FormatCheck, check_format
from searchenv.reward_specs.formulas import FORMULAS, METRICS, RewardSpecError
from searchenv.reward_specs.loader import REWARD_SPECS, load_reward
from searchenv.reward_specs.metrics import (
    answer_in_passages,
    cover_exact_match,
    exact_match,
    f1_score,
    normalize_answer,
)

__all__ = [
    "FORMULAS",
    "METRICS",
    "REWARD_SPECS",
    "FormatCheck",
    "RewardResult",
    "RewardSpec",
    "RewardSpecError",
    "Rollout",
    "answer_in_passages",
    "check_format",
    "cover_exact_match",
    "exact_match",
    "f1_score",
    "load_reward",
    "normalize_answer",
]
