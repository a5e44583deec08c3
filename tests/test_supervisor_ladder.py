"""The downshift ladder (knowledge/downshift.toml through supervisor/downshift.py) and override editing."""
from __future__ import annotations

import pytest

from supervisor import downshift
from supervisor.overrides import override_delta, parse_overrides, set_override

A = "actor_rollout_ref."
SEED = {  # the seed article's memory knobs plus verl 0.9.1 defaults for the rest
    "data.train_batch_size": 128, "data.max_prompt_length": 512, "data.max_response_length": 1024,
    A + "rollout.n": 4, A + "actor.ppo_mini_batch_size": 32, A + "actor.optim.lr": 1e-6,
    A + "actor.ppo_micro_batch_size_per_gpu": 4, A + "model.enable_gradient_checkpointing": True,
    A + "actor.fsdp_config.param_offload": False, A + "actor.fsdp_config.optimizer_offload": False,
    A + "actor.use_dynamic_bsz": False, A + "actor.ppo_max_token_len_per_gpu": 16384,
    A + "rollout.log_prob_use_dynamic_bsz": False, A + "rollout.log_prob_max_token_len_per_gpu": 16384,
    A + "ref.log_prob_use_dynamic_bsz": False, A + "ref.log_prob_max_token_len_per_gpu": 16384,
    A + "rollout.log_prob_micro_batch_size_per_gpu": 4, A + "ref.log_prob_micro_batch_size_per_gpu": 4,
    A + "ref.fsdp_config.param_offload": True, A + "rollout.gpu_memory_utilization": 0.6,
    A + "rollout.enforce_eager": False,
}


def walk(phase: str, engine: str = "verl", config=None, limit: int = 50):
    """Apply the ladder until it is exhausted; return the sequence of changes."""
    cfg = dict(config or SEED)
    steps = []
    for _ in range(limit):
        shift = downshift.next_downshift(phase, cfg, engine)
        if not shift:
            return steps, cfg
        for k, (_old, new) in shift.changes.items():
            cfg[k] = new
        steps.append(shift.changes)
    raise AssertionError(f"ladder for {phase} does not end")


def test_ladder_data_is_complete_and_sourced():
    frozen = set(downshift.policy()["frozen"])
    table = downshift.policy()["on_failure"]
    assert set(table) == {"imports", "versions", "network", "workdir", "memory", "config", "data",
                          "cluster", "other", "unknown"}
    for phase in downshift.PHASES:
        rungs = downshift.ladder(phase)
        assert rungs, f"no ladder for phase {phase}"
        for r in rungs:
            assert r.reason and r.source, r
            assert not frozen & set(r.keys), r
            assert set(r.engines) <= {"verl", "reference"}, r
            assert r.action in ("halve", "enable", "step"), r


@pytest.mark.parametrize("phase", downshift.PHASES)
def test_every_ladder_ends_and_never_moves_the_algorithm(phase):
    steps, final = walk(phase)
    assert steps, f"the seed config cannot be downshifted in {phase}"
    for key in downshift.policy()["frozen"]:
        assert final[key] == SEED[key]


def test_update_ladder_order_on_the_seed_config():
    steps, final = walk("update")
    micro = A + "actor.ppo_micro_batch_size_per_gpu"
    assert steps[0] == {micro: (4, 2)}
    assert steps[1] == {micro: (2, 1)}
    # gradient checkpointing is already on in the seed script: the next rung is offload
    assert steps[2] == {A + "actor.fsdp_config.param_offload": (False, True)}
    assert steps[3] == {A + "actor.fsdp_config.optimizer_offload": (False, True)}
    assert steps[4][A + "actor.use_dynamic_bsz"] == (False, True)
    # then the token budget halves down to one prompt + response (512 + 1024)
    budgets = [s[A + "actor.ppo_max_token_len_per_gpu"][1] for s in steps[5:]]
    assert budgets == [8192, 4096, 2048, 1536]


def test_each_phase_moves_its_own_micro_batch():
    for phase, key in (("log_prob", "rollout.log_prob_micro_batch_size_per_gpu"),
                       ("ref_log_prob", "ref.log_prob_micro_batch_size_per_gpu")):
        shift = downshift.next_downshift(phase, SEED, "verl")
        assert shift.changes == {A + key: (4, 2)}


def test_rollout_memory_moves_the_way_the_phase_needs():
    gmu = A + "rollout.gpu_memory_utilization"
    up, cfg = walk("rollout_init")
    assert [s[gmu][1] for s in up] == [0.7, 0.8, 0.9]  # the KV cache needs a larger share, <= 0.9
    down, _ = walk("weight_sync")
    assert [s[gmu][1] for s in down if gmu in s] == [0.5, 0.4, 0.3]  # room for weights, >= 0.3


def test_the_estimate_skips_rungs_that_cannot_fit():
    micro = A + "actor.ppo_micro_batch_size_per_gpu"
    cfg = dict(SEED, **{micro: 16})
    shift = downshift.next_downshift("update", cfg, "verl", fits=lambda c: c[micro] <= 2)
    assert shift.changes == {micro: (16, 2)}
    assert len(shift.skipped) == 2  # 8 and 4 were estimated not to fit
    # an estimate that never fits does not spend the run: only the first rung is taken
    shift = downshift.next_downshift("update", cfg, "verl", fits=lambda c: False)
    assert shift.changes == {micro: (16, 8)}


def test_reference_engine_gets_only_its_knobs():
    cfg = dict(SEED, **{A + "model.enable_gradient_checkpointing": False})
    steps, _ = walk("update", engine="reference", config=cfg)
    keys = [k for s in steps for k in s]
    assert keys == [A + "actor.ppo_micro_batch_size_per_gpu"] * 2 + [A + "model.enable_gradient_checkpointing"]
    none = downshift.next_downshift("update", cfg, "reference", supported=lambda k: "micro" not in k)
    assert list(none.changes) == [A + "model.enable_gradient_checkpointing"]


def test_null_knobs_are_not_in_use():
    cfg = dict(SEED, **{A + "ref.log_prob_micro_batch_size_per_gpu": None})
    shift = downshift.next_downshift("ref_log_prob", cfg, "verl")
    assert A + "ref.log_prob_micro_batch_size_per_gpu" not in shift.changes


def test_failure_policy():
    assert downshift.action_for("memory") == "downshift"
    assert downshift.action_for("cluster") == downshift.action_for("network") == "wait_retry"
    for cat in ("config", "data", "imports", "versions", "workdir"):
        assert downshift.action_for(cat) == "stop"
    assert downshift.action_for(None) == "retry_once"


def test_set_override_rewrites_in_place_and_keeps_the_prefix():
    base = ["data.train_batch_size=128", "+data.source=gsm8k", "trainer.logger=['console']"]
    out = set_override(base, "data.source", "math")
    assert out == ["data.train_batch_size=128", "+data.source=math", "trainer.logger=['console']"]
    out = set_override(out, A + "actor.ppo_micro_batch_size_per_gpu", 2)
    assert out[-1] == A + "actor.ppo_micro_batch_size_per_gpu=2"
    assert parse_overrides(out).get(A + "actor.ppo_micro_batch_size_per_gpu") == 2
    out = set_override(out, A + "model.enable_gradient_checkpointing", True)
    assert out[-1].endswith("enable_gradient_checkpointing=true")
    assert override_delta(base, out) == ["data.source=math", A + "actor.ppo_micro_batch_size_per_gpu=2",
                                         A + "model.enable_gradient_checkpointing=true"]


def test_rule_exceptions_name_real_rules():
    from matching.catalog import rule_by_id

    for rule_id, action in downshift.policy()["by_rule"].items():
        assert action in ("downshift", "wait_retry", "retry_once", "stop")
        rule = rule_by_id(rule_id)
        assert rule is not None, f"downshift.toml names unknown rule {rule_id}"
        assert downshift.action_for(rule.category, rule_id) == action
    assert downshift.action_for("network", "nccl-watchdog-timeout") == "wait_retry"
