"""The reference trainer's GRPO maths against verl's own core_algos, on random float64 inputs."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer import algos

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
TOL = 1e-6


def _batch(seed: int, bs: int = 24, length: int = 17, group: int = 4):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(bs, length, generator=g, dtype=torch.float64) > 0.25).to(torch.float64)
    mask[3] = 0  # a fully masked response must not count in the seq-mean modes
    mask[:, 0] = torch.where(torch.arange(bs) == 3, 0.0, 1.0).to(torch.float64)
    old = -torch.rand(bs, length, generator=g, dtype=torch.float64) * 4
    new = old + torch.randn(bs, length, generator=g, dtype=torch.float64) * 0.4
    ref = old + torch.randn(bs, length, generator=g, dtype=torch.float64) * 3  # big gaps hit the +-10 clamp
    adv = torch.randn(bs, length, generator=g, dtype=torch.float64) * 2
    rewards = torch.zeros(bs, length, dtype=torch.float64)
    rewards[:, -1] = torch.randint(0, 3, (bs,), generator=g).to(torch.float64) / 2
    index = np.array([f"p{i // group}" for i in range(bs - 1)] + ["lonely"], dtype=object)
    return mask, old, new, ref, adv, rewards, index


def _maxdiff(a, b) -> float:
    diff = torch.as_tensor(a, dtype=torch.float64) - torch.as_tensor(b, dtype=torch.float64)
    return float(diff.detach().abs().max())


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("norm", [True, False])
def test_grpo_advantage_matches_verl(seed, norm):
    mask, *_, rewards, index = _batch(seed)
    ours = algos.grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm)
    theirs, _ = core_algos.compute_grpo_outcome_advantage(rewards.clone(), mask, index,
                                                          norm_adv_by_std_in_grpo=norm)
    assert ours.dtype == torch.float64
    assert _maxdiff(ours, theirs) <= TOL
    assert ours.abs().sum() > 0  # a real signal was compared, not zeros


@pytest.mark.parametrize("mode", algos.LOSS_AGG_MODES)
@pytest.mark.parametrize("dp_info", [{}, {"dp_size": 2, "batch_num_tokens": 500, "global_batch_size": 40,
                                           "loss_scale_factor": 7}])
def test_agg_loss_matches_verl(mode, dp_info):
    mask, old, *_ = _batch(3)
    ours = algos.agg_loss(old, mask, mode, **dp_info)
    theirs = core_algos.agg_loss(old, mask, mode, **dp_info)
    assert _maxdiff(ours, theirs) <= TOL


@pytest.mark.parametrize("mode", algos.LOSS_AGG_MODES)
@pytest.mark.parametrize("clip", [(0.2, 0.2, 0.2, 3.0), (0.2, 0.1, 0.28, 2.0)])
def test_policy_loss_matches_verl(mode, clip):
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    mask, old, new, _, adv, *_ = _batch(4)
    ratio, low, high, c = clip
    cfg = omega_conf_to_dataclass(OmegaConf.create({
        "_target_": "verl.workers.config.ActorConfig", "strategy": "fsdp", "ppo_mini_batch_size": 4,
        "ppo_micro_batch_size_per_gpu": 2, "rollout_n": 1, "clip_ratio": ratio, "clip_ratio_low": low,
        "clip_ratio_high": high, "clip_ratio_c": c, "loss_agg_mode": mode, "use_dynamic_bsz": False}))
    theirs, their_metrics = core_algos.compute_policy_loss_vanilla(old, new, adv, mask, loss_agg_mode=mode,
                                                                   config=cfg)
    ours, our_metrics = algos.policy_loss(old, new, adv, mask, loss_agg_mode=mode, clip_ratio=ratio,
                                          clip_ratio_low=low, clip_ratio_high=high, clip_ratio_c=c)
    assert _maxdiff(ours, theirs) <= TOL
    for key in ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"):
        assert abs(float(our_metrics[key]) - their_metrics[key]) <= TOL, key
    assert float(our_metrics["actor/pg_clipfrac"]) > 0  # the inputs exercise clipping


@pytest.mark.parametrize("kind", list(algos.KL_TYPES) + ["low_var_kl+", "k3+"])
def test_kl_penalty_matches_verl_values_and_gradients(kind):
    _, old, new, ref, *_ = _batch(5)
    ours_in, theirs_in = new.clone().requires_grad_(), new.clone().requires_grad_()
    ours = algos.kl_penalty(ours_in, ref, kind)
    theirs = core_algos.kl_penalty(theirs_in, ref, kind)
    assert _maxdiff(ours, theirs) <= TOL
    ours.sum().backward()
    theirs.sum().backward()
    assert _maxdiff(ours_in.grad, theirs_in.grad) <= TOL
    if kind.startswith("low_var_kl"):
        assert float(ours.detach().max()) == 10.0  # the clamp is exercised


def test_entropy_matches_verl():
    from verl.utils.torch_functional import entropy_from_logits

    logits = torch.randn(6, 9, 50, generator=torch.Generator().manual_seed(6), dtype=torch.float64) * 3
    assert _maxdiff(algos.entropy_from_logits(logits), entropy_from_logits(logits)) <= TOL


def test_unknown_modes_are_refused_by_name():
    mask, old, *_ = _batch(7)
    with pytest.raises(ValueError, match="token-avg"):
        algos.agg_loss(old, mask, "token-avg")
    with pytest.raises(ValueError, match="full"):
        algos.kl_penalty(old, old, "full")
