"""A small, readable policy-gradient trainer for SearchQA: PPO, GRPO and REINFORCE++ in one loop.

Read it top to bottom: configuration (:class:`PPOConfig`), then :class:`Trainer`, whose :meth:`Trainer.step` is
*rollout → score → advantages → update*. ``algorithm="expert-iteration"`` (RAFT / ReST-EM) shares the loop: it
keeps, from each group whose rewards differ, the episodes that earned the group's best reward and fine-tunes on
them (with replayed demonstrations, ``replay``), instead of weighting every episode by an advantage. Which
questions a step plays and which groups count come from :mod:`.pool` (a difficulty-filtered pool, refilled rounds,
and the placebo that shuffles each group's rewards).
The defaults follow SPEC §5 (clip 0.2, KL β 0.001, GAE λ = γ = 1, critic lr 1e-5, GRPO group size 5, policy
lr 1e-6 for PPO and 5e-7 for GRPO) and Search-R1's veRL configuration (value clip 0.5, entropy coefficient
0.001; veRL 0.9's own default entropy coefficient is 0) at CPU-sized batch and length settings;
:meth:`PPOConfig.paper` has the paper's sizes.

Weights stay float32 (the optimizer's master copy); ``bf16=True`` runs the forward passes under bfloat16
autocast. Episodes become tensors in :mod:`.batch`; the algorithms' maths lives in :mod:`.losses`.

Every step logs, besides reward and episode statistics, CleanRL's diagnostics: ``approx_kl`` (the k3 estimate of
KL(old‖new) over the update), ``clipfrac``, ``entropy`` and, for PPO, the critic's ``explained_variance``;
``rollout_tokens_per_s`` / ``update_tokens_per_s`` time the two phases.

Masking (SPEC §2): every per-token quantity — the policy loss, the KL term or penalty, the value loss, the
advantage normalisation statistics — is taken over ``loss_mask == 1`` tokens only. Environment tokens still
condition the model (they are in the input), but they are never a target.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from searchenv.adapters.ppo.batch import Batch, ValueModel, collate, split_micro_batches, token_logprobs
from searchenv.adapters.ppo.config import ALGORITHMS, Algorithm, PPOConfig
from searchenv.adapters.ppo.losses import (
    explained_variance,
    gae_advantages,
    grpo_advantages,
    masked_mean,
    masked_whiten,
    policy_loss,
    reinforce_pp_advantages,
    token_rewards,
    value_loss,
)
from searchenv.adapters.ppo.pool import QuestionPool, informative_groups, shuffle_within_groups
from searchenv.episode import aggregate_metrics
from searchenv.rollout import (
    EpisodeResult,
    HFGenerator,
    rollout,
    save_checkpoint,
)
from searchenv.rollout.models import train_top_layers
from searchenv.tokenization import TokenizedEpisode

__all__ = ["ALGORITHMS", "Algorithm", "PPOConfig", "Trainer"]


class Trainer:
    """Train ``model`` on SearchQA environments with PPO, GRPO or REINFORCE++.

    Args:
        model: a ``transformers`` causal LM (trained in place; load it in float32, see :func:`load_policy`).
        tokenizer: its tokenizer.
        envs: ``config.episodes_per_step`` environments; they should share one retriever (``gym.make`` with the
            same ``retriever=`` string does) so each turn is one batched search.
        config: see :class:`PPOConfig`.
        log_path: a ``.jsonl`` file that receives one line of metrics per step (also printed to stdout).
        output_dir: where checkpoints go (``save_every`` steps and at the end); ``None`` saves nothing.
        run_settings: the model and environment settings (``model``, ``protocol``, ``dataset``, ``reward``, ...)
            written with every checkpoint as ``searchenv_run.json``, see
            :func:`searchenv.rollout.write_run_settings`.
        demonstrations: tokenized demonstrations that expert iteration replays (``config.replay`` per update);
            they must come from training questions (the warm start's own, typically).
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        envs: Sequence[Any],
        config: PPOConfig,
        log_path: str | Path | None = None,
        output_dir: str | Path | None = None,
        run_settings: Mapping[str, Any] | None = None,
        demonstrations: Sequence[TokenizedEpisode] = (),
    ):
        if len(envs) != config.episodes_per_step:
            raise ValueError(
                f"got {len(envs)} environments for {config.episodes_per_step} episodes per step "
                f"(prompts_per_step × group_size); create one environment per episode"
            )
        low = sorted({str(p.dtype) for p in model.parameters() if p.requires_grad and p.dtype != torch.float32})
        if low:
            raise ValueError(
                f"the policy's trainable weights are {low}, not float32: AdamW updates of lr ~1e-6 vanish in "
                "low-precision masters; load with load_policy(...) (float32) and set PPOConfig(bf16=True) instead"
            )
        self.config, self.model, self.tokenizer, self.envs = config, model, tokenizer, list(envs)
        torch.manual_seed(config.seed)
        if config.trainable_layers:
            train_top_layers(model, config.trainable_layers)
        self.rng = np.random.default_rng(config.seed)
        self.reference = copy.deepcopy(model).eval().requires_grad_(False) if config.kl_coef else None
        self.trained = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.trained, lr=config.lr, weight_decay=0.0)
        self.device = next(model.parameters()).device
        self.critic = ValueModel(model).to(self.device) if config.algorithm == "ppo" else None
        if self.critic is not None:
            self.critic_optimizer = torch.optim.AdamW(self.critic.parameters(), lr=config.critic_lr, weight_decay=0.0)
        # bf16: rollouts sample from a bf16 copy of the weights (made again after each update), updates autocast.
        self.sampling_dtype = torch.bfloat16 if config.bf16 else None
        self.generator = HFGenerator(model, tokenizer, config.sampling, dtype=self.sampling_dtype)
        self.log_path = Path(log_path) if log_path else None
        self.output_dir = Path(output_dir) if output_dir else None
        self.run_settings = dict(run_settings or {})
        self.examples = self.envs[0].unwrapped.examples
        if config.validation >= len(self.examples):
            raise ValueError(
                f"validation holds out {config.validation} of {len(self.examples)} questions; leave some to train on"
            )
        self.hops = self._hops() if config.curriculum_steps or config.min_hops else None
        trainable = len(self.examples) - config.validation
        known = [ex.metadata.get("hops") for ex in self.examples]
        self.pool = QuestionPool(trainable, known if None not in known else None, filtered=config.difficulty_pool)
        self.placebo_rng = np.random.default_rng(config.seed + 1)  # apart from question sampling: same draws
        if config.replay and not demonstrations:
            raise ValueError("replay > 0 needs demonstrations to replay (Trainer(demonstrations=...))")
        self.demonstrations = list(demonstrations)
        self.best_em: float | None = None
        self.best_step = 0
        self.global_step = 0

    def _hops(self) -> list[int]:
        hops = [ex.metadata.get("hops") for ex in self.examples]
        if any(h is None for h in hops):
            raise ValueError(
                "curriculum_steps and min_hops need the number of hops of every question (the generated world's "
                "'hops' metadata); this dataset has none: set curriculum_steps=0 and min_hops=0"
            )
        return [int(h) for h in hops]

    def _autocast(self):
        if not self.config.bf16:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    # -- one step ---------------------------------------------------------------------------------------
    def sample_indices(self) -> list[int]:
        """Prompts for one step, each repeated ``group_size`` times (consecutive, as GRPO groups need).

        With ``curriculum_steps = N`` only questions of at most ``1 + step // N`` hops are drawn (1-hop first); with
        ``min_hops = M`` only questions of at least ``M`` hops; with ``difficulty_pool`` by estimated success
        variance (:class:`~searchenv.adapters.ppo.pool.QuestionPool`), else uniformly.
        """
        allowed = None
        if self.hops is not None:
            cfg = self.config
            cap = 1 + self.global_step // cfg.curriculum_steps if cfg.curriculum_steps else max(self.hops)
            allowed = [i for i in range(self.pool.size) if cfg.min_hops <= self.hops[i] <= max(cap, cfg.min_hops)]
        prompts = self.pool.sample(self.config.prompts_per_step, self.rng, allowed)
        return [i for i in prompts for _ in range(self.config.group_size)]

    def step(self) -> dict[str, float]:
        """Rollout → score → advantages → policy (and critic) update. Returns the step's metrics.

        A progress bar follows the step: sampled tokens during the rollout, then micro-batches in the update.
        """
        cfg = self.config
        started = time.perf_counter()
        episodes, rewards, rounds = self._play()
        rollout_seconds = time.perf_counter() - started
        kept = self._selected(rewards)
        trained = [episodes[i].tokens for i in kept]
        trained_rewards = [rewards[i] for i in kept]
        if cfg.algorithm == "expert-iteration" and trained and cfg.replay:
            picks = self.rng.choice(len(self.demonstrations), cfg.replay, replace=len(self.demonstrations) < cfg.replay)
            trained += [self.demonstrations[int(i)] for i in picks]
            trained_rewards += [1.0] * cfg.replay
        update_started = time.perf_counter()
        stats: dict[str, float] = {}
        kl = batch = None
        if trained:
            batch = collate(trained, trained_rewards, self.tokenizer.pad_token_id).to(self.device)
            advantages, returns, old_logprobs, ref_logprobs, old_values, kl = self._score(batch)
            stats = self._update(batch, advantages, returns, old_logprobs, ref_logprobs, old_values)
        self.global_step += 1
        update_seconds = time.perf_counter() - update_started
        metrics = self._metrics(episodes, stats, kl, batch)
        groups = len(rewards) // cfg.group_size
        metrics["ppo/trained_episodes"] = float(len(kept))
        metrics["ppo/replayed"] = float(len(trained) - len(kept))
        metrics["pool/rounds"] = float(rounds)
        metrics["pool/informative_fraction"] = len(informative_groups(rewards, cfg.group_size)) / groups
        metrics.update(self._pass_rates(episodes))
        sampled = sum(e.metrics["rollout/model_tokens"] for e in episodes)
        updated = float(batch.attention_mask.sum()) * cfg.ppo_epochs if batch is not None else 0.0
        metrics.update(
            {
                "ppo/rollout_seconds": rollout_seconds,
                "ppo/update_seconds": update_seconds,
                "ppo/step_seconds": time.perf_counter() - started,
                "ppo/rollout_tokens_per_s": sampled / max(rollout_seconds, 1e-9),
                "ppo/update_tokens_per_s": updated / max(update_seconds, 1e-9),
            }
        )
        return metrics

    def _play(self) -> tuple[list[EpisodeResult], list[float], int]:
        """Play rounds of ``prompts_per_step`` groups until ``informative_groups`` of them have differing rewards
        (at most ``max_rounds``; one round when it is 0). Returns the episodes, the rewards the update sees (the
        placebo's shuffled within groups) and the number of rounds. The pool records the true rewards."""
        cfg = self.config
        episodes: list[EpisodeResult] = []
        rewards: list[float] = []
        rounds = cfg.max_rounds if cfg.informative_groups else 1
        for round_ in range(rounds):
            with tqdm(desc=f"step {self.global_step + 1} rollout", unit="tok", leave=False, file=sys.stderr) as bar:
                played = rollout(
                    self.envs,
                    self.generator,
                    cfg.sampling,
                    indices=self.sample_indices(),
                    seed=cfg.seed + self.global_step + 1_000_003 * round_,
                    on_turn=bar.update,
                    policy_version=self.global_step,
                )
            true = [e.reward for e in played]
            for start in range(0, len(played), cfg.group_size):
                self.pool.record(played[start].index, true[start : start + cfg.group_size])
            episodes += played
            rewards += shuffle_within_groups(true, cfg.group_size, self.placebo_rng) if cfg.placebo else true
            if len(informative_groups(rewards, cfg.group_size)) >= cfg.informative_groups:
                return episodes, rewards, round_ + 1
        return episodes, rewards, rounds

    def _pass_rates(self, episodes: Sequence[EpisodeResult]) -> dict[str, float]:
        """The step's pass rate at the sampling temperature (true rewards), overall and by the world's hop count."""
        true = [e.reward for e in episodes]
        out = {"pool/pass_rate": float(np.mean(true))}
        hops = [self.examples[e.index].metadata.get("hops") if e.index is not None else None for e in episodes]
        for h in sorted({h for h in hops if h is not None}):
            out[f"pool/pass_rate_{h}hop"] = float(np.mean([r for r, k in zip(true, hops) if k == h]))
        return out

    def validate(self) -> dict[str, float]:
        """Greedy episodes on the held-out questions (the last ``config.validation`` of the training set), played
        by the policy as it is now: EM, searches and answer rate (``val/...``), and EM by the world's hop count."""
        cfg = self.config
        indices = list(range(len(self.examples) - cfg.validation, len(self.examples)))
        if not indices:
            return {}
        sampling = dataclasses.replace(cfg.sampling, temperature=0.0)
        generator = HFGenerator(self.model, self.tokenizer, sampling, dtype=self.sampling_dtype)
        envs = [self.envs[0].unwrapped.sibling() for _ in range(min(32, len(indices)))]
        results = []
        for start in range(0, len(indices), len(envs)):
            chunk = indices[start : start + len(envs)]
            results += rollout(envs[: len(chunk)], generator, sampling, indices=chunk, seed=cfg.seed)
        for env in envs:
            env.close()
        ems = [r.reward_parts.get("em", 0.0) for r in results]
        metrics = {
            "val/em": float(np.mean(ems)),
            "val/num_searches": float(np.mean([r.metrics["num_searches"] for r in results])),
            "val/answer_rate": float(np.mean([r.info.get("prediction") is not None for r in results])),
        }
        hops = [self.examples[i].metadata.get("hops") for i in indices]
        for h in sorted({h for h in hops if h is not None}):
            metrics[f"val/em_{h}hop"] = float(np.mean([em for em, k in zip(ems, hops) if k == h]))
        return metrics

    def _selected(self, rewards: Sequence[float]) -> list[int]:
        """The episodes (indices, whole groups in order) the update learns from.

        - GRPO with ``drop_uniform_groups``: only groups whose rewards differ. An all-equal group has advantage 0
          everywhere, so it would update on the entropy bonus alone (and dilute the batch's token mean); DAPO drops
          such groups the same way.
        - expert iteration: in each group whose rewards differ, the episodes that earned the group's best reward
          (under EM: the successes on questions the policy does not always solve).
        - otherwise every episode.
        """
        cfg = self.config
        size = cfg.group_size
        if cfg.algorithm == "expert-iteration":
            kept = []
            for g in informative_groups(rewards, size):
                group = rewards[g * size : (g + 1) * size]
                kept += [g * size + i for i, r in enumerate(group) if r == max(group)]
            return kept
        if cfg.algorithm != "grpo" or not cfg.drop_uniform_groups:
            return list(range(len(rewards)))
        return [g * size + i for g in informative_groups(rewards, size) for i in range(size)]

    def _logprobs(self, model: nn.Module, batch: Batch, with_entropy: bool = False):
        cfg = self.config
        with self._autocast():
            return token_logprobs(model, batch, cfg.temperature, cfg.logprob_chunk, with_entropy)

    @torch.no_grad()
    def _score(self, batch: Batch):
        cfg = self.config
        # GRPO with a single update per batch is exactly on-policy: the "old" logprobs equal the ones the update
        # computes, so that forward pass is skipped (PPO and REINFORCE++ still need them for the KL penalty).
        # Expert iteration is fine-tuning: every kept model token has advantage 1 and no ratio to clip.
        on_policy = cfg.ppo_epochs == 1 and cfg.mini_batch_size >= batch.input_ids.shape[0]
        old_logprobs = ref_logprobs = kl = None
        if cfg.algorithm == "expert-iteration":
            if self.reference is not None:
                ref_logprobs = self._chunked(lambda b: self._logprobs(self.reference, b), batch)
            return batch.loss_mask.clone(), None, None, ref_logprobs, None, None
        if not (cfg.algorithm == "grpo" and on_policy):
            old_logprobs = self._chunked(lambda b: self._logprobs(self.model, b), batch)
        if self.reference is not None:
            ref_logprobs = self._chunked(lambda b: self._logprobs(self.reference, b), batch)
            if old_logprobs is not None:
                kl = (old_logprobs - ref_logprobs) * batch.loss_mask
        old_values = returns = None
        if cfg.algorithm == "grpo":
            advantages = grpo_advantages(batch.rewards, cfg.group_size, batch.loss_mask)
        else:
            rewards = token_rewards(batch.rewards, batch.loss_mask, kl, cfg.kl_coef)
            if cfg.algorithm == "ppo":
                with self._autocast():
                    old_values = self._chunked(self.critic, batch).float() * batch.loss_mask
                advantages, returns = gae_advantages(rewards, old_values, batch.loss_mask, cfg.gamma, cfg.lam)
                advantages = masked_whiten(advantages, batch.loss_mask)
            else:
                advantages = reinforce_pp_advantages(rewards, batch.loss_mask, cfg.gamma)
        return advantages, returns, old_logprobs, ref_logprobs, old_values, kl

    def _chunked(self, fn: Callable[[Batch], torch.Tensor], batch: Batch) -> torch.Tensor:
        size, n = self.config.micro_batch_size, batch.input_ids.shape[0]
        return torch.cat([fn(batch.select(slice(i, i + size))) for i in range(0, n, size)])

    def _update(self, batch, advantages, returns, old_logprobs, ref_logprobs, old_values) -> dict[str, float]:
        cfg = self.config
        n = batch.input_ids.shape[0]
        kl_in_loss = cfg.algorithm in ("grpo", "expert-iteration")
        sums: dict[str, float] = {}
        updates = 0
        self.model.train()
        micro_batches = cfg.ppo_epochs * math.ceil(n / cfg.micro_batch_size)
        bar = tqdm(total=micro_batches, desc=f"step {self.global_step + 1} update", leave=False, file=sys.stderr)
        for _ in range(cfg.ppo_epochs):
            order = torch.from_numpy(self.rng.permutation(n))
            for start in range(0, n, cfg.mini_batch_size):
                rows = order[start : start + cfg.mini_batch_size]
                mini_tokens = batch.loss_mask[rows].sum().clamp(min=1)
                self.optimizer.zero_grad(set_to_none=True)
                if self.critic is not None:
                    self.critic_optimizer.zero_grad(set_to_none=True)
                for micro in split_micro_batches(batch, rows, cfg.micro_batch_size):
                    mb = batch.select(micro)
                    # Weight each micro-batch by its share of model tokens: the sum is the mini-batch token mean.
                    weight = mb.loss_mask.sum() / mini_tokens
                    logprobs, entropy = self._logprobs(self.model, mb, with_entropy=True)
                    loss, stats = policy_loss(
                        logprobs,
                        logprobs.detach() if old_logprobs is None else old_logprobs[micro],
                        advantages[micro],
                        mb.loss_mask,
                        cfg.clip_eps,
                        ref_logprobs[micro] if kl_in_loss and ref_logprobs is not None else None,
                        cfg.kl_coef if kl_in_loss else 0.0,
                        entropy,
                        cfg.entropy_coef,
                    )
                    (loss * weight).backward()
                    if self.critic is not None:
                        with self._autocast():
                            values = self.critic(mb).float()
                        v_loss = value_loss(values, old_values[micro], returns[micro], mb.loss_mask, cfg.value_clip)
                        (v_loss * weight).backward()
                        stats["value_loss"] = v_loss.item()
                        stats["explained_variance"] = explained_variance(
                            old_values[micro], returns[micro], mb.loss_mask
                        )
                    for key, value in stats.items():
                        sums[key] = sums.get(key, 0.0) + value * float(weight)
                    bar.update()
                grad_norm = torch.nn.utils.clip_grad_norm_(self.trained, cfg.max_grad_norm)
                sums["grad_norm"] = sums.get("grad_norm", 0.0) + float(grad_norm)
                if torch.isfinite(grad_norm):
                    self.optimizer.step()
                else:  # a non-finite gradient would turn every weight to NaN: skip, and count it in the log
                    sums["skipped_updates"] = sums.get("skipped_updates", 0.0) + 1.0
                    self.optimizer.zero_grad(set_to_none=True)
                if self.critic is not None:
                    torch.nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.max_grad_norm)
                    self.critic_optimizer.step()
                updates += 1
        bar.close()
        return {key: value / updates for key, value in sums.items()}

    def _metrics(self, episodes: Sequence[EpisodeResult], stats: dict[str, float], kl, batch: Batch | None):
        """One log row: the batch's mean episode metrics under their own names (``reward``, ``reward/em``,
        ``num_searches``, ``end_reason/...``, ``rollout/model_tokens``), then this trainer's under ``ppo/``."""
        if kl is not None and batch is not None:
            kl_value = masked_mean(kl, batch.loss_mask).item()
        else:
            kl_value = stats.get("kl_loss", 0.0)
        metrics = {
            "step": self.global_step,
            **aggregate_metrics(e.metrics for e in episodes),
            "ppo/kl": kl_value,
            "ppo/loss": stats.get("pg_loss", math.nan),
            **{f"ppo/{k}": v for k, v in stats.items() if k != "pg_loss"},
        }
        if self.config.curriculum_steps:
            metrics["ppo/max_hops"] = 1 + (self.global_step - 1) // self.config.curriculum_steps
        return metrics

    # -- the loop ---------------------------------------------------------------------------------------
    def train(
        self,
        steps: int | None = None,
        callback: Callable[[dict[str, float]], None] | None = None,
        evaluate: Callable[[Trainer], dict[str, float]] | None = None,
        eval_every: int = 0,
    ) -> list[dict[str, float]]:
        """Run ``steps`` (default ``config.steps``) steps, logging each; ``callback`` sees every step's metrics.

        ``evaluate(trainer)``, when given, returns held-out metrics (``val/...``): they are logged before the first
        step (as step 0), every ``eval_every`` steps and after the last, in that step's row. Checkpoints go to
        ``output_dir`` every ``save_every`` steps and at the end, when ``output_dir`` is set.
        """
        history = []
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        total = self.config.steps if steps is None else steps
        if evaluate is not None:
            self._log(self._keep_best({"step": self.global_step, **evaluate(self)}), history, callback)
        deadline = time.monotonic() + self.config.time_limit if self.config.time_limit else math.inf
        for done in tqdm(range(1, total + 1), desc=f"{self.config.algorithm} steps", unit="step", file=sys.stderr):
            metrics = self.step()
            if time.monotonic() >= deadline and done < total:
                print(f"time limit of {self.config.time_limit:.0f} s reached after step {done}", file=sys.stderr)
                total = done
            if evaluate is not None and (done == total or (eval_every and done % eval_every == 0)):
                metrics.update(evaluate(self))
                self._keep_best(metrics)
            self._log(metrics, history, callback)
            if self.output_dir and self.config.save_every and self.global_step % self.config.save_every == 0:
                self.save(self.output_dir / f"step_{self.global_step}")
            if done == total:
                break
        if self.output_dir:
            self.save(self.output_dir / "final")
        return history

    def _keep_best(self, metrics: dict[str, float]) -> dict[str, float]:
        """With ``keep_best``: save ``output_dir/best`` when validation EM beats every earlier validation (the
        starting weights' included, so a run that never improves selects them), and log ``val/best_em`` and
        ``val/best_step``. The selection reads only the held-out *training* questions, never a test split."""
        em = metrics.get("val/em")
        if not self.config.keep_best or em is None or self.output_dir is None:
            return metrics
        if self.best_em is None or em > self.best_em:
            self.best_em, self.best_step = em, self.global_step
            self.save(self.output_dir / "best")
        metrics["val/best_em"], metrics["val/best_step"] = self.best_em, float(self.best_step)
        return metrics

    def _log(
        self,
        metrics: dict[str, float],
        history: list[dict[str, float]],
        callback: Callable[[dict[str, float]], None] | None,
    ) -> None:
        history.append(metrics)
        line = json.dumps(metrics)
        print(line, file=sys.stdout, flush=True)
        if self.log_path:
            with self.log_path.open("a") as handle:
                handle.write(line + "\n")
        if callback is not None:
            callback(metrics)

    def save(self, path: Path) -> None:
        """Weights, tokenizer and ``searchenv_run.json`` (model, environment, reward and algorithm settings)."""
        settings = {**self.run_settings, "algorithm": self.config.algorithm, "config": asdict(self.config)}
        save_checkpoint(path, self.model, self.tokenizer, settings, step=self.global_step)
