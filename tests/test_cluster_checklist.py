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
import tempfile
from pathlib import Path

import pytest

from tests.netns import ROOT, NetnsCluster, running_cluster

pytestmark = pytest.mark.netns

SEED_ENV = {"GLOO_SOCKET_IFNAME": "eth6", "HCCL_SOCKET_IFNAME": "eth6"}  # the seed article's 3.3
# The rest of verl v0.9.0's environment block (multi-machine_task_startup_practice.rst), on both nodes.
CHECKLIST_ENV = {**SEED_ENV, "HCCL_CONNECT_TIMEOUT": "3600", "HCCL_EXEC_TIMEOUT": "3600",
                 "HCCL_HOST_SOCKET_PORT_RANGE": "60000-60050", "HCCL_NPU_SOCKET_PORT_RANGE": "61000-61050",
                 "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1",
                 "ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
# verl's `ulimit -n 32768`, as far as this machine's hard limit allows; the HCCL ranges reserved
# from the ephemeral ports (each namespace has its own).
CHECKLIST_SETUP = ['ulimit -n "$(h=$(ulimit -Hn); [ "$h" = unlimited ] || [ "$h" -ge 32768 ] && echo 32768 || echo "$h")"',
                   "sysctl -qw net.ipv4.ip_local_reserved_ports=60000-61050"]
DROPPED = (60010, 60019)  # part of the HCCL host range host-b's firewall drops
TAKEN = (60030, 60039)  # part of it another listener on host-b holds


@pytest.fixture(scope="module")
def pair():
    # A short base: Ray's socket paths under --temp-dir must stay within AF_UNIX's 107 bytes.
    base = Path(tempfile.mkdtemp(prefix="vdk", dir="/tmp"))
    launch = base / "launch"
    launch.mkdir()
    try:
        with running_cluster(base, f"vdk{os.getpid() % 10000}", env=CHECKLIST_ENV, setup=CHECKLIST_SETUP) as cluster:
            cluster.launch_dir = launch
            cluster.b_state = "identical"
            yield cluster
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _restart_b(cluster: NetnsCluster, name: str, env: dict | None = None, setup: list[str] = (),
               args: list[str] = (), drop: tuple[str, ...] = ()) -> None:
    """Restart host-b's Ray with one difference (or none), unless it already runs that one; `drop`:
    variables of the checklist environment its `ray start` shell does not export."""
    if cluster.b_state == name:
        return
    cluster.stop_node("b", grace=2.0)
    cluster.wait_nodes(1)
    full = {k: v for k, v in {**CHECKLIST_ENV, **(env or {})}.items() if k not in drop}
    cluster.start_ray("b", env=full, setup=[*CHECKLIST_SETUP, *setup], args=args)
    cluster.wait_nodes(2)
    cluster.b_state = name


def _doctor(cluster: NetnsCluster, *overrides: str) -> dict:
    argv = [cluster.python, "-m", "doctor", "check", "--cluster", cluster.address, "--json",
            "--python", cluster.python, "--cwd", str(cluster.launch_dir),
            "--only", "cluster", "--timeout", "30", "--",
            "python3", "-m", "verl.trainer.main_ppo", "trainer.nnodes=2", "trainer.n_gpus_per_node=8",
            "trainer.device=npu", *overrides]
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
    by_id = {f["id"]: f for f in doc["findings"] if f["category"] == "cluster"}
    assert by_id["cluster.link"]["status"] == "pass"
    assert "4 TCP connections" in by_id["cluster.link"]["message"]  # gloo and hccl, each way
    ports = by_id["cluster.ports"]
    assert ports["status"] == "pass" and ports["evidence"]["tested"] == 2 * 16 + 1  # samples each way, GCS
    warns = [f for f in doc["findings"] if f["status"] == "warn" and f["category"] == "cluster"]
    # only where this machine's hard limit keeps `ulimit -n` below verl's 32768
    assert all(f["id"] == "cluster.open_files" and f["evidence"]["soft"] < 32768 for f in warns), warns


def _in_b(cluster: NetnsCluster, *argv: str) -> None:
    r = cluster.run("b", list(argv), timeout=30)
    assert r.returncode == 0, r.stderr


LISTENER = """import socket, sys, time
socks = []
for p in range(int(sys.argv[2]), int(sys.argv[3]) + 1):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], p)); s.listen(); socks.append(s)
print("listening", flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(shutil.which("nft") is None, reason="needs nftables' nft (apt-get install nftables; .ci/run does)")
def test_part_of_hccl_host_range_dropped_and_part_taken_on_b(pair):
    _restart_b(pair, "identical")
    b_ip = pair.nodes["b"].ip
    table = f"doctor{os.getpid()}"
    _in_b(pair, "nft", "add", "table", "inet", table)
    _in_b(pair, "nft", "add", "chain", "inet", table, "input", "{ type filter hook input priority 0 ; }")
    _in_b(pair, "nft", "add", "rule", "inet", table, "input", "tcp", "dport", f"{DROPPED[0]}-{DROPPED[1]}",
          "tcp", "flags", "&", "(syn|ack)", "==", "syn", "drop")  # new connections into B only
    holder = subprocess.Popen(pair.argv("b", [pair.python, "-c", LISTENER, b_ip, *map(str, TAKEN)]),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "listening"
        doc = _doctor(pair)
    finally:
        holder.kill()
        holder.wait()
        _in_b(pair, "nft", "delete", "table", "inet", table)
    found = _on_b(doc, "cluster.ports")
    (blocked,) = [f for f in found if "blocked" in f["title"]]
    assert blocked["title"].startswith("host-a -> host-b: HCCL host ports 60010, 60013, 60017 blocked")
    assert blocked["evidence"]["from"] == "host-a" and blocked["evidence"]["to"] == "host-b"
    assert "no answer" in blocked["message"]
    (taken,) = [f for f in found if "cannot be listened on" in f["title"]]
    assert taken["evidence"]["ports"] == [60030, 60033, 60037]
    assert f"pid {holder.pid}" in taken["message"] or "python" in taken["message"], taken["message"]
    assert not any("host-b -> host-a" in f["title"] for f in _failures(doc))  # only A -> B is dropped


def test_visible_devices_out_of_order_on_b(pair):
    # an Atlas 300I Duo's cards listed by pairs: the CANN runtime takes only ascending, distinct ids
    _restart_b(pair, "visible-out-of-order", env={"ASCEND_RT_VISIBLE_DEVICES": "0,2,4,6,1,3,5,7"})
    doc = _doctor(pair)
    (order,) = [f for f in _on_b(doc, "cluster.visible_devices") if "ascending" in f["title"]]
    assert order["title"] == "ASCEND_RT_VISIBLE_DEVICES on host-b is not in ascending order"
    assert "ASCEND_RT_VISIBLE_DEVICES=0,2,4,6,1,3,5,7 on host-b" in order["message"]
    assert "ASCEND_RT_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in order["fix"]
    assert not [f for f in doc["findings"] if f["id"] == "cluster.visible_devices" and f["node"] == "host-a"]


def test_noset_missing_other_port_range_and_ulimit_1024_on_b(pair):
    _restart_b(pair, "noset-range-ulimit", env={"HCCL_HOST_SOCKET_PORT_RANGE": "60100-60150"},
               setup=["ulimit -n 1024"], drop=("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",))
    doc = _doctor(pair)
    (noset,) = _on_b(doc, "cluster.visible_devices")
    assert "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES is unset" in noset["message"]
    assert "export RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1" in noset["fix"]
    ranges = _on_b(doc, "cluster.hccl_ports")
    assert any(f["title"] == "HCCL_HOST_SOCKET_PORT_RANGE differs on host-b" and "60100-60150 on host-b" in f["message"]
               and "60000-60050 on host-a" in f["message"] for f in ranges), ranges
    (nofile,) = _on_b(doc, "cluster.open_files")
    assert nofile["evidence"]["soft"] == 1024 and "ulimit -n 32768" in nofile["fix"]
    # the same findings in the report a user pastes into a tracker
    report = _report(pair)
    for f in (noset, nofile, *ranges):
        assert f["title"] in report and f["fix"].split(":")[0] in report, f["title"]


def _report(cluster: NetnsCluster) -> str:
    argv = [cluster.python, "-m", "doctor", "report", "--cluster", cluster.address, "--python", cluster.python,
            "--cwd", str(cluster.launch_dir), "--timeout", "30", "--",
            "python3", "-m", "verl.trainer.main_ppo", "trainer.nnodes=2", "trainer.n_gpus_per_node=8",
            "trainer.device=npu"]
    r = cluster.run("a", argv, cwd=ROOT, timeout=300)
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr[-3000:]
    return r.stdout


DAVINCI_DEV = [  # host-b's own /dev in its own mount namespace, with 8 NPU device nodes
    "mount -t tmpfs -o mode=755 doctor-dev /dev",
    *(f"mknod -m 666 /dev/{name} c {major} {minor}" for name, major, minor in
      (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0))),
    "mkdir /dev/shm /dev/pts", "mount -t tmpfs -o mode=1777 doctor-shm /dev/shm",
    "ln -s /proc/self/fd /dev/fd", "ln -s /proc/self/fd/0 /dev/stdin", "ln -s /proc/self/fd/1 /dev/stdout",
    "ln -s /proc/self/fd/2 /dev/stderr",
    *(f"mknod -m 666 /dev/davinci{i} c 236 {i}" for i in range(8)),
    "mknod -m 666 /dev/davinci_manager c 237 0",
]


def test_npus_registered_as_gpu_on_b(pair):
    # Ray 2.60 tries its accelerator managers in the order of a set of names: with --num-gpus=8
    # it registers GPU only when GPU comes before NPU, as under PYTHONHASHSEED=1.
    _restart_b(pair, "davinci-num-gpus", env={"PYTHONHASHSEED": "1"}, setup=DAVINCI_DEV, args=["--num-gpus=8"])
    doc = _doctor(pair)
    (f,) = _on_b(doc, "cluster.npu_resources")
    assert f["title"] == "Ray counts the 8 NPUs of host-b as 8 GPUs"
    assert f["evidence"]["resources"] == {"GPU": 8.0}
    a_ip = pair.nodes["a"].ip
    assert f["evidence"]["ray_start"] == (f"ray start --address={a_ip}:6379 --node-ip-address={pair.nodes['b'].ip} "
                                          "--resources='{\"NPU\": 8}'")
    assert f["evidence"]["ray_start"] in f["fix"] and "drop --num-gpus" in f["fix"]
