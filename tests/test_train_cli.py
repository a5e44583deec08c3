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
