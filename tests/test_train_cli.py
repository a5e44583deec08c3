"""`doctor train` on the verl engine, built from the seed article's launch script, and its usage errors."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests import seed_launch
from tests.conftest import ROOT, run_doctor
VENV_BIN = str(Path(sys.executable).parent)


def seed_script(tmp_path: Path) -> Path:
    """The article's launch script (section 3.5), preceded by its exports (3.3) and a `cd`."""
    workdir = tmp_path / "verl"
    workdir.mkdir()
    exports = [f"export {k}={v}" for k, v in seed_launch.EXPORTS.items()]
    return seed_launch.write_script(tmp_path / "run_grpo.sh", head=[*exports, f"cd {workdir}"])


def test_verl_engine_reads_the_seed_script(tmp_path):
    from supervisor.verl_engine import VerlEngine

    script = seed_script(tmp_path)
    env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": str(tmp_path)}
    engine = VerlEngine.from_script(script, ["trainer.total_epochs=1"], cwd=tmp_path, environ=env)
    cmd = engine.command(engine.base_overrides)
    assert cmd[:3] == [str(Path(VENV_BIN) / "python"), "-m", "verl.trainer.main_ppo"]
    overrides = cmd[3:]
    assert overrides[0] == "algorithm.adv_estimator=grpo"
    assert "+data.source=gsm8k" in overrides
    assert "trainer.logger=[\"console\"]" in overrides  # the shell's quotes are gone, Hydra's kept
    assert overrides[-2:] == ["trainer.device=npu", "trainer.total_epochs=1"]  # $@ lands at the end
    assert len(overrides) == 41  # the 40 of the script, then $@
    assert engine.env["HCCL_SOCKET_IFNAME"] == engine.env["GLOO_SOCKET_IFNAME"] == "eth6"
    assert engine.env["VLLM_ASCEND_ENABLE_NZ"] == "0"
    assert engine.env["HOME"] == str(tmp_path)  # the caller's environment, plus the exports
    assert engine.cwd == tmp_path / "verl"


def test_usage_errors_are_one_line_exit_2(tmp_path):
    cases = [
        ("train", "--resume", str(tmp_path / "nope")),
        ("train", "--script", str(tmp_path / "missing.sh")),
        ("train", "--engine", "reference", "--script", __file__),
        ("train", "--run-dir", str(tmp_path / "r"), "--no-preflight", "data.train_batch_size=[1,"),
    ]
    for args in cases:
        r = run_doctor(*args, cwd=tmp_path)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.slow
def test_verl_start_up_failure_stops_with_its_diagnosis(tmp_path):
    """verl 0.9.1 cannot train on this CPU machine: its real start-up failure is the test."""
    jsonschema = pytest.importorskip("jsonschema")
    script = seed_script(tmp_path)
    env = {"PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}", "HOME": str(tmp_path / "home"),
           "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    run_dir = tmp_path / "run"
    r = run_doctor("train", "--auto-tune", "--script", str(script), "--no-preflight",
                   "--run-dir", str(run_dir), "--json", cwd=tmp_path, env=env, timeout=400)
    assert r.returncode == 1, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    schema = json.loads((ROOT / "knowledge/schemas/doctor.train.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert doc["status"] == "failed"
    *before, attempt = doc["attempts"]
    # a broken install is not retried; only a Ray start-up hiccup of a busy machine may come first
    assert all(a["diagnosis"]["category"] == "cluster" for a in before), before
    assert attempt["exit_code"] != 0
    assert attempt["decision"] == "stop"
    assert attempt["diagnosis"]["category"] in ("versions", "imports"), attempt
    assert attempt["diagnosis"]["rule"], attempt
    # the launch that ran is the script's, with the save frequency it already had
    ledger = [json.loads(x) for x in (run_dir / "attempts.jsonl").read_text().splitlines()]
    assert "trainer.save_freq=20" in ledger[-1]["overrides"]
    # verl's own default resume_mode is auto: nothing to add, and nothing may turn it off
    assert all(o == "trainer.resume_mode=auto" for o in ledger[-1]["overrides"]
               if o.startswith("trainer.resume_mode="))
    log = Path(attempt["log"]).read_text()
    assert "verl.trainer.main_ppo" in log or "validate_config" in log


# -- the embedded default under the user's overrides ----------------------------------------------

A = "actor_rollout_ref."
MICRO = A + "actor.ppo_micro_batch_size_per_gpu"
# Under this worker limit an update micro batch of 128 embedded samples cannot be allocated and one
# of 64 can (measured here on two local nodes, per-worker mini batch 128: 128 fails at 800MiB and
# runs at 820MiB; 64 fails at 710MiB and runs at 740MiB).
LAYERED_OOM_LIMIT = os.environ.get("VD_LAYERED_OOM_LIMIT", "770MiB")


def test_overrides_without_data_or_model_layer_on_the_embedded_default():
    from trainer.defaults import EMBEDDED_DEFAULT, layered

    out = layered([f"{MICRO}=128", "trainer.total_training_steps=6"])
    keys = [o.split("=", 1)[0] for o in out]
    assert keys.count(MICRO) == 1 and out[-2:] == [f"{MICRO}=128", "trainer.total_training_steps=6"]
    # every other embedded entry is there: the tiny model and its data among them
    assert len(out) == len(EMBEDDED_DEFAULT)
    model = next(o for o in out if o.startswith(A + "model.path="))
    assert (Path(model.split("=", 1)[1]) / "config.json").is_file()
    # a task of the user's own (data or a model) is not mixed with the embedded one
    own = ["data.train_files=/data/gsm8k/train.parquet", f"{MICRO}=4"]
    assert layered(own) == own
    assert layered([f"+{A}model.path=/models/qwen"]) == [f"+{A}model.path=/models/qwen"]


@pytest.mark.slow
def test_auto_tune_overrides_on_the_embedded_default_downshift_a_real_oom(tmp_path):
    """`doctor train --auto-tune KEY=VALUE ...`, no data and no model: the embedded task runs with
    the overrides on top, micro batch 128 really fails to allocate, 64 runs to the end.
    (The embedded per-worker mini batch is 16, which 128 cannot divide: the batch keys make it 128.)"""
    overrides = [f"trainer.worker_memory_limit={LAYERED_OOM_LIMIT}", f"{MICRO}=128",
                 "data.train_batch_size=64", A + "actor.ppo_mini_batch_size=64", "trainer.total_training_steps=6"]
    env = {"HOME": str(tmp_path / "home"), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           "OMP_NUM_THREADS": "1"}
    r = run_doctor("train", "--auto-tune", "--json", "--run-dir", str(tmp_path / "run"), *overrides,
                   cwd=tmp_path, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    doc = json.loads(r.stdout)
    assert doc["status"] == "succeeded" and doc["steps_completed"] == 6
    first, last = doc["attempts"][0], doc["attempts"][-1]
    assert len(doc["attempts"]) == 2, doc["attempts"]
    assert first["diagnosis"]["category"] == "memory" and first["diagnosis"]["phase"] == "update", first
    assert first["decision"] == "downshift" and first["changes"] == {MICRO: [128, 64]}, first
    assert last["exit_code"] == 0 and doc["final_overrides"][MICRO] == 64
    # it was the embedded task: its model, its data, its two nodes
    assert "tiny" in str(doc["final_overrides"][A + "model.path"])
    assert doc["final_overrides"]["trainer.nnodes"] == 2
    assert "Traceback" not in r.stderr.split("doctor: attempt 2")[-1]  # the run that finished is clean


# -- start-up failures explain themselves ------------------------------------------------------------

def test_ray_that_cannot_start_is_diagnosed_in_one_line_without_a_traceback(tmp_path):
    """RAY_TMPDIR on a read-only file system (a bind mount made read-only, in a mount namespace of
    its own; without root: a path under a regular file): Ray cannot make its folder there."""
    from tests.fresh import can_unshare, fresh_run

    if can_unshare():
        setup = ('mkdir "$TMP/ro" && mount --bind "$TMP/ro" "$TMP/ro" && mount -o remount,bind,ro "$TMP/ro" '
                 '&& export RAY_TMPDIR="$TMP/ro"')
    else:
        setup = 'touch "$TMP/ro" && export RAY_TMPDIR="$TMP/ro/sub"'
    cache = os.environ.get("VERL_DOCTOR_CACHE") or str(Path.home() / ".cache" / "verl-doctor")
    argv = [sys.executable, "-m", "doctor", "train", "--no-preflight", "--run-dir", "run",
            "trainer.total_training_steps=1"]
    with fresh_run(argv, tmp_path, setup=setup, env={"VERL_DOCTOR_CACHE": cache}, timeout=300) as run:
        out = run.output
        assert run.proc.returncode == 1, out[-4000:]
        assert "Traceback" not in out, out[-4000:]
        marker = [line for line in out.splitlines() if line.startswith("[trainer] phase=startup failed: ")]
        assert len(marker) == 1 and "/ro" in marker[0], out[-4000:]
        assert "doctor: attempt 1 failed with exit code 1: cluster, phase startup" in out, out[-4000:]
        assert "doctor:   Ray did not start: " in out and "RAY_TMPDIR" in out
        ledger = [json.loads(x) for x in (run.tmp / "work" / "run" / "attempts.jsonl").read_text().splitlines()]
        assert ledger[0]["diagnosis"]["category"] == "cluster" and ledger[0]["decision"] == "stop"
