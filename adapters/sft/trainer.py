"""A supervised warm start: the policy learns to imitate demonstrations, with the loss on its own tokens only.

Read it top to bottom: :class:`SFTConfig`, then :class:`SFTTrainer`, whose :meth:`SFTTrainer.step` is *sample a
batch → mean negative log-likelihood of the model's tokens → one optimizer step*. The demonstrations are tokenized
once by the token path every rollout uses (:func:`searchenv.tokenize_segments`): environment text (passages,
hints) conditions the model but is never a target (SPEC §2), exactly as in the policy-gradient loss that follows.
Per-token log-probabilities come from :func:`searchenv.adapters.ppo.batch.token_logprobs`, the function the PPO
update uses, so the two stages read a transcript the same way.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from searchenv.adapters.ppo.batch import collate, split_micro_batches, token_logprobs
from searchenv.adapters.sft.demonstrations import Demonstration
from searchenv.protocol import Protocol
from searchenv.rollout import save_checkpoint
from searchenv.rollout.models import train_top_layers
from searchenv.tokenization import TokenizedEpisode, tokenize_segments

__all__ = ["SFTConfig", "SFTTrainer", "tokenize_demonstrations"]


@dataclass
class SFTConfig:
    """Every knob of the warm start.

    Attributes:
        lr: peak learning rate (AdamW), reached after ``warmup_steps`` and decayed along a cosine to a tenth.
        steps: optimizer steps.
        batch_size: demonstrations per optimizer step (drawn without replacement, epoch after epoch).
        micro_batch_size: demonstrations per forward/backward pass (a divisor of ``batch_size``).
        warmup_steps: steps of linear warm-up.
        max_grad_norm: gradients are clipped to this global norm.
        trainable_layers: train only the top N decoder layers (and the final norm); ``None`` trains every weight.
            Fewer trainable layers make each step cheaper (no backward pass below them) and keep the embeddings.
        chat_template: whether prompts go in the tokenizer's chat template (:func:`searchenv.encode_prompt`);
            it must be what the rollouts that follow use.
        bf16: forward passes under bfloat16 autocast (weights and optimizer stay float32): GPUs, and CPUs with
            bf16 units (AMX or AVX-512 bf16; with AMX a step took about a third of the time). Off elsewhere.
        seed: seeds the order of demonstrations and torch.
        max_tokens: the most tokens (prompt and transcript) of one demonstration; a longer one is refused by
            :func:`tokenize_demonstrations`, naming it, before a forward pass would allocate for it.
    """

    lr: float = 1e-4
    steps: int = 60
    batch_size: int = 8
    micro_batch_size: int = 8
    warmup_steps: int = 5
    max_grad_norm: float = 1.0
    trainable_layers: int | None = None
    chat_template: bool | None = False
    bf16: bool = False
    seed: int = 0
    max_tokens: int = 4096

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.micro_batch_size < 1 or self.max_tokens < 1:
            raise ValueError("steps, batch_size, micro_batch_size and max_tokens must be at least 1")
        if self.batch_size % self.micro_batch_size:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be a multiple of micro_batch_size ({self.micro_batch_size})"
            )
        if not self.lr > 0 or self.warmup_steps < 0:
            raise ValueError(f"lr must be > 0 and warmup_steps >= 0, got {self.lr}, {self.warmup_steps}")

    def lr_at(self, step: int) -> float:
        """The learning rate of optimizer step ``step`` (0-based): linear warm-up, then a cosine to ``lr / 10``."""
        if step < self.warmup_steps:
            return self.lr * (step + 1) / (self.warmup_steps + 1)
        progress = (step - self.warmup_steps) / max(1, self.steps - self.warmup_steps)
        return self.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def tokenize_demonstrations(
    demonstrations: Sequence[Demonstration], tokenizer: Any, protocol: Protocol, config: SFTConfig
) -> list[TokenizedEpisode]:
    """The demonstrations as the one token path reads them, each checked against ``config.max_tokens``.

    It needs the tokenizer only, so ``searchenv train-sft`` runs it before the weights load: an over-long
    transcript is named with the limit, not met as an allocation of the whole batch's logits."""
    if not demonstrations:
        raise ValueError("no demonstrations to learn from: check the sources and their filters")
    episodes = []
    for demonstration in demonstrations:
        episode = tokenize_segments(
            demonstration.prompt, demonstration.segments, protocol, tokenizer, chat_template=config.chat_template
        )
        if len(episode.input_ids) > config.max_tokens:
            raise ValueError(
                f"demonstration {demonstration.id!r} has {len(episode.input_ids)} tokens, over the limit of "
                f"{config.max_tokens} (--max-tokens); raise the limit or leave that record out"
            )
        episodes.append(episode)
    return episodes


class SFTTrainer:
    """Fine-tune ``model`` on ``demonstrations`` (see the module docstring).

    Args:
        model: a ``transformers`` causal LM in float32 (trained in place).
        tokenizer: its tokenizer.
        demonstrations: what to imitate (:mod:`searchenv.adapters.sft.demonstrations`).
        protocol: the protocol the demonstrations were played under (how inserted blocks are framed).
        config: see :class:`SFTConfig`.
        log_path: a ``.jsonl`` file that receives one line of metrics per step (also printed to stdout).
        output_dir: where the checkpoint goes at the end (``final``); ``None`` saves nothing.
        run_settings: the environment settings written with the checkpoint (``searchenv_run.json``), so that
            ``searchenv eval`` and the RL stage replay the environment it learned in.
        episodes: ``demonstrations`` already tokenized by :func:`tokenize_demonstrations` (a caller that checked
            them before loading the model); ``None`` tokenizes them here.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        demonstrations: Sequence[Demonstration],
        protocol: Protocol,
        config: SFTConfig,
        log_path: str | Path | None = None,
        output_dir: str | Path | None = None,
        run_settings: Mapping[str, Any] | None = None,
        episodes: Sequence[TokenizedEpisode] | None = None,
    ):
        if episodes is None:
            episodes = tokenize_demonstrations(demonstrations, tokenizer, protocol, config)
        self.model, self.tokenizer, self.config = model, tokenizer, config
        torch.manual_seed(config.seed)
        self.rng = np.random.default_rng(config.seed)
        if config.trainable_layers is not None:
            train_top_layers(model, config.trainable_layers)
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.parameters, lr=config.lr, weight_decay=0.0)
        self.episodes: list[TokenizedEpisode] = list(episodes)
        self.log_path = Path(log_path) if log_path else None
        self.output_dir = Path(output_dir) if output_dir else None
        self.run_settings = dict(run_settings or {})
        self.global_step = 0
        self.skipped_steps = 0
        self._order: list[int] = []

    def _next_batch(self) -> list[TokenizedEpisode]:
        picked = []
        while len(picked) < self.config.batch_size:
            if not self._order:
                self._order = self.rng.permutation(len(self.episodes)).tolist()
            picked.append(self.episodes[self._order.pop()])
        return picked

    def step(self) -> dict[str, float]:
        """One optimizer step on a batch of demonstrations; returns its metrics (mean loss per model token)."""
        cfg = self.config
        started = time.perf_counter()
        lr = cfg.lr_at(self.global_step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        batch = collate(self._next_batch(), [0.0] * cfg.batch_size, self.tokenizer.pad_token_id)
        batch = batch.to(next(self.model.parameters()).device)
        tokens = batch.loss_mask.sum().clamp(min=1)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for rows in split_micro_batches(batch, torch.arange(cfg.batch_size), cfg.micro_batch_size):
            micro = batch.select(rows)
            device = micro.input_ids.device.type
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=cfg.bf16):
                logprobs = token_logprobs(self.model, micro)
            loss = -(logprobs * micro.loss_mask).sum() / tokens  # the batch's mean over model tokens
            loss.backward()
            loss_sum += loss.item()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters, cfg.max_grad_norm)
        if torch.isfinite(grad_norm):
            self.optimizer.step()
        else:  # a non-finite gradient would turn every weight to NaN: skip the step, and say so in the log
            self.skipped_steps += 1
            self.optimizer.zero_grad(set_to_none=True)
        self.global_step += 1
        seconds = time.perf_counter() - started
        return {
            "step": self.global_step,
            "sft/loss": loss_sum,
            "sft/model_tokens": float(tokens),
            "sft/lr": lr,
            "sft/grad_norm": float(grad_norm),
            "sft/skipped_steps": float(self.skipped_steps),
            "sft/step_seconds": seconds,
            "sft/tokens_per_s": float(batch.attention_mask.sum()) / max(seconds, 1e-9),
        }

    def train(self, callback: Callable[[dict[str, float]], None] | None = None) -> list[dict[str, float]]:
        """Run ``config.steps`` steps, logging each; the checkpoint goes to ``output_dir/final`` at the end."""
        history = []
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        for _ in tqdm(range(self.config.steps), desc="sft steps", unit="step", file=sys.stderr):
            metrics = self.step()
            history.append(metrics)
            line = json.dumps(metrics)
            print(line, flush=True)
            if self.log_path:
                with self.log_path.open("a") as handle:
                    handle.write(line + "\n")
            if callback is not None:
                callback(metrics)
        if self.output_dir:
            self.save(self.output_dir / "final")
        return history

    def save(self, path: Path) -> None:
        """Weights, tokenizer and ``searchenv_run.json`` (the environment it learned in, and this config)."""
        settings = {**self.run_settings, "algorithm": "sft", "config": asdict(self.config)}
        save_checkpoint(
            path, self.model, self.tokenizer, settings, step=self.global_step, demonstrations=len(self.episodes)
        )
