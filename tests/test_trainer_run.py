"""The reference trainer end to end, on real Ray nodes with real torch.distributed all-reduces:
learning on the embedded default, placement on two nodes, resume after a kill (also one in the
middle of a checkpoint write), and a real allocation failure under trainer.worker_memory_limit."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer import checkpoint
from trainer.defaults import embedded_default

ROOT = Path(__file__).resolve().parents[1]
SCORE = "critic/score/mean"


@pytest.fixture
def env(monkeypatch):
    """One OpenMP thread per worker (a shared 2-core box) and no inherited Ray cluster."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return dict(os.environ)


def _trainer(args: list[str], env: dict, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trainer.main_grpo", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, **kw)


def _steps(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow
def test_two_node_default_learns_with_workers_on_both_nodes_and_equal_gradients(env, tmp_path):
    import ray

    from trainer.config import config_from_overrides
    from trainer.main_grpo import Trainer
    from trainer.ray_cluster import RayCluster

    cfg, notices = config_from_overrides(embedded_default() + [
        f"trainer.default_local_dir={tmp_path}", "trainer.total_training_steps=16", "trainer.save_freq=-1"])
    assert cfg["trainer.nnodes"] == 2 and cfg["trainer.n_gpus_per_node"] == 1
    trainer = Trainer(cfg, notices)
    trainer.prepare()
    with RayCluster(2, 1) as cluster:
        trainer.start_workers(cluster)
        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        assert len(alive) == 2
        assert set(trainer.worker_nodes) == alive  # one worker on each Ray node, as Ray reports it
        ray.get([w.track_gradients.remote() for w in trainer.workers])
        trainer.fit(0)
        prints = ray.get([w.fingerprint.remote() for w in trainer.workers])
        trainer.finish()

    # Each worker computed different local gradients; after the all-reduce they are identical.
    assert prints[0]["local_grad"]["sha256"] != prints[1]["local_grad"]["sha256"]
    assert prints[0]["reduced_grad"] == prints[1]["reduced_grad"] and prints[0]["reduced_grad"]["abs_sum"] > 0
    assert prints[0]["params"] == prints[1]["params"]

    rows = _steps(tmp_path)
    assert [r["step"] for r in rows] == list(range(1, 17))
    first, last = [sum(r[SCORE] for r in part) / 5 for part in (rows[:5], rows[-5:])]
    assert last > first + 0.1, (first, last)  # seed 0: about 0.02 -> 0.3
    placement = json.loads((tmp_path / "placement.json").read_text())
    assert {w["node_id"] for w in placement["workers"]} == alive
    assert (tmp_path / "curves.png").stat().st_size > 1000


@pytest.mark.slow
def test_kill_mid_run_and_mid_checkpoint_then_resume_without_repeating_a_step(env, tmp_path):
    args = embedded_default() + [f"trainer.default_local_dir={tmp_path}", "trainer.nnodes=1",
                                 "trainer.total_training_steps=6", "trainer.save_freq=2",
                                 "trainer.worker_memory_limit=1GiB",  # a sensible limit leaves room
                                 "trainer.test_freq=3", "data.val_max_samples=16"]
    first = _trainer(args, {**env, checkpoint.HOLD_ENV: "4:600"})  # step 4's write stops before its rename
    try:
        deadline = time.time() + 600
        while not list(tmp_path.glob(f"{checkpoint.TMP_PREFIX}4-*/data.pt")):
            assert first.poll() is None, first.stdout.read()
            assert time.time() < deadline, "step 4's checkpoint write never started"
            time.sleep(0.5)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the trainer and every process it started
        first.wait()
    before = _steps(tmp_path)
    assert [r["step"] for r in before] == [1, 2, 3]
    assert checkpoint.latest(tmp_path) == 2  # the half-written step 4 is not trusted ...
    assert checkpoint.load(tmp_path / "global_step_2")["data"]["global_step"] == 2  # ... step 2 still loads

    second = _trainer(args, env)
    out, _ = second.communicate(timeout=600)
    assert second.returncode == 0, out
    assert f"resumed from {tmp_path / 'global_step_2'} (step 2)" in out
    rows = _steps(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]  # every step once, none skipped
    # Step 3 was redone from step 2's model, optimizer, data position and RNG: the same result.
    assert rows[2][SCORE] == before[2][SCORE] and rows[2]["response_length/mean"] == before[2]["response_length/mean"]
    assert [r["step"] for r in rows if "val/score/mean" in r] == [3, 6]  # greedy validation every 3 steps
    assert checkpoint.latest(tmp_path) == 6 and not list(tmp_path.glob(f"{checkpoint.TMP_PREFIX}*"))


@pytest.mark.slow
def test_too_big_micro_batch_fails_with_a_real_allocation_error_in_its_phase(env, tmp_path):
    args = embedded_default() + [f"trainer.default_local_dir={tmp_path}", "trainer.nnodes=1",
                                 "trainer.total_training_steps=1", "trainer.worker_memory_limit=1GiB",
                                 "actor_rollout_ref.rollout.n=64", "data.max_response_length=48",
                                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=512"]
    proc = _trainer(args, env)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 1, out
    marker = [line for line in out.splitlines() if line.startswith("[trainer] phase=")]
    assert marker, out[-3000:]
    assert marker[-1].startswith("[trainer] phase=update failed: RuntimeError:")
    assert "can't allocate memory" in marker[-1]
    assert "in update_actor" in out  # the traceback names verl's phase function
    assert _steps(tmp_path) == []


def test_mlflow_tracks_every_step_offline_in_sqlite(env, tmp_path):
    """trainer.logger=[console,mlflow] with the seed article's sqlite backend: params and per-step metrics."""
    mlflow = pytest.importorskip("mlflow")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_dir = tmp_path / "run"
    args = embedded_default() + [f"trainer.default_local_dir={run_dir}", "trainer.nnodes=1",
                                 "trainer.total_training_steps=2", "trainer.logger=['console','mlflow']",
                                 "trainer.project_name=doctor_tests", "trainer.experiment_name=mlflow_run"]
    proc = _trainer(args, {**env, "MLFLOW_TRACKING_URI": uri})
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("doctor_tests")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.tags["mlflow.runName"] == "mlflow_run" and run.info.status == "FINISHED"
    assert run.data.params["data.train_batch_size"] == "8"
    history = client.get_metric_history(run.info.run_id, SCORE)
    assert [(m.step, m.value) for m in history] == [(r["step"], r[SCORE]) for r in _steps(run_dir)]


def test_a_data_file_that_cannot_be_read_is_one_marker_line_not_a_traceback(env, tmp_path):
    """A truncated parquet file (its first half, as an interrupted copy leaves it): pyarrow's own
    error, named in the `phase=prepare` marker, before any Ray start."""
    from trainer.tiny import ensure_tiny

    whole = (ensure_tiny() / "data" / "train.parquet").read_bytes()
    broken = tmp_path / "train.parquet"
    broken.write_bytes(whole[: len(whole) // 2])
    args = [o for o in embedded_default() if not o.startswith("data.train_files=")] + [
        f"data.train_files={broken}", f"trainer.default_local_dir={tmp_path / 'run'}"]
    proc = _trainer(args, env)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, out
    assert "Traceback" not in out, out[-3000:]
    (marker,) = [line for line in out.splitlines() if line.startswith("[trainer] phase=")]
    assert marker.startswith("[trainer] phase=prepare failed: ArrowInvalid: "), marker
    assert "(at " in marker and "pyarrow" in marker, marker  # where it rose
