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


# --- verl's multi-machine checklist on planted reports (what namespaces cannot plant: clocks,
# ranges against Ray's own ports, model sizes) -----------------------------------------------

from checks.cluster_checklist import hccl_port_ranges, hccl_timeouts, open_files  # noqa: E402
from checks.cluster_runtime import clocks_agree, npu_resources  # noqa: E402


def _npu_pair(facts, change=None, **kw):
    def npu(n):
        n["facts"]["devices"]["davinci"] = 8
        n["resources"]["NPU"] = 8.0
        n["env"] = {"HCCL_CONNECT_TIMEOUT": "3600", "HCCL_EXEC_TIMEOUT": "3600",
                    "HCCL_HOST_SOCKET_PORT_RANGE": "60000-60050"}
        n["raylet"] = {"pid": 1, "nofile": [65536, 65536], "ports": {"min_worker_port": 10002, "max_worker_port": 19999}}
        n["sysctl"] = {"ip_local_port_range": ["32768", "60999"], "ip_local_reserved_ports": ["60000-61050"]}

    def both(b):
        npu(b)
        if change:
            change(b)

    view = _pair(facts, both, nnodes=2, gpus_per_node=8, **kw)
    npu(view.reference)
    return view


def test_checklist_passes_a_clean_npu_pair(facts):
    view = _npu_pair(facts)
    for fn in (hccl_timeouts, hccl_port_ranges, open_files, npu_resources):
        assert fn(view) == [], fn.__name__


def test_hccl_timeout_below_what_a_32b_model_calls_for(facts):
    view = _npu_pair(facts, lambda b: b["env"].update(HCCL_CONNECT_TIMEOUT="1800"),
                     job={"params_b": 32.0, "params_from": "the model name Qwen2.5-32B"})
    (f,) = hccl_timeouts(view)[:1]
    assert (f.status, f.node) == ("fail", "host-b")
    assert f.title == "HCCL_CONNECT_TIMEOUT on host-b is 1800 s, below 3600 s for this job"
    assert "export HCCL_CONNECT_TIMEOUT=3600" in f.fix
    assert any(g.title == "HCCL_CONNECT_TIMEOUT differs on host-b" for g in hccl_timeouts(view))
    bad = _npu_pair(facts, lambda b: b["env"].update(HCCL_CONNECT_TIMEOUT="60"))
    assert any("HCCL_CONNECT_TIMEOUT=60 on host-b is not valid" == g.title for g in hccl_timeouts(bad))


def test_hccl_port_range_syntax_size_and_ray_overlap(facts):
    def planted(b):
        b["env"]["HCCL_HOST_SOCKET_PORT_RANGE"] = "15000-15003"  # 4 ports, inside Ray's worker ports
        b["env"]["HCCL_NPU_SOCKET_PORT_RANGE"] = "61000-61050,61040"  # overlapping items

    titles = {f.title: f for f in hccl_port_ranges(_npu_pair(facts, planted))}
    assert "HCCL_HOST_SOCKET_PORT_RANGE on host-b holds 4 ports, 8 ranks need 8" in titles
    assert "HCCL_HOST_SOCKET_PORT_RANGE on host-b overlaps Ray's ports" in titles
    assert "HCCL_NPU_SOCKET_PORT_RANGE=61000-61050,61040 on host-b is not valid" in titles
    assert all(f.node == "host-b" for f in titles.values())


def test_hccl_range_in_the_unreserved_ephemeral_range_warns(facts):
    view = _npu_pair(facts, lambda b: b["sysctl"].update(ip_local_reserved_ports=[]))
    (f,) = hccl_port_ranges(view)
    assert (f.status, f.node) == ("warn", "host-b")
    assert "ip_local_reserved_ports=60000-60050" in f.fix


def test_raylet_open_file_limit(facts):
    (f,) = open_files(_npu_pair(facts, lambda b: b["raylet"].update(nofile=[1024, 1024])))
    assert (f.status, f.node, f.evidence["soft"]) == ("fail", "host-b", 1024)
    (w,) = open_files(_npu_pair(facts, lambda b: b["raylet"].update(nofile=[20000, 20000])))
    assert w.status == "warn"  # above Ray's 8192, below verl's 32768 for an NPU job


def test_npus_without_an_npu_resource(facts):
    def no_npu(b):
        b["resources"].pop("NPU")

    (f,) = npu_resources(_npu_pair(facts, no_npu))
    assert f.title == "Ray has no NPU resource on host-b, which has 8 NPUs"
    assert f.fix == "on host-b: ray start --address=10.0.0.1:6379 --node-ip-address=10.0.0.2 --resources='{\"NPU\": 8}'"
    assert devices_match(_npu_pair(facts, no_npu)) == []  # one finding for one fact
    (both,) = npu_resources(_npu_pair(facts, lambda b: b["resources"].update(GPU=8.0)))
    assert both.title == "Ray counts the 8 NPUs of host-b as 8 GPUs as well as 8 NPUs"


def test_clock_skew_between_nodes(facts):
    def skewed(offset):
        view = _pair(facts)
        view.report["clock"] = {"host-a-id-0000": {"offset_s": 0.001, "uncertainty_s": 0.002},
                                "host-b-id-0000": {"offset_s": offset, "uncertainty_s": 0.002}}
        return clocks_agree(view)

    assert skewed(0.3) == []
    (w,) = skewed(-4.0)
    assert (w.status, w.node) == ("warn", "host-b") and "behind" in w.message
    (f,) = skewed(900.0)
    assert f.status == "fail" and "ahead of" in f.message


def test_ports_round_on_loopback_names_taken_ports_and_leaves_them_bindable():
    """Two 'nodes' on loopback addresses: one port of B's sample held by another listener; the
    others answer each way, and right after the test HCCL can bind them without SO_REUSEADDR."""
    import random
    import socket
    from concurrent.futures import ThreadPoolExecutor

    from probes.cluster_ports import ports_test

    base = random.randint(42000, 47000)
    ports = [base, base + 1, base + 2]
    holder = socket.socket()
    holder.bind(("127.0.0.3", ports[2]))
    holder.listen()

    def job(me, addr, peer, peer_addr):
        return {"listen": [[addr, p, 1] for p in ports],
                "connect": [{"to": peer, "what": "hccl_host", "addr": peer_addr, "port": p,
                             "token": f"{peer}|{peer_addr}:{p}"} for p in ports]}

    jobs = {"a": job("a", "127.0.0.2", "b", "127.0.0.3"), "b": job("b", "127.0.0.3", "a", "127.0.0.2")}
    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(lambda me: ports_test(me, jobs[me], 3.0), ["a", "b"])
    holder.close()
    assert list(b["listen_errors"]) == [f"127.0.0.3:{ports[2]}"] and "taken by" in b["listen_errors"][f"127.0.0.3:{ports[2]}"]
    assert [r["ok"] for r in a["results"]] == [True, True, False]  # the third reached the holder
    assert all(r["ok"] for r in b["results"])
    for addr in ("127.0.0.2", "127.0.0.3"):
        for p in ports[:2]:
            s = socket.socket()  # no SO_REUSEADDR, as a rank may bind it
            s.bind((addr, p))
            s.close()


def test_checklist_checks_have_their_page_and_name_real_explain_rules():
    from matching.catalog import load_rules

    ids = {r.id for r in load_rules()}
    new = [c for c in all_checks("cluster") if c.fn.__module__ in ("checks.cluster_checklist", "checks.cluster_runtime")]
    assert len(new) == 7
    for c in new:
        doc = c.fn.__doc__ or ""
        for section in ("What it checks:", "How the job fails without it:", "Fix:", "After the fact:"):
            assert section in doc, (c.id, section)
        named = [r.strip() for r in doc.split("After the fact:")[1].strip().split(",")]
        assert named and all(r in ids for r in named), (c.id, named)
