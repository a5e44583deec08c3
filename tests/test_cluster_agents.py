"""doctor's agents on the nodes (probes/cluster_agents.py `NodeAgent`): a repeated `doctor check
--cluster` asks the agent already running on each node instead of starting a Python process there.
On the two-namespace cluster of test_cluster.py: reuse with fresh facts, `--no-keep-agents`, and
an agent killed between checks; and, without Ray, the version naming that keeps an upgraded
doctor from talking to an old agent."""
from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from probes.cluster_agents import AGENT_PREFIX, CODE_DIRS, agent_name, code_version
from tests.netns import ROOT, NetnsCluster
from tests.test_cluster import _doctor as _doctor_at, _failures, two_hosts  # noqa: F401 (the module's cluster)

AGENT_PROCESS = b"ray::NodeAgent"  # the title Ray gives the actor's worker process


def test_changed_node_side_source_names_another_agent(tmp_path):
    for d in CODE_DIRS:
        shutil.copytree(ROOT / d, tmp_path / d, ignore=shutil.ignore_patterns("__pycache__"))
    before = code_version(tmp_path)
    assert code_version(tmp_path) == before == code_version(ROOT)  # contents, not where they lie
    with open(tmp_path / "probes" / "facts.py", "a") as fh:
        fh.write("\n# a new doctor\n")
    after = code_version(tmp_path)
    assert after != before
    (tmp_path / "knowledge" / "versions.toml").write_text("# another matrix\n")
    assert code_version(tmp_path) not in (before, after)
    node = "f" * 56
    assert agent_name(before, node) != agent_name(after, node)
    assert agent_name(after, node).startswith(AGENT_PREFIX) and node in agent_name(after, node)
    assert agent_name(after, node, shipped=True) != agent_name(after, node)


@pytest.fixture(scope="module")
def hosts(two_hosts):  # noqa: F811
    """Host B runs Ray with its own copies of the launch directory and the model, at the same
    paths, so a test can change what B sees without restarting B (its agent stays). doctor runs
    from a copy of this checkout, as an installed doctor would: engineers editing checks/ meanwhile
    must not change its code version between two checks."""
    lay = two_hosts.layout
    two_hosts.doctor_root = lay["launch"].parent / "doctor-install"
    for d in ("doctor", *CODE_DIRS):
        shutil.copytree(ROOT / d, two_hosts.doctor_root / d, ignore=shutil.ignore_patterns("__pycache__"))
    two_hosts.own = {"launch": lay["launch"].parent / "launch-b-own", "model": lay["model"].parent / "model-b-own"}
    for key, copy in two_hosts.own.items():
        shutil.copytree(lay[key], copy)
    _restart_b(two_hosts)
    return two_hosts


def _restart_b(cluster: NetnsCluster, hide: list[Path] = ()) -> None:
    """Host B's Ray again, with its own copies, and with the directories in `hide` empty there."""
    binds = {str(cluster.layout[key]): str(copy) for key, copy in cluster.own.items()}
    empty = cluster.base / "empty"
    empty.mkdir(exist_ok=True)
    binds.update({str(d): str(empty) for d in hide})
    cluster.stop_node("b", grace=2.0)
    cluster.wait_nodes(1)
    cluster.start_ray("b", env={"GLOO_SOCKET_IFNAME": "eth6"}, binds=binds)
    cluster.wait_nodes(2)
    cluster.b_plant = "own copies" + (", no doctor" if hide else "")


def _doctor(cluster: NetnsCluster, *extra: str) -> dict:
    doc, _ = _doctor_at(cluster, *extra, root=cluster.doctor_root)
    return doc


def _agents(doc: dict) -> dict:
    (f,) = [f for f in doc["findings"] if f["id"] == "cluster.nodes" and f["status"] == "pass"]
    return {**f["evidence"]["agents"], "title": f["title"]}


def _agent_pids(cluster: NetnsCluster, node: str) -> list[int]:
    pids = []
    for pid in cluster.pids(cluster.nodes[node].ns):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(AGENT_PROCESS):
                pids.append(int(pid))
        except OSError:  # it ended meanwhile
            pass
    return pids


def _wait_no_agent_processes(cluster: NetnsCluster, timeout: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        left = _agent_pids(cluster, "a") + _agent_pids(cluster, "b")
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)  # the agents' processes end by themselves; do not spin on /proc meanwhile


def _named_actors(cluster: NetnsCluster) -> list[str]:
    """Named actors in doctor's namespace, as a fresh driver on host A sees them."""
    code = ("import ray\n"
            f"ray.init(address='{cluster.address}', namespace='doctor', logging_level='ERROR', log_to_driver=False)\n"
            "import json; print(json.dumps(sorted(ray.util.list_named_actors())))\n")
    r = cluster.run("a", [cluster.python, "-c", code], timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.netns
def test_second_check_reuses_both_agents_and_sees_a_change_made_between(hosts):
    first = _doctor(hosts)
    assert _failures(first) == []
    model = hosts.own["model"] / "model.safetensors"
    original = model.read_bytes()
    try:  # between the checks, host B's model gets other content and a vllm/ tree appears in its launch dir
        changed = bytearray(original)
        changed[-1] ^= 0xFF  # inside the tail the fast fingerprint reads
        model.write_bytes(bytes(changed))
        (hosts.own["launch"] / "vllm").mkdir()
        (hosts.own["launch"] / "vllm" / "__init__.py").write_text("")
        second = _doctor(hosts)
    finally:
        model.write_bytes(original)
        shutil.rmtree(hosts.own["launch"] / "vllm", ignore_errors=True)
    agents = _agents(second)
    assert (agents["reused"], agents["started"], agents["kept"]) == (2, 0, True)
    assert agents["by_node"] == {"host-a": "reused", "host-b": "reused"}
    assert "node agents: 2 reused" in agents["title"]
    fails = {(f["id"], f["node"]): f for f in _failures(second)}
    assert "different content: model.safetensors" in fails[("cluster.paths", "host-b")]["message"]
    assert "import vllm" in fails[("cluster.imports", "host-b")]["title"]
    assert {node for _, node in fails} == {"host-b"}


@pytest.mark.netns
def test_no_keep_agents_ends_every_agent(hosts):
    doc = _doctor(hosts, "--no-keep-agents")
    assert _failures(doc) == []
    agents = _agents(doc)
    assert agents["kept"] is False and agents["title"].endswith(", then ended")
    assert _named_actors(hosts) == []
    assert _wait_no_agent_processes(hosts) == []
    again = _doctor(hosts)
    assert _agents(again)["by_node"] == {"host-a": "started", "host-b": "started"}


@pytest.mark.netns
def test_agent_killed_between_checks_is_started_again(hosts):
    _doctor(hosts)  # both agents run now
    (pid,) = _agent_pids(hosts, "b")
    os.kill(pid, signal.SIGKILL)  # the agent crashes; host B's Ray goes on
    doc = _doctor(hosts)
    assert _failures(doc) == []
    assert _agents(doc)["by_node"] == {"host-a": "reused", "host-b": "started"}
    (new_pid,) = _agent_pids(hosts, "b")
    assert new_pid != pid
    assert len([n for n in _named_actors(hosts) if n.startswith(AGENT_PREFIX)]) == 2


@pytest.mark.netns
def test_node_without_doctor_gets_an_agent_running_the_shipped_code(hosts):
    # Host B sees neither the copy doctor runs from nor this checkout's node-side code (CODE_DIRS).
    _restart_b(hosts, hide=[hosts.doctor_root, *(ROOT / d for d in CODE_DIRS)])
    try:
        first = _doctor(hosts)
        assert _failures(first) == []
        assert _agents(first)["by_node"]["host-b"] == "started"
        second = _doctor(hosts)
        assert _failures(second) == []
        assert _agents(second)["by_node"] == {"host-a": "reused", "host-b": "reused"}
        assert len([n for n in _named_actors(hosts) if n.endswith("-shipped")]) == 1
    finally:
        _restart_b(hosts)
