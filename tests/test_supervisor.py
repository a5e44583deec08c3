"""`doctor train --auto-tune` on the reference trainer: real failures, real relaunches.

Each test runs the real CLI on the embedded tiny task, shrunk to a few short steps on one node.
"""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import trainer.main_grpo  # noqa: F401  (the trainer under test: a broken import fails, never skips)
from supervisor.overrides import parse_overrides
from tests.conftest import run_doctor

A = "actor_rollout_ref."
# A worker limit under which an update micro batch of 16 long-prompt samples cannot be allocated
# and one of 8 can, with one thread per worker (measured here at OMP_NUM_THREADS=1: 16 fails at
# 750MiB in the update phase and runs at 780MiB; 8 runs at 700MiB and fails at 650MiB).
OOM_LIMIT = os.environ.get("VD_OOM_LIMIT", "720MiB")
# The limit is RLIMIT_DATA, and every compute thread adds a stack and a malloc arena to it: a worker's
# thread count follows the machine's cores unless pinned, so the window above holds only when pinned.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def task(steps: int = 3, **extra) -> list[str]:
    """The embedded default on one node, small and short; `extra` overrides by key."""
    from trainer.defaults import embedded_default

    settings = {
        "trainer.nnodes": 1, "trainer.total_training_steps": steps, "data.train_batch_size": 2,
        A + "actor.ppo_mini_batch_size": 2, A + "rollout.n": 4, "data.max_response_length": 8,
        A + "actor.ppo_micro_batch_size_per_gpu": 2, A + "rollout.log_prob_micro_batch_size_per_gpu": 2,
        A + "ref.log_prob_micro_batch_size_per_gpu": 2,
        "trainer.plot": False, "trainer.save_freq": -1,
    }
    settings.update(extra)
    keep = [o for o in embedded_default() if o.split("=", 1)[0] not in settings]
    return keep + [f"{k}={_text(v)}" for k, v in settings.items()]


def long_prompts(tmp_path: Path, rows: int = 64) -> Path:
    """The embedded task's rows with ~400-token prompts: memory per sample grows, compute barely
    (the long part is one forward pass; responses stay short)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trainer.tiny import ensure_tiny

    table = pq.read_table(ensure_tiny() / "data" / "train.parquet").slice(0, rows).to_pylist()
    filler = "Read all of this before you answer. " * 15
    for row in table:
        row["prompt"] = [{"role": "user", "content": filler + row["prompt"][0]["content"]}]
    path = tmp_path / "long_prompts.parquet"
    pq.write_table(pa.Table.from_pylist(table), path)
    return path


def _text(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def train(tmp_path: Path, overrides: list[str], *flags: str, cwd: Path | None = None,
          timeout: float = 400, env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    run_dir = tmp_path / "run"
    r = run_doctor("train", "--auto-tune", "--json", "--run-dir", str(run_dir), *flags, *overrides,
                   cwd=cwd or tmp_path, env={**_env(tmp_path), **(env or {})}, timeout=timeout)
    assert r.stdout.strip(), r.stderr[-4000:]
    return r, json.loads(r.stdout)


def _env(tmp_path: Path) -> dict:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    cache = os.environ.get("VERL_DOCTOR_CACHE") or str(Path.home() / ".cache" / "verl-doctor")
    return {"HOME": str(home), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
            "VERL_DOCTOR_CACHE": cache}


def ledger(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "attempts.jsonl").read_text().splitlines() if x]


def steps_printed(log: str) -> list[int]:
    import re

    return [int(m.group(1)) for m in re.finditer(r"^step:(\d+) ", Path(log).read_text(), re.M)]


# -------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_out_of_memory_downshifts_and_finishes_every_step(tmp_path):
    """The update micro batch really fails to allocate under the worker memory limit."""
    micro = A + "actor.ppo_micro_batch_size_per_gpu"
    overrides = task(steps=3, **{micro: 16, "data.train_batch_size": 4, A + "actor.ppo_mini_batch_size": 4,
                                 "data.train_files": long_prompts(tmp_path), "data.max_prompt_length": 512,
                                 "data.max_response_length": 8, "trainer.worker_memory_limit": OOM_LIMIT})
    r, doc = train(tmp_path, overrides, "--no-preflight", env=ONE_THREAD)
    assert r.returncode == 0, r.stderr[-4000:]
    assert doc["status"] == "succeeded" and doc["steps_completed"] == 3
    attempts = doc["attempts"]
    assert 2 <= len(attempts) <= 3  # recovered within 2 retries
    first = attempts[0]
    assert first["diagnosis"]["category"] == "memory"
    assert first["diagnosis"]["phase"] == "update"
    assert first["decision"] == "downshift"
    assert first["changes"][micro] == [16, 8]
    # the algorithm did not move
    given = parse_overrides(overrides).as_dict()
    for key in ("data.train_batch_size", A + "rollout.n", A + "actor.ppo_mini_batch_size", A + "actor.optim.lr"):
        assert doc["final_overrides"][key] == given[key]
    assert doc["final_overrides"][micro] < 16
    # work was never lost: a save frequency was forced and said so; the final checkpoint has all steps
    assert any("trainer.save_freq" in note for note in doc["notes"])
    run_dir = tmp_path / "run"
    assert (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    printed = [s for a in attempts for s in steps_printed(a["log"])]
    assert sorted(printed) == [1, 2, 3] and len(set(printed)) == 3  # no step lost or repeated
    rows = ledger(run_dir)
    assert rows[0]["diagnosis"]["rule"] and rows[0]["changes"] == {micro: [16, 8]}
    assert f"{micro}=8" in rows[1]["overrides"]
    assert micro + "=" in doc["paste"]


def test_config_error_stops_at_once(tmp_path):
    overrides = task(**{"trainer.n_gpu_per_node": 1})  # misspelt: n_gpus_per_node
    r, doc = train(tmp_path, overrides, "--no-preflight", timeout=200)
    assert r.returncode == 1
    (attempt,) = doc["attempts"]
    assert attempt["diagnosis"]["category"] == "config", attempt
    assert attempt["decision"] == "stop"
    assert "n_gpu_per_node" in r.stderr  # the explanation names the key


def test_secrets_stay_out_of_the_console_the_attempt_log_and_the_ledger(tmp_path):
    """A launch wrapper that shows the job's environment (as site wrappers do) prints a secret
    variable's value and an `HF_TOKEN=...` line; then the real trainer fails its config check."""
    planted = f"planted-{uuid.uuid4().hex[:12]}"  # WANDB_API_KEY's value: found wherever it appears
    printed = f"printed-{uuid.uuid4().hex[:12]}"  # in no environment: found by its name only
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f'#!/bin/sh\necho "wandb: logging in with $WANDB_API_KEY"\n'
                       f'echo "HF_TOKEN={printed}"\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    overrides = task(**{"trainer.n_gpu_per_node": 1, "trainer.experiment_name": planted})
    r, doc = train(tmp_path, overrides, "--no-preflight", "--python", str(wrapper),
                   env={"WANDB_API_KEY": planted}, timeout=200)
    assert r.returncode == 1, r.stderr[-3000:]
    run_dir = tmp_path / "run"
    log = (run_dir / "attempt-1.log").read_text()
    outputs = {"stdout": r.stdout, "stderr": r.stderr, "attempt-1.log": log,
               "run.json": (run_dir / "run.json").read_text(),
               "attempts.jsonl": (run_dir / "attempts.jsonl").read_text()}
    for name, text in outputs.items():
        assert planted not in text and printed not in text, f"a secret in {name}"
    # the wrapper's lines did reach the log and the console, without their secrets
    assert "wandb: logging in with [redacted]" in log and "HF_TOKEN=[redacted]" in log
    assert "HF_TOKEN=[redacted]" in r.stderr
    # and the redacted log is still explained
    (attempt,) = doc["attempts"]
    assert attempt["diagnosis"]["category"] == "config" and attempt["diagnosis"]["rule"], attempt
    assert attempt["decision"] == "stop"
    assert "n_gpu_per_node" in r.stderr


def test_redacted_logs_are_explained_as_before():
    """The supervisor explains the redacted attempt log: every rule's fixture, redacted line by
    line the way the job's output is, is still explained by the same rule first."""
    from matching.explain import explain_text_report
    from matching.redact import Redactor
    from tests.test_explain_rules import FIXTURES
    from supervisor.child_process import redacted_lines

    redactor = Redactor(env={})
    redacted = 0
    for path in sorted(FIXTURES.glob("*.log")):
        raw = path.read_bytes()
        text = "".join(redacted_lines(io.BytesIO(raw), redactor))
        redacted += text != raw.decode("utf-8", "replace")
        before = [f.rule for f in explain_text_report(raw).findings[:1]]
        after = [f.rule for f in explain_text_report(text).findings[:1]]
        assert after == before, f"{path.name}: {before} before redaction, {after} after"
    assert redacted, "no fixture holds anything redaction removes: this test proves nothing"


def test_import_shadowing_stops_at_once(tmp_path):
    """A `transformers/` source tree in the launch directory shadows the installed package."""
    workdir = tmp_path / "work"
    (workdir / "transformers").mkdir(parents=True)
    (workdir / "transformers" / "__init__.py").write_text("# a source checkout that was never built\n")
    r, doc = train(tmp_path, task(), "--no-preflight", cwd=workdir, timeout=200)
    assert r.returncode == 1
    (attempt,) = doc["attempts"]
    assert attempt["diagnosis"]["category"] == "imports", attempt
    assert attempt["decision"] == "stop"
    # with the pre-flight check on, nothing is launched at all
    r2 = run_doctor("train", "--auto-tune", "--json", "--run-dir", str(tmp_path / "run2"), *task(),
                    cwd=workdir, env=_env(tmp_path), timeout=200)
    doc2 = json.loads(r2.stdout)
    assert r2.returncode == 1 and doc2["attempts"] == []
    assert any(f["category"] == "imports" for f in doc2["preflight"])


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_resume_finishes(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "doctor", "train", "--auto-tune", "--no-preflight", "--run-dir",
           str(run_dir), *task(steps=4, **{"trainer.save_freq": 1})]
    env = dict(os.environ, **_env(tmp_path))
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("step:1 "):
            proc.send_signal(signal.SIGINT)  # Ctrl-C
            break
    rest, _ = proc.communicate(timeout=120)
    out = "".join(seen) + rest
    assert proc.returncode == 130, out[-3000:]
    (attempt,) = ledger(run_dir)
    assert attempt["decision"] == "interrupted"
    assert not _alive(attempt["pid"]), "the job outlived Ctrl-C"
    done = int((run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text())
    assert done >= 1

    r = run_doctor("train", "--resume", str(run_dir), "--json", cwd=tmp_path, env=_env(tmp_path), timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["status"] == "succeeded" and doc["steps_completed"] == 4
    second = doc["attempts"][1]
    assert second["resumed_from_step"] == done
    printed = [s for a in doc["attempts"] for s in steps_printed(a["log"])]
    assert sorted(printed) == [1, 2, 3, 4] and len(printed) == 4


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
