"""A worker node dies mid-run on a real two-node Ray cluster; the supervisor waits for it, resumes.

The cluster: a head and a worker node started here with `ray start --block`, each in its own
session with its own --temp-dir, a private HOME and RAY_AUTH_MODE=disabled. Nodes are stopped by
their process group only (never `ray stop`, which is machine-wide).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

import trainer.main_grpo  # noqa: F401  (the trainer under test: a broken import fails, never skips)
from tests.test_supervisor import _env, ledger, steps_printed, task

RAY = str(Path(sys.executable).parent / "ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    def __init__(self, home: Path):
        self.env = dict(os.environ, HOME=str(home), RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
        self.env.pop("RAY_ADDRESS", None)
        import ray

        self.port = _free_port()
        # the address Ray picks for every node here (forcing 127.0.0.1 splits raylet and agents)
        self.address = f"{ray.util.get_node_ip_address()}:{self.port}"
        self.tmp = Path(tempfile.mkdtemp(prefix="vds-", dir="/tmp"))  # short: socket paths are limited
        self.head = self.worker = None
        self._n = 0

    def _start(self, *args: str) -> subprocess.Popen:
        self._n += 1
        temp = self.tmp / f"n{self._n}"
        log = open(self.tmp / f"n{self._n}.log", "wb")
        return subprocess.Popen([RAY, "start", "--block", "--num-cpus=1", "--disable-usage-stats",
                                 f"--temp-dir={temp}", *args],
                                env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start_head(self) -> None:
        self.head = self._start("--head", f"--port={self.port}", "--include-dashboard=false")
        self.wait_nodes(1)

    def start_worker(self) -> None:
        self.worker = self._start(f"--address={self.address}")

    def wait_nodes(self, n: int, timeout: float = 300) -> None:
        from supervisor.ray_nodes import answering_nodes

        deadline = time.monotonic() + timeout
        while answering_nodes(sys.executable, self.address, self.env, 5) < n:
            assert time.monotonic() < deadline, f"the cluster did not reach {n} node(s)"
            # a node start can time out on a busy machine: start it again
            if self.head.poll() is not None:
                self.head = self._start("--head", f"--port={self.port}", "--include-dashboard=false")
            elif self.worker is not None and self.worker.poll() is not None:
                self.start_worker()
            time.sleep(1)

    def kill_worker_raylet(self) -> None:
        """SIGKILL the worker node's raylet, then end what is left of that node's session."""
        tree = psutil.Process(self.worker.pid).children(recursive=True)
        raylets = [p for p in tree if p.name() == "raylet"]
        assert raylets, "no raylet under the worker node"
        for p in raylets:
            p.kill()
        self.stop(self.worker)

    @staticmethod
    def stop(proc: subprocess.Popen | None) -> None:
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    def close(self) -> None:
        self.stop(self.worker)
        self.stop(self.head)
        shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.fixture
def cluster(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    c = LocalCluster(home)
    try:
        c.start_head()
        c.start_worker()
        c.wait_nodes(2)
        yield c
    finally:
        c.close()


@pytest.mark.slow
def test_lost_worker_node_is_waited_for_and_the_run_resumes(tmp_path, cluster):
    run_dir = tmp_path / "run"
    steps = 10  # enough that the node dies mid-run, not after the last step
    cmd = [sys.executable, "-m", "doctor", "train", "--auto-tune", "--no-preflight", "--json",
           "--node-wait", "240", "--run-dir", str(run_dir),
           *task(steps=steps, **{"trainer.nnodes": 2, "trainer.save_freq": 1})]
    # Hold step 2's checkpoint before its rename, so the node is killed mid-run however fast the
    # machine is (an idle machine finishes 10 tiny steps before a kill would land).
    env = dict(os.environ, **_env(tmp_path), RAY_ADDRESS=cluster.address, TRAINER_CHECKPOINT_HOLD="2:20")
    err_path = tmp_path / "doctor.stderr"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            ckpts = run_dir / "checkpoints"
            _wait_for(lambda: any(ckpts.glob(".tmp-global_step_2-*")), 400, proc)
            cluster.kill_worker_raylet()
            # the supervisor diagnoses the loss and waits: the node is not back yet
            _wait_for(lambda: _first_decision(run_dir) is not None, 240, proc)
            time.sleep(3)
            assert proc.poll() is None, "the supervisor gave up instead of waiting for the node"
            assert not (run_dir / "attempt-2.log").exists(), "relaunched before the node was back"
            cluster.start_worker()
            out, _ = proc.communicate(timeout=400)
        finally:
            if proc.poll() is None:
                proc.kill()
    stderr = err_path.read_text()
    assert proc.returncode == 0, stderr[-4000:]
    doc = json.loads(out)
    assert doc["status"] == "succeeded" and doc["steps_completed"] == steps
    first, second = doc["attempts"][:2]
    assert first["diagnosis"]["category"] in ("cluster", "network"), first
    assert first["decision"] == "retry" and first["changes"] == {}
    assert "waiting for the Ray cluster" in stderr
    assert second["resumed_from_step"] >= 2
    printed = [s for a in doc["attempts"] for s in steps_printed(a["log"])]
    assert sorted(printed) == list(range(1, steps + 1)), printed  # no step lost or repeated
    assert (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == str(steps)


def _first_decision(run_dir: Path):
    try:
        rows = ledger(run_dir)
    except (OSError, ValueError):
        return None
    return rows[0]["decision"] if rows and rows[0]["decision"] != "running" else None


def _log_has(path: Path, pattern: str) -> bool:
    try:
        return re.search(pattern, path.read_text(errors="replace"), re.M) is not None
    except OSError:
        return False


def _wait_for(cond, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, "doctor train ended early"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)
