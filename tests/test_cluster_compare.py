"""The cross-node comparison on reports built from this machine's real facts: two copies of what
`gather_facts` finds here, one of them changed the way a second machine would differ (the
two-namespace tests in test_cluster.py cover what namespaces can plant; device files and Ray's
accelerator counts cannot be planted there)."""
from __future__ import annotations

import copy

import pytest

from checks.registry import all_checks
from checks.cluster import ClusterView, devices_match, interfaces_valid, links_work, nodes_answer
from probes.cluster_link import link_test
from probes.cluster_node import path_fingerprint, pick_address
from checks.context import CheckContext
from probes.facts import gather_facts
from launch.script import parse_launch


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("launch")
    launch = parse_launch(["python3", "-m", "verl.trainer.main_ppo", "trainer.nnodes=2"], cwd=cwd)
    return gather_facts(CheckContext.local(cwd=cwd, launch=launch))


def _node(facts: dict, name: str, ip: str, head: bool = False, **extra) -> dict:
    f = copy.deepcopy(facts)
    ifaces = f["interfaces"]
    links = {"gloo": pick_address("gloo", f["comm_env"], ifaces, [ip])}
    return {"id": f"{name}-id-0000", "ip": ip, "hostname": name, "head": head, "resources": {"CPU": 1.0},
            "facts": f, "links": links, "git": {}, "fingerprints": {}, **extra}


def _pair(facts, change=None, **view_kw) -> ClusterView:
    a, b = _node(facts, "host-a", "10.0.0.1", head=True), _node(facts, "host-b", "10.0.0.2")
    if change:
        change(b)
    return ClusterView({"nodes": [a, b], "dead": []}, **view_kw)


def _fails(findings):
    return [f for f in findings if f.status == "fail"]


def test_two_identical_nodes_give_no_failure(facts):
    view = _pair(facts)
    comparisons = all_checks("cluster")
    assert len(comparisons) >= 9
    for c in comparisons:
        assert _fails(c.fn(view)) == [], c.id


def test_ray_undercounting_npus_on_one_node(facts):
    def sixteen(n, ray_npus):
        n["facts"]["devices"]["davinci"] = 16
        n["resources"]["NPU"] = float(ray_npus)

    view = _pair(facts, lambda b: sixteen(b, 9), gpus_per_node=16)
    sixteen(view.reference, 16)
    (f,) = devices_match(view)
    assert (f.status, f.node) == ("fail", "host-b")
    assert "Ray counts 9 NPUs on host-b, which has 16" == f.title
    assert "--resources='{\"NPU\": 16}'" in f.fix


def test_ray_count_narrowed_by_the_nodes_visible_devices_variable(facts):
    def narrowed(n):
        n["facts"]["devices"]["davinci"] = 8
        n["resources"]["NPU"] = 4.0
        n["env"] = {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3"}

    view = _pair(facts, narrowed, gpus_per_node=8)
    view.reference["facts"]["devices"]["davinci"] = 8
    view.reference["resources"]["NPU"] = 8.0
    (f,) = devices_match(view)
    assert (f.status, f.node, f.title) == ("fail", "host-b", "Ray counts 4 NPUs on host-b, which has 8")
    assert "ASCEND_RT_VISIBLE_DEVICES=0,1,2,3 in the environment of its `ray start` leaves Ray 4" in f.message
    assert "--resources" not in f.fix and "ASCEND_RT_VISIBLE_DEVICES" in f.fix


def test_fewer_devices_than_n_gpus_per_node(facts):
    def devices(n, count):
        n["facts"]["devices"]["nvidia"] = count
        n["resources"]["GPU"] = float(count)

    view = _pair(facts, lambda b: devices(b, 4), gpus_per_node=8)
    devices(view.reference, 8)
    (f,) = devices_match(view)
    assert (f.status, f.node) == ("fail", "host-b") and "trainer.n_gpus_per_node=8" in f.title


def test_no_accelerators_anywhere_is_a_skip(facts):
    assert [f.status for f in devices_match(_pair(facts, gpus_per_node=8))] == ["skip"]


def test_fewer_alive_nodes_than_nnodes_and_a_silent_node(facts):
    def silent(b):
        del b["facts"]
        b["no_answer"] = "no answer within 20 s"

    fails = _fails(nodes_answer(_pair(facts, silent, nnodes=3)))
    assert {f.node for f in fails} == {"host-b", None}
    assert any("2 of trainer.nnodes=3" in f.title for f in fails)
    assert any(f.node == "host-b" and "no answer within 20 s" in f.message for f in fails)


def test_interface_variables_checked_against_each_nodes_interfaces(facts):
    down = [n for n, i in facts["interfaces"].items() if not i["up"]]
    up = next(n for n, i in facts["interfaces"].items() if i["up"] and n != "lo")

    def env(b, **values):
        b["facts"]["comm_env"].update(values)

    view = _pair(facts, lambda b: env(b, GLOO_SOCKET_IFNAME="nosuch0", NCCL_SOCKET_IFNAME="^" + up[:2]))
    titles = {f.title for f in _fails(interfaces_valid(view)) if f.node == "host-b"}
    assert "GLOO_SOCKET_IFNAME on host-b: no interface nosuch0" in titles
    assert "GLOO_SOCKET_IFNAME differs on host-b" in titles  # set on host-b only
    if down:
        view = _pair(facts, lambda b: env(b, GLOO_SOCKET_IFNAME=down[0]))
        assert any("is down" in f.title for f in _fails(interfaces_valid(view)))
    # NCCL/HCCL prefix syntax: a prefix that matches an interface that is up is fine
    view = _pair(facts, lambda b: env(b, NCCL_SOCKET_IFNAME=up[:2]))
    assert not [f for f in interfaces_valid(view) if "NCCL_SOCKET_IFNAME on" in f.title]


def test_address_choice_follows_each_transport_rules(facts):
    ifaces = facts["interfaces"]
    up = next(n for n, i in ifaces.items() if i["up"] and n != "lo" and i["ipv4"])
    assert pick_address("gloo", {"GLOO_SOCKET_IFNAME": up}, ifaces, [])["address"] == ifaces[up]["ipv4"][0]
    assert pick_address("gloo", {}, ifaces, ["127.0.1.1"])["address"] == "127.0.1.1"
    assert "error" in pick_address("gloo", {"GLOO_SOCKET_IFNAME": "nosuch0"}, ifaces, [])
    assert pick_address("hccl", {"HCCL_IF_IP": "10.9.9.9", "HCCL_SOCKET_IFNAME": up}, ifaces, [])["via"] == "HCCL_IF_IP"
    assert pick_address("hccl", {"HCCL_SOCKET_IFNAME": f"={up}"}, ifaces, [])["iface"] == up
    assert pick_address("nccl", {"NCCL_SOCKET_IFNAME": "^lo"}, ifaces, [])["iface"] != "lo"
    assert pick_address("nccl", {}, {"lo": ifaces["lo"], up: ifaces[up]}, [])["iface"] == up


def test_hostname_resolving_to_loopback_fails_the_link(facts):
    def loopback(b):
        b["links"] = {"gloo": pick_address("gloo", {}, b["facts"]["interfaces"], ["127.0.1.1"])}

    (f,) = _fails(links_work(_pair(facts, loopback)))
    assert f.node == "host-b" and "would bind loopback" in f.title


def test_nodes_sharing_one_address_are_told_apart_by_id(facts):
    a, b = _node(facts, "same", "10.0.0.1"), _node(facts, "same", "10.0.0.1")
    b["id"] = "other-id-1111"
    view = ClusterView({"nodes": [a, b]})
    assert a["label"] != b["label"]
    assert any("2 nodes would use 10.0.0.1" in f.title for f in _fails(links_work(view)))


def test_link_round_on_loopback_connects_and_checks_identity():
    """Two 'nodes' on two loopback addresses of this machine, in threads, one agreed port."""
    from concurrent.futures import ThreadPoolExecutor
    import random

    plan = {"n1": {"gloo": "127.0.0.2"}, "n2": {"gloo": "127.0.0.3"}}
    port = random.randint(42000, 48000)
    with ThreadPoolExecutor(2) as pool:
        r1, r2 = pool.map(lambda me: link_test(me, plan, port, 5.0), ["n1", "n2"])
    assert [r["ok"] for r in r1["results"] + r2["results"]] == [True, True]
    # a peer address nobody listens on: refused, reported, bounded by the window
    plan["n3"] = {"gloo": "127.0.0.4"}
    lone = link_test("n1", plan, port + 1, 1.5)
    bad = [r for r in lone["results"] if not r["ok"]]
    assert {r["to"] for r in bad} == {"n2", "n3"} and "refused" in bad[0]["error"]


def test_link_test_serves_two_transports_on_one_address():
    """GLOO_SOCKET_IFNAME and HCCL_SOCKET_IFNAME naming the same NIC (the seed article's 3.3): one
    listener per address must take both transports' connections from every peer."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    plan = {"n1": {"gloo": "127.0.0.2", "hccl": "127.0.0.2"},
            "n2": {"gloo": "127.0.0.3", "hccl": "127.0.0.3"},
            "n3": {"gloo": "127.0.0.5", "hccl": "127.0.0.5", "nccl": "127.0.0.5"}}
    port = random.randint(42000, 48000)
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda me: link_test(me, plan, port, 5.0), plan))
    results = [r for a in answers for r in a["results"]]
    assert len(results) == 2 * 2 * 3  # every ordered pair, over gloo and hccl (nccl: n3 only)
    assert [r for r in results if not r["ok"]] == []


def test_fingerprint_tells_same_size_files_apart(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for d, last in ((one, b"\x00"), (two, b"\x01")):
        d.mkdir()
        (d / "w.bin").write_bytes(b"x" * (3 << 20) + last)
    a, b = path_fingerprint(str(one)), path_fingerprint(str(two))
    assert a["size"] == b["size"] and a["digest"] != b["digest"]
    assert path_fingerprint(str(tmp_path / "absent")) == {"exists": False}


def test_git_state_of_a_source_checkout(tmp_path):
    import subprocess

    from probes.cluster_node import git_state

    repo = tmp_path / "verl-src"
    (repo / "verl").mkdir(parents=True)
    (repo / "verl" / "__init__.py").write_text("")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    state = git_state(str(repo / "verl" / "__init__.py"))
    assert state == {"root": str(repo), "commit": head, "dirty": False}
    (repo / "verl" / "__init__.py").write_text("x = 1\n")
    assert git_state(str(repo / "verl"))["dirty"] is True
    assert git_state(str(tmp_path)) is None
    # A pip-installed copy in a virtualenv kept inside the checkout (ignored by it) has no commit.
    installed = repo / ".venv" / "lib" / "site-packages" / "verl"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("")
    (repo / ".gitignore").write_text(".venv/\n")
    assert git_state(str(installed / "__init__.py")) is None


def test_unreachable_cluster_is_one_line_exit_2(doctor):
    import sys
    import time

    t0 = time.monotonic()
    r = doctor("check", "--cluster", "127.0.0.1:9", "--python", sys.executable, env={"RAY_AUTH_MODE": "disabled"})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "nothing answers at 127.0.0.1:9" in r.stderr
    assert time.monotonic() - t0 < 60


def test_interpreter_without_ray_is_one_line_exit_2(doctor, tmp_path):
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")], check=True)
    r = doctor("check", "--cluster", "127.0.0.1:9", "--python", str(tmp_path / "env" / "bin" / "python"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "cannot import ray" in r.stderr and "--python" in r.stderr
