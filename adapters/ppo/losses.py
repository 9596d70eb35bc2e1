"""The algorithms' maths, as pure functions of tensors: per-token rewards, advantages (one function per
algorithm), the clipped policy loss with its KL and entropy terms, the critic's loss and diagnostics.

Masking (SPEC §2): every per-token quantity — the policy loss, the KL term or penalty, the value loss, the
advantage normalisation statistics — is taken over ``loss_mask == 1`` tokens only.
"""

from __future__ import annotations

import torch

__all__ = [
    "explained_variance",
    "gae_advantages",
    "grpo_advantages",
    "kl_k3",
    "masked_mean",
    "masked_whiten",
    "policy_loss",
    "reinforce_pp_advantages",
    "token_rewards",
    "value_loss",
]


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return (x - mean) * torch.rsqrt(var + eps) * mask


def token_rewards(rewards: torch.Tensor, loss_mask: torch.Tensor, kl: torch.Tensor | None, kl_coef: float):
    """Per-token rewards: ``-β·KL`` at every model token, plus the episode reward at the last model token."""
    last = (loss_mask * torch.arange(loss_mask.shape[1], device=loss_mask.device)).argmax(-1)
    per_token = torch.zeros_like(loss_mask)
    if kl is not None and kl_coef:
        per_token = -kl_coef * kl * loss_mask
    has_model_token = loss_mask.sum(-1) > 0
    rows = torch.arange(len(rewards), device=rewards.device)[has_model_token]
    per_token[rows, last[has_model_token]] += rewards[has_model_token]
    return per_token


def gae_advantages(
    per_token_rewards: torch.Tensor, values: torch.Tensor, loss_mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over model tokens only: environment tokens are skipped, as if the env's text were part of the state.

    Returns ``(advantages, returns)``, both zero outside the mask.
    """
    advantages = torch.zeros_like(values)
    for row in range(values.shape[0]):
        positions = loss_mask[row].nonzero().flatten().tolist()
        running, next_value = 0.0, 0.0
        for t in reversed(positions):
            delta = per_token_rewards[row, t] + gamma * next_value - values[row, t]
            running = delta + gamma * lam * running
            advantages[row, t] = running
            next_value = values[row, t]
    returns = (advantages + values) * loss_mask
    return advantages, returns


def grpo_advantages(rewards: torch.Tensor, group_size: int, loss_mask: torch.Tensor, eps: float = 1e-6):
    """Reward minus its group's mean, over the group's standard deviation, on every model token.

    Episodes are laid out group by group (``group_size`` consecutive episodes share a prompt).
    """
    grouped = rewards.view(-1, group_size)
    scores = (grouped - grouped.mean(-1, keepdim=True)) / (grouped.std(-1, keepdim=True) + eps)
    return scores.view(-1, 1) * loss_mask


def reinforce_pp_advantages(per_token_rewards: torch.Tensor, loss_mask: torch.Tensor, gamma: float):
    """REINFORCE++: discounted return-to-go of the KL-penalised token rewards, whitened over the whole batch."""
    returns = torch.zeros_like(per_token_rewards)
    running = torch.zeros(per_token_rewards.shape[0], device=per_token_rewards.device)
    for t in reversed(range(per_token_rewards.shape[1])):
        running = per_token_rewards[:, t] + gamma * running * (loss_mask[:, t] > 0) + running * (loss_mask[:, t] == 0)
        returns[:, t] = running
    return masked_whiten(returns, loss_mask)


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token KL(π‖π_ref) estimate ``exp(r) - r - 1`` with ``r = ref - logπ`` (non-negative, low variance)."""
    log_ratio = (ref_logprobs - logprobs).clamp(-20, 20)
    return log_ratio.exp() - log_ratio - 1


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    clip_eps: float,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate, plus an optional KL loss to the reference and minus an optional entropy bonus,
    averaged over model tokens.

    Environment tokens (``loss_mask == 0``) contribute nothing: their ratios, advantages, KL and entropy are
    multiplied by zero before the sum, so neither their values nor their log-probabilities reach the gradient.
    Stats: ``pg_loss`` (the surrogate alone), ``clipfrac``, ``approx_kl`` (k3 estimate of KL(old‖new), as CleanRL
    logs it), ``kl_loss`` and ``entropy`` when those terms are given.
    """
    log_ratio = (logprobs - old_logprobs).clamp(-20, 20)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip_eps, 1 + clip_eps)
    per_token = torch.where(loss_mask > 0, torch.maximum(unclipped, clipped), torch.zeros_like(unclipped))
    stats = {
        "clipfrac": masked_mean((clipped > unclipped).float(), loss_mask).item(),
        "approx_kl": masked_mean((ratio - 1) - log_ratio, loss_mask).item(),
        "pg_loss": masked_mean(per_token, loss_mask).item(),
    }
    if ref_logprobs is not None and kl_coef:
        kl = kl_k3(logprobs, ref_logprobs)
        per_token = per_token + kl_coef * torch.where(loss_mask > 0, kl, torch.zeros_like(kl))
        stats["kl_loss"] = masked_mean(kl, loss_mask).item()
    if entropy is not None:
        stats["entropy"] = masked_mean(entropy, loss_mask).item()
        if entropy_coef:
            per_token = per_token - entropy_coef * torch.where(loss_mask > 0, entropy, torch.zeros_like(entropy))
    return masked_mean(per_token, loss_mask), stats


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """``1 - Var(returns - values) / Var(returns)`` over model tokens: 1 is a perfect critic, <= 0 a useless one."""
    var_returns = masked_mean((returns - masked_mean(returns, mask)) ** 2, mask)
    residual = returns - values
    var_residual = masked_mean((residual - masked_mean(residual, mask)) ** 2, mask)
    return float("nan") if var_returns.item() == 0 else (1 - var_residual / var_returns).item()


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, clip: float):
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    return 0.5 * masked_mean(torch.maximum((values - returns) ** 2, (clipped - returns) ** 2), mask)
