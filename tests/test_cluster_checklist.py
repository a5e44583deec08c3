"""verl's Ascend multi-machine checklist, checked by `doctor check --cluster` on two real "hosts"
(network namespaces, tests/netns.py) with the seed article's interface settings on both:
GLOO_SOCKET_IFNAME=eth6 and HCCL_SOCKET_IFNAME=eth6. Each test builds one situation for real on
node B (its `ray start` environment and shell, nftables inside B's namespace, a listener there,
device nodes in B's own mount namespace) and asserts a finding that names host-b."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.netns import ROOT, NetnsCluster, running_cluster

pytestmark = pytest.mark.netns

SEED_ENV = {"GLOO_SOCKET_IFNAME": "eth6", "HCCL_SOCKET_IFNAME": "eth6"}  # the seed article's 3.3


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    base = Path(tmp_path_factory.mktemp("checklist"))
    launch = base / "launch"
    launch.mkdir()
    with running_cluster(base, f"vdk{os.getpid() % 10000}", env=SEED_ENV) as cluster:
        cluster.launch_dir = launch
        cluster.b_state = "identical"
        yield cluster


def _restart_b(cluster: NetnsCluster, name: str, env: dict | None = None, setup: list[str] = (),
               args: list[str] = ()) -> None:
    """Restart host-b's Ray with one difference (or none), unless it already runs that one."""
    if cluster.b_state == name:
        return
    cluster.stop_node("b", grace=2.0)
    cluster.wait_nodes(1)
    cluster.start_ray("b", env={**SEED_ENV, **(env or {})}, setup=setup, args=args)
    cluster.wait_nodes(2)
    cluster.b_state = name


def _doctor(cluster: NetnsCluster, *overrides: str) -> dict:
    argv = [cluster.python, "-m", "doctor", "check", "--cluster", cluster.address, "--json",
            "--python", cluster.python, "--cwd", str(cluster.launch_dir),
            "--only", "cluster", "--timeout", "30", "--",
            "python3", "-m", "verl.trainer.main_ppo", "trainer.nnodes=2", "trainer.n_gpus_per_node=8",
            *overrides]
    r = cluster.run("a", argv, cwd=ROOT, timeout=300)
    assert r.returncode in (0, 1), r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    return json.loads(r.stdout)


def _failures(doc: dict) -> list[dict]:
    return [f for f in doc["findings"] if f["status"] == "fail" and f["category"] == "cluster"]


def _on_b(doc: dict, id: str, status: str = "fail") -> list[dict]:
    hits = [f for f in doc["findings"] if f["id"] == id and f["status"] == status]
    assert hits, [(f["id"], f["status"], f["title"]) for f in doc["findings"] if f["status"] != "pass"]
    assert all(f["node"] == "host-b" for f in hits), hits
    return hits


def test_identical_pair_with_gloo_and_hccl_on_one_nic_passes(pair):
    _restart_b(pair, "identical")
    doc = _doctor(pair)
    assert _failures(doc) == []
    link = [f for f in doc["findings"] if f["id"] == "cluster.link"]
    assert [f["status"] for f in link] == ["pass"]
    assert "4 TCP connections" in link[0]["message"]  # gloo and hccl, each way
