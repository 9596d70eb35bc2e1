"""Every knob of the built-in policy-gradient loop (:class:`PPOConfig`), checked when it is built.

The defaults are small enough for a CPU test; :meth:`PPOConfig.paper` returns Search-R1's settings (SPEC §5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from searchenv.rollout import SamplingConfig

__all__ = ["ALGORITHMS", "Algorithm", "PPOConfig"]

Algorithm = Literal["ppo", "grpo", "reinforce++", "expert-iteration"]
ALGORITHMS = ("ppo", "grpo", "reinforce++", "expert-iteration")


@dataclass
class PPOConfig:
    """Every knob of the loop (SPEC §5 names in brackets).

    The defaults are small enough for a CPU test; :meth:`paper` returns the Search-R1 settings.
    """

    algorithm: Algorithm = "grpo"
    lr: float = 5e-7  # policy lr [1e-6 PPO, 5e-7 GRPO]
    critic_lr: float = 1e-5  # [critic lr], PPO only
    prompts_per_step: int = 2  # [batch, in prompts]
    group_size: int = 5  # episodes per prompt [GRPO group size]; PPO and REINFORCE++ usually use 1
    mini_batch_size: int = 10  # episodes per optimizer step [mini-batch]
    micro_batch_size: int = 5  # episodes per forward/backward [micro]
    ppo_epochs: int = 1
    clip_eps: float = 0.2
    value_clip: float = 0.5  # PPO critic: values move at most this far from the rollout's [Search-R1 cliprange_value]
    entropy_coef: float = 0.001  # loss -= coef · mean entropy [Search-R1 entropy_coeff; veRL 0.9 default 0]
    kl_coef: float = 0.001  # β: KL loss (GRPO) or per-token KL penalty in the reward (PPO, REINFORCE++)
    gamma: float = 1.0
    lam: float = 1.0
    max_grad_norm: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64  # [max response 500 per turn]
    max_total_tokens: int = 1024  # [max sequence 4096]
    chat_template: bool | None = None  # None: the tokenizer's chat template when it has one
    curriculum_steps: int = 0  # N > 0: sample questions of at most 1 + step // N hops (1-hop first); 0: all
    min_hops: int = 0  # sample only questions of at least this many hops (the world's metadata); 0: any
    drop_uniform_groups: bool = True  # GRPO: a group whose rewards are all equal teaches nothing; leave it out
    difficulty_pool: bool = False  # draw questions by their estimated success variance p(1-p) (pool.QuestionPool)
    informative_groups: int = 0  # N > 0: play further rounds until N groups with differing rewards (max_rounds)
    max_rounds: int = 3  # with informative_groups: rounds of prompts_per_step questions a step may play at most
    placebo: bool = False  # the control: each group's rewards shuffled among its episodes before anything uses them
    replay: int = 0  # expert-iteration: warm-start demonstrations replayed in every update (forgetting guard)
    replay_max_hops: int = 0  # the demonstrations replayed: questions of at most this many hops; 0: any
    keep_best: bool = False  # with validation: save the checkpoint of the best validation EM as output_dir/best
    time_limit: float = 0.0  # seconds > 0: stop after the first step that ends past it (validated and saved as usual)
    trainable_layers: int = 0  # N > 0: train only the top N decoder layers and the final norm; 0: every weight
    validation: int = 0  # N > 0: the last N training questions are never sampled; played greedily as validation
    eval_every: int = 0  # with validation: play it every N steps (and before the first and after the last)
    bf16: bool = False  # bfloat16 autocast for forward passes (weights and optimizer stay float32)
    logprob_chunk: int = 1024  # tokens per lm-head chunk when computing log-probs and entropies
    steps: int = 2  # [500-600 steps]
    save_every: int = 0  # 0 = only at the end (when output_dir is set) [100]
    seed: int = 0

    @classmethod
    def paper(cls, algorithm: Algorithm = "ppo", **overrides: Any) -> PPOConfig:
        """Search-R1's settings (8×H100 scale): 512 prompts per step (× 5 episodes each for GRPO), mini-batches of
        256 prompts, micro-batches of 64 episodes, 500 new tokens per turn, 4096 in all, 500 steps, bf16 autocast."""
        group = 5 if algorithm == "grpo" else 1
        values: dict[str, Any] = {
            "algorithm": algorithm,
            "lr": 1e-6 if algorithm == "ppo" else 5e-7,
            "prompts_per_step": 512,
            "group_size": group,
            "mini_batch_size": 256 * group,
            "micro_batch_size": 64,
            "max_new_tokens": 500,
            "max_total_tokens": 4096,
            "bf16": True,
            "steps": 500,
            "save_every": 100,
        }
        return cls(**{**values, **overrides})

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {list(ALGORITHMS)}, got {self.algorithm!r}")
        if self.algorithm in ("grpo", "expert-iteration") and self.group_size < 2:
            raise ValueError(
                f"{self.algorithm} needs group_size >= 2: it compares the episodes of one question with each other"
            )
        if self.placebo and self.group_size < 2:
            raise ValueError("placebo shuffles rewards within a group: it needs group_size >= 2")
        if self.mini_batch_size % self.micro_batch_size:
            raise ValueError("mini_batch_size must be a multiple of micro_batch_size")
        counts = (
            self.curriculum_steps,
            self.min_hops,
            self.trainable_layers,
            self.validation,
            self.eval_every,
            self.informative_groups,
            self.replay,
            self.replay_max_hops,
        )
        if min(counts) < 0 or self.time_limit < 0 or self.logprob_chunk < 1 or self.max_rounds < 1:
            raise ValueError(
                "curriculum_steps, min_hops, trainable_layers, validation, eval_every, informative_groups, replay, "
                "replay_max_hops and time_limit must be >= 0, logprob_chunk and max_rounds >= 1"
            )
        if self.replay and self.algorithm != "expert-iteration":
            raise ValueError("replay mixes demonstrations into expert-iteration's fine-tuning; set replay=0")
        if self.keep_best and not self.validation:
            raise ValueError("keep_best picks the checkpoint by validation EM: set validation > 0 (and eval_every)")
        if self.steps < 1 or self.prompts_per_step < 1 or self.group_size < 1:
            raise ValueError(
                f"steps, prompts_per_step and group_size must be at least 1, got steps={self.steps}, "
                f"prompts_per_step={self.prompts_per_step}, group_size={self.group_size} (nothing would be trained)"
            )
        self.sampling  # building it checks the sampling settings: SamplingConfig holds the one validation

    @property
    def episodes_per_step(self) -> int:
        return self.prompts_per_step * self.group_size

    @property
    def sampling(self) -> SamplingConfig:
        return SamplingConfig(
            self.temperature, self.top_p, self.max_new_tokens, self.max_total_tokens, chat_template=self.chat_template
        )
