"""Memory estimate: parts against values computed by hand for Qwen2-0.5B-Instruct's config (the seed
article's model), the device table, and `doctor check` failing/warning on a real model directory."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from checks.memory import lookup_device, parse_size
from checks.plan import memory_estimate, model_shape
from checks.verl_config import compose_snapshot
from trainer.tiny import ensure_tiny

# Qwen2-0.5B-Instruct config.json (the fields the estimate reads)
QWEN2_05B = {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "num_hidden_layers": 24,
             "num_attention_heads": 14, "num_key_value_heads": 2, "intermediate_size": 4864,
             "tie_word_embeddings": True}
GiB = 2**30

SEED = [  # the seed article's memory-relevant settings, two nodes of 8 910B3
    "data.max_prompt_length=512", "data.max_response_length=1024", "data.train_batch_size=128",
    "actor_rollout_ref.actor.ppo_mini_batch_size=32", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4", "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.6", "actor_rollout_ref.rollout.n=4",
    "trainer.n_gpus_per_node=8", "trainer.nnodes=2",
]


def test_parameter_count_of_qwen2_05b():
    # embeddings 151936*896 = 136,134,656 (tied lm_head)
    # one layer: q 896*896+896, k and v 2*(896*128+128), o 896*896, MLP 3*896*4864, 2 norms 2*896
    #   = 803,712 + 229,632 + 802,816 + 13,074,432 + 1,792 = 14,912,384; 24 layers = 357,897,216
    # final norm 896 -> 494,032,768 (the published size is 0.49 B)
    assert model_shape(QWEN2_05B).params == 494_032_768


def test_estimate_parts_by_hand():
    cfg = compose_snapshot(SEED).flat
    est = memory_estimate(cfg, QWEN2_05B, 64 * GiB)
    P, shards = 494_032_768, 16
    update = est.phases["update"]
    assert update["actor params"] == P * 4 // shards == 123_508_192   # fp32 master weights
    assert update["gradients"] == P * 4 // shards
    assert update["optimizer"] == P * 8 // shards == 247_016_384      # Adam m and v, fp32
    assert update["gather buffer"] == 2 * 136_134_656 * 2                # two bf16 embedding-sized units
    tokens = 4 * (512 + 1024)                                            # micro 4 x sequence 1536
    per_token_layer = 2 * (6 * 896 + 2 * 128 + 4 * 4864)                 # 50,176 bytes
    assert update["activations"] == 24 * tokens * 896 * 2 + tokens * per_token_layer  # checkpointing on
    assert update["logits"] == tokens * 151936 * 11
    assert "ref params" not in update                                   # ref param_offload=True
    assert est.phases["generate"]["rollout"] == int(0.6 * 64 * GiB)
    assert est.phases["weight_sync"]["weight bucket"] == 2 * P            # bf16 copy under the 2 GiB bucket
    assert est.peak_phase == "weight_sync" and est.fits
    assert est.total == int(0.6 * 64 * GiB) + 123_508_192 + 247_016_384 + 2 * P


def test_checkpointing_offload_and_kl_change_the_right_parts():
    base = memory_estimate(compose_snapshot(SEED).flat, QWEN2_05B, 64 * GiB)
    no_ckpt = memory_estimate(compose_snapshot(SEED + ["actor_rollout_ref.model.enable_gradient_checkpointing=False"]).flat,
                              QWEN2_05B, 64 * GiB)
    assert no_ckpt.phases["update"]["activations"] == 24 * 6144 * 50176
    assert no_ckpt.phases["update"]["activations"] > base.phases["update"]["activations"]
    off = memory_estimate(compose_snapshot(SEED + ["actor_rollout_ref.actor.fsdp_config.optimizer_offload=True"]).flat,
                          QWEN2_05B, 64 * GiB)
    assert "optimizer" not in off.phases["generate"] and off.phases["update"]["optimizer"] > 0
    ref_on = memory_estimate(compose_snapshot(SEED + ["actor_rollout_ref.ref.fsdp_config.param_offload=False"]).flat,
                             QWEN2_05B, 64 * GiB)
    assert ref_on.phases["update"]["ref params"] == 494_032_768 * 4 // 16


def test_suggestions_bring_it_under_in_order():
    cfg = compose_snapshot(SEED + ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64",
                                   "trainer.nnodes=1", "trainer.n_gpus_per_node=1"]).flat
    est = memory_estimate(cfg, QWEN2_05B, 32 * GiB)
    assert est.fits is False and est.peak_phase == "update"
    assert list(est.parts)[0] == "logits"  # micro 64 x 1536 tokens x 151936 vocab dominates
    assert est.suggestions
    for s in est.suggestions:
        changed = {**cfg, **{k: v[1] for k, v in s["changes"].items()}}
        assert memory_estimate(changed, QWEN2_05B, 32 * GiB).fits
    # log-prob micro batches come first in knob order but do not touch the update peak: not offered
    assert est.suggestions[0]["overrides"][0].startswith("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=")


@pytest.mark.parametrize("name, gib", [("910B3", 64), ("Ascend910B4", 32), ("910B4-1", 64), ("NVIDIA H100 80GB HBM3", 80),
                                       ("Ascend910", 64)])
def test_device_table(name, gib):
    assert lookup_device(name)["memory_gib"] == gib


def test_sizes():
    assert parse_size("64GiB") == parse_size("64GB") == 64 * GiB
    assert parse_size("65536MiB") == 64 * GiB
    with pytest.raises(ValueError):
        parse_size("lots")


def _check(doctor, tmp_path, *overrides, memory="8GiB"):
    model = ensure_tiny() / "model"
    script = tmp_path / "run.sh"
    script.write_text("python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=" + str(model) + " "
                      + " ".join(overrides) + "\n")
    r = doctor("check", "--json", "--only", "memory", "--timeout", "300", "--device-memory", memory,
               "--", "bash", str(script), timeout=600)
    assert r.returncode in (0, 1), r.stderr
    return next(f for f in json.loads(r.stdout)["findings"] if f["id"] == "memory.estimate")


def test_check_fails_above_capacity_and_names_the_knobs(doctor, tmp_path):
    f = _check(doctor, tmp_path, "data.max_response_length=8192", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64",
               "trainer.n_gpus_per_node=1", memory="2GiB")
    assert f["status"] == "fail"
    assert "top: activations" in f["message"]  # tiny vocab (320): activations, not logits, lead
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=" in f["fix"]


def test_check_warns_above_90_percent(doctor, tmp_path):
    # the rollout share alone is 0.92 of the device
    f = _check(doctor, tmp_path, "actor_rollout_ref.rollout.gpu_memory_utilization=0.92", "trainer.n_gpus_per_node=1")
    assert f["status"] == "warn" and "gpu_memory_utilization" in f["fix"]


def test_check_passes_with_room(doctor, tmp_path):
    assert _check(doctor, tmp_path, "trainer.n_gpus_per_node=1")["status"] == "pass"
