"""network: interface variables judged under each variable's own syntax, against the interfaces a
node really has. Each layout is a private network + UTS + mount namespace with real interfaces
(veth pairs), a hostname and an /etc/hosts; the checks run inside it (the host's network is
untouched), once per scenario. The CLI's own path is covered by the last test."""
from __future__ import annotations

import json

import pytest

from tests.lab.netns import Iface, Layout, network_findings, run_in, unavailable
from tests.lab.run import by_id, clean_env, doctor_argv

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=unavailable() or "")

# eth7 and eth8 are two NICs; veth7/veth8 their unaddressed peers; eth9 exists but is down.
TWO_NICS = Layout(pairs=[(Iface("eth7", "10.7.0.1/24"), Iface("veth7")),
                         (Iface("eth8", "10.8.0.1/24"), Iface("veth8")),
                         (Iface("eth9", "10.9.0.1/24", up=False), Iface("veth9", up=False))],
                  hostname="node7", hosts="127.0.0.1 localhost\n10.7.0.1 node7\n")
# One NIC, and the hostname resolving to loopback as in many containers.
LOOPBACK_HOST = Layout(pairs=[(Iface("eth7", "10.7.0.1/24"), Iface("veth7"))],
                       hostname="node7", hosts="127.0.0.1 localhost\n127.0.1.1 node7\n")


def env(tmp_path):
    return clean_env(DOCTOR_ASCEND_ROOT=str(tmp_path))


@pytest.fixture(scope="module")
def two_nics(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("two_nics")
    scenarios = [
        # 0: every variable names an interface this node lacks
        {"nodes": 2, "env": {"GLOO_SOCKET_IFNAME": "eth6", "HCCL_SOCKET_IFNAME": "=eth6",
                             "NCCL_SOCKET_IFNAME": "ib"}},
        # 1: real interfaces, each under its own syntax: prefix, exclusion, exact
        {"nodes": 2, "env": {"GLOO_SOCKET_IFNAME": "eth7", "HCCL_SOCKET_IFNAME": "eth",
                             "NCCL_SOCKET_IFNAME": "^veth,lo,eth9", "TP_SOCKET_IFNAME": "eth7",
                             "HCCL_IF_IP": "10.7.0.1"}},
        # 2: wrong syntax for Gloo, an interface that is down, loopback, a foreign HCCL_IF_IP
        {"nodes": 2, "env": {"GLOO_SOCKET_IFNAME": "eth", "TP_SOCKET_IFNAME": "eth9",
                             "NCCL_SOCKET_IFNAME": "lo", "HCCL_IF_IP": "10.7.0.99"}},
        # 3: nothing set, two candidate NICs, MASTER_ADDR routed through eth8
        {"nodes": 2, "env": {"MASTER_ADDR": "10.8.0.2"}},
    ]
    return network_findings(TWO_NICS, scenarios, tmp, env=env(tmp))


def _by_var(found):
    return {f["evidence"]["variable"]: f for f in found.get("network.ifname", [])}


def test_variables_naming_a_missing_interface_fail(two_nics):
    found = _by_var(two_nics[0])
    assert {v: f["status"] for v, f in found.items()} == {
        "GLOO_SOCKET_IFNAME": "fail", "HCCL_SOCKET_IFNAME": "fail", "NCCL_SOCKET_IFNAME": "fail"}
    gloo = found["GLOO_SOCKET_IFNAME"]
    assert gloo["category"] == "network" and "eth6" in gloo["title"] and "eth7" in gloo["message"]
    assert gloo["fix"].startswith("export GLOO_SOCKET_IFNAME=eth")


def test_variables_naming_real_interfaces_pass(two_nics):
    found = two_nics[1]
    assert [f["status"] for f in found["network.interfaces"]] == ["pass"]
    assert [f["status"] for f in found["network.hostname"]] == ["pass"]


def test_syntax_state_and_address_problems(two_nics):
    found = _by_var(two_nics[2])
    assert found["GLOO_SOCKET_IFNAME"]["status"] == "fail"
    assert "exact names" in found["GLOO_SOCKET_IFNAME"]["message"]
    assert found["TP_SOCKET_IFNAME"]["status"] == "fail" and "up" in found["TP_SOCKET_IFNAME"]["title"]
    assert found["NCCL_SOCKET_IFNAME"]["status"] == "warn" and "loopback" in found["NCCL_SOCKET_IFNAME"]["title"]
    (ip,) = two_nics[2]["network.if_ip"]
    assert ip["status"] == "fail" and "10.7.0.99" in ip["title"]


def test_unset_with_several_candidates_warns_and_names_the_routed_nic(two_nics):
    (f,) = two_nics[3]["network.unset"]
    assert f["status"] == "warn" and "GLOO_SOCKET_IFNAME" in f["title"]
    assert "export GLOO_SOCKET_IFNAME=eth8" in f["fix"]


def test_hostname_resolving_to_loopback(tmp_path):
    scenarios = [{"nodes": 2}, {"nodes": 2, "env": {"GLOO_SOCKET_IFNAME": "eth7"}}, {"nodes": 1}]
    unset_gloo, set_gloo, single = network_findings(LOOPBACK_HOST, scenarios, tmp_path, env=env(tmp_path))
    (f,) = unset_gloo["network.hostname"]
    assert f["status"] == "fail" and "127.0.1.1" in f["message"]
    assert "export GLOO_SOCKET_IFNAME=eth7" in f["fix"]
    assert [f["status"] for f in unset_gloo["network.unset"]] == ["pass"]  # one candidate only
    # GLOO_SOCKET_IFNAME set to a good interface: Gloo never resolves the hostname.
    assert [f["status"] for f in set_gloo["network.hostname"]] == ["pass"]
    # A single-node job: not a finding.
    assert [f["status"] for f in single["network.hostname"]] == ["skip"]


def test_cli_reads_multi_node_from_the_launch(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("python3 -m verl.trainer.main_ppo trainer.nnodes=2 trainer.n_gpus_per_node=8\n")
    r = run_in(LOOPBACK_HOST, doctor_argv("--only", "network", "--cwd", str(tmp_path), "--",
                                          "bash", str(script)), tmp_path, env=env(tmp_path))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert by_id(json.loads(r.stdout))["network.hostname"][0]["status"] == "fail"
