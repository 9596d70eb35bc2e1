"""Episodes as padded tensors, and what a model says about them: per-token log-probabilities and values.

Log-probabilities and entropies are computed from the final hidden states a chunk of tokens at a time
(:func:`token_logprobs`), so the ``(tokens × vocabulary)`` log-softmax never exists in full, and only at the model's
own tokens (the loss never reads an environment token's). Episodes that share their prompt (a GRPO group) run it
through the model once (:func:`response_hidden`): the prompt is most of an episode's tokens on a small budget, and
the gradient through the shared prompt is the sum over the group, exactly what separate passes would give.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from searchenv.tokenization import TokenizedEpisode

__all__ = ["Batch", "ValueModel", "collate", "split_micro_batches", "token_logprobs"]


@dataclass
class Batch:
    """Episodes as padded tensors: prompts left-padded, responses right-padded, so responses share columns.

    ``input_ids = [prompt | response]``; ``response_mask`` is 1 on real response tokens (model *and* env) and
    ``loss_mask`` is 1 on model tokens only. All response tensors are ``(episodes, response_width)``.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    prompt_width: int
    response_mask: torch.Tensor
    loss_mask: torch.Tensor
    rewards: torch.Tensor  # (episodes,)

    def to(self, device: torch.device | str) -> Batch:
        return Batch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.prompt_width,
            self.response_mask.to(device),
            self.loss_mask.to(device),
            self.rewards.to(device),
        )

    def select(self, rows: Sequence[int] | slice) -> Batch:
        return Batch(
            self.input_ids[rows],
            self.attention_mask[rows],
            self.prompt_width,
            self.response_mask[rows],
            self.loss_mask[rows],
            self.rewards[rows],
        )


def collate(episodes: Sequence[TokenizedEpisode], rewards: Sequence[float], pad_id: int) -> Batch:
    """Pad episodes into a :class:`Batch` (lengths come from the lists, never from comparing ids with ``pad_id``)."""
    p = max(len(e.prompt_ids) for e in episodes)
    r = max(max(len(e.response_ids) for e in episodes), 1)
    ids, attn, resp, loss = [], [], [], []
    for e in episodes:
        left, right = p - len(e.prompt_ids), r - len(e.response_ids)
        ids.append([pad_id] * left + e.prompt_ids + e.response_ids + [pad_id] * right)
        attn.append([0] * left + [1] * (len(e.prompt_ids) + len(e.response_ids)) + [0] * right)
        resp.append([1] * len(e.response_ids) + [0] * right)
        loss.append(list(e.loss_mask) + [0] * right)
    return Batch(
        torch.tensor(ids),
        torch.tensor(attn),
        p,
        torch.tensor(resp, dtype=torch.float32),
        torch.tensor(loss, dtype=torch.float32),
        torch.tensor(list(rewards), dtype=torch.float32),
    )


def split_micro_batches(batch: Batch, rows: torch.Tensor, size: int) -> list[torch.Tensor]:
    """``rows`` of ``batch`` split into micro-batches of ``size`` rows, in the cheaper of two orders: rows that share
    a prompt side by side (a GRPO group; :func:`response_hidden` runs each distinct prompt of a micro-batch once),
    or every row by response length (each micro-batch pads its responses to its longest, and drops the columns all
    its rows pad). The cost counted is the token positions the passes run: rows times the longest response, plus
    each distinct prompt once. A mini-batch's gradient is the sum of its micro-batches', so the order changes no
    result beyond float rounding."""
    width = batch.prompt_width
    lengths = batch.response_mask.sum(-1).long().tolist()
    prompt_of = {}
    for row in rows.tolist():
        prompt_of[row] = tuple(batch.input_ids[row, :width][batch.attention_mask[row, :width].bool()].tolist())
    groups: dict[tuple[int, ...], list[int]] = {}
    for row, prompt in prompt_of.items():
        groups.setdefault(prompt, []).append(row)
    ordered = sorted(groups.values(), key=lambda group: max(lengths[r] for r in group))
    by_group = [row for group in ordered for row in sorted(group, key=lengths.__getitem__)]
    by_length = sorted(prompt_of, key=lambda r: (lengths[r], prompt_of[r]))

    def positions(order: list[int]) -> int:
        parts = [order[i : i + size] for i in range(0, len(order), size)]
        return sum(len(p) * max(lengths[r] for r in p) + sum(map(len, {prompt_of[r] for r in p})) for p in parts)

    order = min(by_group, by_length, key=positions)
    return list(torch.tensor(order, dtype=torch.long).split(size))


def _trimmed(batch: Batch) -> tuple[Batch, int]:
    """``batch`` without the columns that every row pads (the left of the prompts, the right of the responses), and
    how many response columns were cut at the right. Positions count real tokens only, so nothing else changes."""
    first = int(batch.attention_mask[:, : batch.prompt_width].any(0).long().argmax()) if batch.prompt_width else 0
    keep = max(int(batch.response_mask.sum(-1).max()), 1)
    end = batch.prompt_width + keep
    trimmed = Batch(
        batch.input_ids[:, first:end],
        batch.attention_mask[:, first:end],
        batch.prompt_width - first,
        batch.response_mask[:, :keep],
        batch.loss_mask[:, :keep],
        batch.rewards,
    )
    return trimmed, batch.response_mask.shape[1] - keep


def _forward(model: nn.Module, batch: Batch, **kwargs: Any) -> Any:
    # Positions count real tokens only, so a left-padded prompt sees the same positions as during generation.
    positions = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
    return model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=positions, **kwargs)


def response_hidden(decoder: nn.Module, batch: Batch) -> torch.Tensor:
    """The decoder's final hidden state before every response token: ``(episodes, response_width, hidden)``.

    Rows with the same (left-padded) prompt share one pass over it: the prompt runs once per distinct prompt with
    its keys and values kept, those are copied to each row of its group, and the responses run on top. Columns
    that every row pads are left out of the passes (the hidden states there are zeros)."""
    batch, cut = _trimmed(batch)
    return nn.functional.pad(_response_hidden(decoder, batch), (0, 0, 0, cut))


def _response_hidden(decoder: nn.Module, batch: Batch) -> torch.Tensor:
    from searchenv.rollout.kv_cache import cache_keyword, output_cache

    width = batch.prompt_width
    prompts = torch.cat([batch.input_ids[:, :width], batch.attention_mask[:, :width]], dim=1)
    distinct, group = torch.unique(prompts, dim=0, return_inverse=True)
    if len(distinct) == len(prompts):
        return _forward(decoder, batch).last_hidden_state[:, width - 1 : -1]
    from transformers import DynamicCache

    prompt_mask = distinct[:, width:]
    shared = decoder(
        input_ids=distinct[:, :width],
        attention_mask=prompt_mask,
        position_ids=(prompt_mask.cumsum(-1) - 1).clamp(min=0),
        use_cache=True,
    )
    kept = output_cache(shared).layers
    layers = [(layer.keys.index_select(0, group), layer.values.index_select(0, group)) for layer in kept]
    positions = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)
    rest = decoder(
        input_ids=batch.input_ids[:, width:],
        attention_mask=batch.attention_mask,
        position_ids=positions[:, width:],
        use_cache=True,
        **{cache_keyword(decoder): DynamicCache(ddp_cache_data=layers)},
    )
    last_prompt = shared.last_hidden_state.index_select(0, group)[:, -1:]
    return torch.cat([last_prompt, rest.last_hidden_state[:, :-1]], dim=1)


class _HeadLogprobs(torch.autograd.Function):
    """One chunk through the lm head: each position's log-probability of its target and, when asked, the entropy of
    its distribution (logits divided by ``temperature``).

    Between the passes it holds only the chunk's hidden states and log-normalisers, never the ``(positions ×
    vocabulary)`` logits; the backward pass computes the logits once more and writes the gradient of both outputs
    in one sweep over them (d chosen / d z = onehot - p, d entropy / d z = -p (log p + entropy)). Autograd through
    the plain operations would keep several vocabulary-wide tensors, or with activation checkpointing recompute the
    whole forward and then differentiate it op by op: about twice the vocabulary-wide passes. Under autocast the
    head runs in the autocast dtype in both passes, as a plain ``head(hidden)`` would."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature: float, with_entropy: bool):
        logits = nn.functional.linear(hidden, weight, bias)  # under autocast: in its dtype, as ``head(hidden)``
        low = logits.dtype
        logits = _scaled(logits, temperature)
        normaliser = logits.logsumexp(-1)
        chosen = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - normaliser
        entropy = None
        if with_entropy:
            # -Σ p·log p, not log Z - Σ p·logit: the latter subtracts two numbers near log Z (tens) in float32 and
            # was 1e-3 off a float64 reference on SmolLM2 (this form: 6e-5).
            logp = logits.sub_(normaliser.unsqueeze(-1))
            entropy = -(logp.exp() * logp).sum(-1)
        ctx.low, ctx.temperature = low, temperature
        ctx.set_materialize_grads(False)  # an output the loss does not read (the entropy, often) gets no pass
        ctx.save_for_backward(hidden, weight, bias, targets, normaliser, entropy)
        return chosen, entropy if entropy is not None else torch.zeros_like(chosen)

    @staticmethod
    def backward(ctx, grad_chosen, grad_entropy):
        hidden, weight, bias, targets, normaliser, entropy = ctx.saved_tensors
        if entropy is None:
            grad_entropy = None
        if grad_chosen is None and grad_entropy is None:
            return None, None, None, None, None, None
        with torch.autocast(hidden.device.type, enabled=False):
            low = (hidden.to(ctx.low), weight.to(ctx.low), bias.to(ctx.low) if bias is not None else None)
            logp = _scaled(nn.functional.linear(*low), ctx.temperature).sub_(normaliser.unsqueeze(-1))
        scale = torch.zeros_like(normaliser) if grad_chosen is None else grad_chosen
        scale = scale.unsqueeze(-1)
        if grad_entropy is not None:
            scale = scale + grad_entropy.unsqueeze(-1) * (logp + entropy.unsqueeze(-1))
        grad = logp.exp_().mul_(scale).neg_()  # -p (g_chosen + g_entropy (log p + entropy))
        if grad_chosen is not None:
            grad.scatter_add_(-1, targets.unsqueeze(-1), grad_chosen.unsqueeze(-1))
        if ctx.temperature not in (0, 1):
            grad = grad.div_(ctx.temperature)
        grad = grad.to(ctx.low)
        grad_hidden = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_hidden = (grad @ low[1]).to(hidden.dtype)
        if ctx.needs_input_grad[1]:
            grad_weight = (grad.t() @ low[0]).to(weight.dtype)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad.sum(0).to(bias.dtype)
        return grad_hidden, grad_weight, grad_bias, None, None, None


def _scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """float32 logits divided by the sampling temperature (0 and 1 leave them as they are)."""
    logits = logits.float()
    return logits.div_(temperature) if temperature not in (0, 1) else logits


def token_logprobs(
    model: nn.Module, batch: Batch, temperature: float = 1.0, chunk: int = 1024, with_entropy: bool = False
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of every model token of the responses under ``model``: ``(episodes, response_width)``, 0 at
    environment tokens and padding.

    Logits are divided by the sampling temperature so ratios compare the distribution actually sampled from.
    The lm head runs on ``chunk`` response positions at a time and each chunk keeps only the chosen token's
    log-probability and the log-sum-exp (plus the entropy when ``with_entropy``); under autograd the backward pass
    computes each chunk's logits again (:class:`_HeadLogprobs`), so neither pass holds more than ``chunk ×
    vocabulary`` logits.
    """
    width = batch.input_ids.shape[1] - batch.prompt_width
    # The decoder body alone returns only its final (normed) hidden states; the lm head is applied below in chunks,
    # at the model's own tokens only (environment positions stay 0: every loss reads them through the mask).
    hidden = response_hidden(model.get_decoder(), batch)
    targets = batch.input_ids[:, batch.prompt_width :]
    rows = hidden.shape[0]
    at = batch.loss_mask.reshape(-1).nonzero().flatten()
    flat_hidden, flat_targets = hidden.reshape(rows * width, -1).index_select(0, at), targets.reshape(-1)[at]
    head = model.get_output_embeddings()
    chosen, entropy = [], []
    for start in range(0, flat_targets.shape[0], chunk):
        part = (flat_hidden[start : start + chunk], head.weight, head.bias, flat_targets[start : start + chunk])
        lp, ent = _HeadLogprobs.apply(*part, temperature, with_entropy)
        chosen.append(lp)
        entropy.append(ent)

    def spread(values: list[torch.Tensor]) -> torch.Tensor:
        flat = torch.cat(values) if values else hidden.new_zeros(0, dtype=torch.float32)
        return torch.zeros(rows * width, dtype=flat.dtype, device=flat.device).index_copy(0, at, flat).view(rows, width)

    if with_entropy:
        return spread(chosen), spread(entropy)
    return spread(chosen)


class ValueModel(nn.Module):
    """The PPO critic: a copy of the policy's transformer body with a scalar head, trained at its own lr."""

    def __init__(self, policy: nn.Module):
        super().__init__()
        self.body = copy.deepcopy(policy.get_decoder() if hasattr(policy, "get_decoder") else policy.model)
        self.head = nn.Linear(policy.config.hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, batch: Batch) -> torch.Tensor:
        """Value of the state before each response token: ``(episodes, response_width)``."""
        return self.head(response_hidden(self.body, batch).float()).squeeze(-1)
