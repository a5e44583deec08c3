"""`doctor check` on real launch scripts: keys, verl's start-up validation, late-found settings.

The launch's `python` resolves (through PATH) to this venv's interpreter, which has verl 0.9.1:
doctor composes verl's own packaged config there, in its probe subprocess."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from checks.config import late_problems, startup_problems
from checks.verl_config import compose_snapshot
from tests import seed_launch

VENV_BIN = str(Path(sys.executable).parent)
ENV = {"PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", "")}

GOOD = [
    "algorithm.adv_estimator=grpo", "data.train_batch_size=16", "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2", "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2", "trainer.n_gpus_per_node=8",
]


def write_script(tmp_path: Path, overrides: list[str]) -> Path:
    body = " \\\n    ".join(overrides)
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/bash\nset -x\n# a comment\npython -m verl.trainer.main_ppo \\\n    {body} $@\n")
    return script


def check_json(doctor, script: Path, *extra: str, only: str = "config") -> dict:
    r = doctor("check", "--json", "--only", only, "--timeout", "300", *extra, "--", "bash", str(script),
               env=ENV, timeout=600)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def by_id(doc: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for f in doc["findings"]:
        out.setdefault(f["id"], []).append(f)
    return out


def seed_script(tmp_path: Path) -> Path:
    """The seed article's own launch script, plus its section 4.3 custom_reward_function.path line."""
    at = seed_launch.OVERRIDES.index("trainer.critic_warmup=0") + 1
    overrides = seed_launch.OVERRIDES[:at] + seed_launch.REWARD_OVERRIDES + seed_launch.OVERRIDES[at:]
    return seed_launch.write_script(tmp_path / "run_grpo.sh", overrides)


def test_seed_script_reports_the_ignored_reward_key_and_the_key_that_works(doctor, tmp_path):
    doc = check_json(doctor, seed_script(tmp_path))
    ignored = {f["title"]: f for f in by_id(doc)["config.ignored_key"]}
    f = ignored["verl 0.9.1 ignores custom_reward_function.path"]
    assert f["fix"] == "write reward.custom_reward_function.path=./reward.py"
    assert "assuming" not in f["message"]  # verl's version came from the target interpreter
    # the rest of the seed script is a known-good configuration for verl's start-up checks
    assert all(f["status"] == "pass" for f in by_id(doc)["config.validate"])


def test_every_rejected_override_is_reported_with_hydras_words(doctor, tmp_path):
    script = write_script(tmp_path, GOOD + ["trainer.n_gpu_per_node=8", "+trainer.nnodes=2",
                                            "ray_kwargs.ray_init.num_gpus=1",
                                            "actor.ppo_micro_batch_size_per_gpu=2"])
    found = by_id(check_json(doctor, script))
    unknown = found["config.unknown_key"]
    assert any("did you mean trainer.n_gpus_per_node? write trainer.n_gpus_per_node=8" in f["fix"] for f in unknown)
    assert any("did you mean actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in f["fix"] for f in unknown)
    plus = found["config.plus_on_existing"][0]
    assert "Could not append to config. An item is already at 'trainer.nnodes'." in plus["message"]
    assert plus["fix"] == "trainer.nnodes already exists: write trainer.nnodes=2"
    assert any("+ray_kwargs.ray_init.num_gpus=1" in f["fix"] for f in found["config.unknown_key"]
               + found.get("config.missing_plus", []))
    assert all("Could not override" in f["message"] for f in found["config.unknown_key"])


def test_verl_startup_rejection_is_reported_in_verls_words(doctor, tmp_path):
    script = write_script(tmp_path, GOOD + ["data.train_batch_size=3", "actor_rollout_ref.actor.ppo_mini_batch_size=2"])
    f = by_id(check_json(doctor, script))["config.train_batch_divisible"][0]
    assert f["status"] == "fail"
    assert "real_train_batch_size (12) must be divisible by minimal possible batch size (8)" in f["message"]
    assert "data.train_batch_size=4" in f["fix"]


def test_late_found_settings(doctor, tmp_path):
    script = write_script(tmp_path, GOOD + [
        "actor_rollout_ref.rollout.tensor_model_parallel_size=3",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",
        "trainer.device=cpu"])
    found = by_id(check_json(doctor, script))
    assert "rollout world_size: 8 is not divisible by infer_world_size: 3" in found["config.rollout_tp"][0]["message"]
    # 8 prompts * 4 samples over 8 ranks = 4 per device: a micro batch of 3 does not split it
    assert found["config.micro_split"][0]["fix"].endswith("ppo_micro_batch_size_per_gpu=2")
    assert found["config.resume_nothing"][0]["status"] == "warn"
    assert found["config.rewritten"][0]["title"] == "verl rewrites trainer.device=cpu"
    # this venv has no flash_attn and no torch_npu: verl's default flash_attention_2 would fail to load
    assert "sdpa" in found["config.flash_attn"][0]["fix"]


def test_sdpa_and_enough_cpus_clear_those_findings():
    cfg = compose_snapshot(GOOD + ["+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
                                   "ray_kwargs.ray_init.num_cpus=16", "trainer.save_freq=10"]).config
    ids = {p.id for p in late_problems(cfg, devices_per_node=8, cpus=2, flash_attn=False)}
    assert not ids & {"config.flash_attn", "config.ray_cpus", "config.resume_nothing"}
    ids = {p.id for p in late_problems(compose_snapshot(GOOD).config, devices_per_node=4, cpus=2,
                                       flash_attn=False)}
    assert {"config.flash_attn", "config.ray_cpus", "config.devices", "config.resume_nothing"} <= ids


def test_grpo_with_one_sample_per_prompt():
    cfg = compose_snapshot(GOOD + ["actor_rollout_ref.rollout.n=1", "data.train_batch_size=16"]).config
    assert "config.grpo_n" in {p.id for p in late_problems(cfg)}
    assert not startup_problems(cfg)  # verl itself lets it through


def test_ref_micro_batch_is_required_only_when_kl_is_used():
    kl = compose_snapshot(GOOD + ["actor_rollout_ref.actor.use_kl_loss=True"]).config
    assert [p.message for p in startup_problems(kl)] == [
        "[actor_rollout_ref.ref] Please set at least one of 'actor_rollout_ref.ref.log_prob_micro_batch_size' "
        "or 'actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu'."]
    assert not startup_problems(compose_snapshot(GOOD).config)


def test_snapshot_is_used_when_the_target_has_no_verl(doctor, tmp_path):
    """A launch whose interpreter has no verl (here: a venv made without it) is composed against
    the snapshot; the ignored key is still reported, the version marked as assumed."""
    import venv

    bare = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False).create(bare)
    script = write_script(tmp_path, GOOD + ["custom_reward_function.path=./r.py"])
    r = doctor("check", "--json", "--only", "config.keys", "--timeout", "300", "--python",
               str(bare / "bin" / "python"), "--", "bash", str(script), timeout=600)
    f = by_id(json.loads(r.stdout))["config.ignored_key"][0]
    assert "assuming the snapshot's version" in f["message"]
    assert f["fix"] == "write reward.custom_reward_function.path=./r.py"


def test_a_script_without_a_trainer_call_is_one_line_exit_2(doctor, tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\nexport HCCL_SOCKET_IFNAME=eth0\necho hello\n")
    r = doctor("check", "--only", "config", "--", "bash", str(script))
    assert r.returncode == 2 and "no python command found" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("devices, env, seen", [
    ({"davinci": 8}, {}, (8, None)),
    ({"davinci": 8}, {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"}, (4, ("ASCEND_RT_VISIBLE_DEVICES", "0,1,2,3"))),
    ({"davinci": 8}, {"ASCEND_RT_VISIBLE_DEVICES": "NoDevFiles"}, (0, ("ASCEND_RT_VISIBLE_DEVICES", "NoDevFiles"))),
    ({"davinci": 8}, {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}, (8, None)),
    ({"nvidia": 2}, {"CUDA_VISIBLE_DEVICES": "1", "ASCEND_RT_VISIBLE_DEVICES": ""}, (1, ("CUDA_VISIBLE_DEVICES", "1"))),
    ({}, {"CUDA_VISIBLE_DEVICES": "0"}, (None, None)),
])
def test_visible_devices_counts_what_ray_will(devices, env, seen):
    from probes.facts import visible_devices

    assert visible_devices(devices, env) == seen


def test_a_visible_devices_variable_narrower_than_n_gpus_per_node_is_named():
    from probes.facts import visible_devices

    count, limit = visible_devices({"davinci": 8}, {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"})
    cfg = compose_snapshot(GOOD).config  # trainer.n_gpus_per_node=8
    (problem,) = [p for p in late_problems(cfg, devices_per_node=count, devices_limit=limit) if p.id == "config.devices"]
    assert "ASCEND_RT_VISIBLE_DEVICES=0,1,2,3 leaves Ray 4 of this node's devices" in problem.message
    assert problem.fix.startswith("trainer.n_gpus_per_node=4") and "ASCEND_RT_VISIBLE_DEVICES" in problem.fix
