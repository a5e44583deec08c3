"""GRPO's maths as verl 0.9 defines it (`verl.trainer.ppo.core_algos`), in the same terms.

Every function here is checked against verl's own on random float64 inputs
(tests/test_trainer_algos.py), so a number printed by this trainer means what it means in verl.
"""
from __future__ import annotations

import torch

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                  "seq-mean-token-sum-norm")
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


def masked_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum()


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return masked_sum(values, mask) / (mask.sum() + 1e-8)


def grpo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index,
                           epsilon: float = 1e-6, norm_adv_by_std_in_grpo: bool = True) -> torch.Tensor:
    """Each response's score minus its group's mean, over the group's (unbiased) std + epsilon.

    A group of one gets mean 0 and std 1, as in verl. Returns (bs, response_length)."""
    scores = token_level_rewards.sum(dim=-1)
    groups: dict = {}
    for i, key in enumerate(index):
        groups.setdefault(key, []).append(i)
    mean = torch.zeros_like(scores)
    std = torch.ones_like(scores)
    for members in groups.values():
        if len(members) > 1:
            group = scores[members]
            mean[members] = group.mean()
            std[members] = group.std()
    adv = (scores - mean) / (std + epsilon) if norm_adv_by_std_in_grpo else scores - mean
    return adv.unsqueeze(-1) * response_mask


def agg_loss(loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str, dp_size: int = 1,
             batch_num_tokens=None, global_batch_size=None, loss_scale_factor=None) -> torch.Tensor:
    """Reduce a (bs, len) loss to a scalar so that, summed over micro batches and averaged over
    data-parallel ranks, it equals the mode's mean over the whole mini batch.

    `batch_num_tokens` / `global_batch_size` are the mini batch's totals over all ranks."""
    if loss_agg_mode == "token-mean":
        if batch_num_tokens is None:
            if dp_size > 1:
                raise ValueError("(global) batch_num_tokens is required when dp_size > 1")
            batch_num_tokens = loss_mask.sum()
        return masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, loss_mask) * dp_size
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean"):
        tokens_per_seq = loss_mask.sum(dim=-1)
        seq_losses = (loss_mat * loss_mask).sum(dim=-1)
        if loss_agg_mode == "seq-mean-token-mean":
            seq_losses = seq_losses / (tokens_per_seq + 1e-8)
        seq_mask = (tokens_per_seq > 0).to(loss_mat.dtype)  # fully masked sequences do not count
        if global_batch_size is None:
            if dp_size > 1:
                raise ValueError("global_batch_size is required when dp_size > 1")
            global_batch_size = seq_mask.sum()
        loss = masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size
        if loss_agg_mode == "seq-mean-token-sum-norm":
            loss = loss / (loss_scale_factor if loss_scale_factor is not None else loss_mask.shape[-1])
        return loss
    raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode}")


def policy_loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", clip_ratio: float = 0.2,
                clip_ratio_low: float | None = None, clip_ratio_high: float | None = None,
                clip_ratio_c: float = 3.0, **global_batch_info) -> tuple[torch.Tensor, dict]:
    """PPO's clipped objective with dual clip for negative advantages (verl's "vanilla" loss mode)."""
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be greater than 1.0, got {clip_ratio_c}")
    low = clip_ratio if clip_ratio_low is None else clip_ratio_low
    high = clip_ratio if clip_ratio_high is None else clip_ratio_high
    neg_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(neg_kl)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    clip_loss = torch.maximum(unclipped, clipped)
    dual = -advantages * clip_ratio_c
    losses = torch.where(advantages < 0, torch.min(dual, clip_loss), clip_loss)
    loss = agg_loss(losses, response_mask, loss_agg_mode, **global_batch_info)
    metrics = {
        "actor/pg_clipfrac": masked_mean(torch.gt(clipped, unclipped).to(losses.dtype), response_mask),
        "actor/ppo_kl": masked_mean(-neg_kl, response_mask),
        "actor/pg_clipfrac_lower": masked_mean(
            (torch.gt(clip_loss, dual) & (advantages < 0)).to(losses.dtype), response_mask),
    }
    return loss, {k: v.detach() for k, v in metrics.items()}


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference (Schulman's k1/k2/k3).

    A trailing "+" (e.g. "low_var_kl+") keeps the estimate's value but takes k2's gradient."""
    base = kind[:-1] if kind.endswith("+") else kind
    value = _kl_forward(log_prob, ref_log_prob, base)
    if not kind.endswith("+") or base in ("mse", "k2"):
        return value
    k2 = 0.5 * (log_prob - ref_log_prob).square()
    return k2 - k2.detach() + value.detach()


def _kl_forward(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kind: str) -> torch.Tensor:
    if kind in ("kl", "k1"):
        return log_prob - ref_log_prob
    if kind == "abs":
        return (log_prob - ref_log_prob).abs()
    if kind in ("mse", "k2"):
        return 0.5 * (log_prob - ref_log_prob).square()
    if kind in ("low_var_kl", "k3"):
        log_ratio = torch.clamp(ref_log_prob - log_prob, min=-20, max=20)
        return torch.clamp(torch.exp(log_ratio) - log_ratio - 1, min=-10, max=10)
    raise ValueError(f"unsupported kl type {kind!r} (the reference trainer has {', '.join(KL_TYPES)})")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical distribution over the last dimension."""
    pd = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (pd * logits).sum(dim=-1)


def log_probs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p(label) per position, without materialising a full log-softmax copy."""
    picked = torch.gather(logits, -1, labels.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def log_probs_and_entropy(logits: torch.Tensor, labels: torch.Tensor, entropy_grad: bool = True):
    """`log_probs_from_logits` and `entropy_from_logits` (the same numbers) from one logsumexp;
    the entropy carries no graph unless entropy_grad (it is only logged when its coefficient is 0)."""
    lse = torch.logsumexp(logits, dim=-1)
    log_prob = torch.gather(logits, -1, labels.unsqueeze(-1)).squeeze(-1) - lse
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropy = lse - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)
    return log_prob, entropy
