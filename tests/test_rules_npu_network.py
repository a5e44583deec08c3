"""The Ascend / HCCL / NCCL / Gloo / vLLM failure rules (knowledge/rules/{ascend,network,vllm}.toml).

Each rule is checked against its fixtures (real log excerpts from public issues, or failures
reproduced on this machine), the clean logs must stay silent, and two failures are reproduced live
here so the rules keep matching what this torch actually prints.
"""
from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from matching.catalog import RULES_DIR, load_file, load_rules
from matching.explain import explain_paths, explain_text
from tests.conftest import ROOT, SHARED
from tests.netns import NetnsCluster, netns_unavailable_reason

RULE_FILES = ("ascend.toml", "network.toml", "vllm.toml")
FIXTURES = ROOT / "tests" / "fixtures" / "explain"
CLEAN_LOGS = sorted((SHARED / "research" / "clean-logs").glob("*.log"))

OUR_RULES = [rule for name in RULE_FILES for rule in load_file(RULES_DIR / name)]
OUR_IDS = {rule.id for rule in OUR_RULES}


def fixtures_of(rule_id: str) -> list[Path]:
    return sorted([*FIXTURES.glob(f"{rule_id}.log"), *FIXTURES.glob(f"{rule_id}--*.log")])


OUR_FIXTURES = [path for rule in OUR_RULES for path in fixtures_of(rule.id)]


def test_rule_files_load_with_unique_ids():
    catalog_ids = [rule.id for rule in load_rules()]
    assert len(catalog_ids) == len(set(catalog_ids))
    assert OUR_IDS <= set(catalog_ids)
    assert len(OUR_RULES) >= 30


@pytest.mark.parametrize("rule", OUR_RULES, ids=lambda r: r.id)
def test_every_rule_has_a_sourced_fixture(rule):
    paths = fixtures_of(rule.id)
    assert paths, f"{rule.id} has no fixture"
    for path in paths:
        first = path.read_text(errors="replace").splitlines()[0]
        assert first.startswith("# source: https://") or first.startswith("# source: reproduced here: "), path
        assert len(path.read_text(errors="replace").splitlines()) > 1, f"{path.name} has no log lines"


@pytest.mark.parametrize("path", OUR_FIXTURES, ids=lambda p: p.name)
def test_fixture_is_explained_by_its_rule_first(path):
    expected = path.name[:-len(".log")].split("--")[0]
    found = explain_paths([str(path)])
    assert found, f"nothing explained {path.name}"
    assert found[0].rule == expected, [f.rule for f in found]
    assert found[0].lines, "the finding shows no evidence line"


@pytest.mark.parametrize("path", CLEAN_LOGS, ids=lambda p: p.name)
def test_clean_logs_give_no_finding_from_these_rules(path):
    assert not [f.rule for f in explain_paths([str(path)]) if f.rule in OUR_IDS]


def test_memory_rules_name_the_phase_the_supervisor_acts_on():
    # `npu-oom` is the fallback for an NPU OOM whose phase the log does not show; the supervisor then
    # takes the phase from the trainer's `[trainer] phase=X failed` marker.
    for rule in OUR_RULES:
        if rule.category == "memory" and rule.id != "npu-oom":
            assert rule.phase, f"{rule.id} is a memory rule without a phase"
    found = explain_paths([str(FIXTURES / "npu-oom-rollout-init.log")])
    assert (found[0].rule, found[0].phase) == ("npu-oom-rollout-init", "rollout_init")


def _text(name: str) -> str:
    return "\n".join((FIXTURES / name).read_text().splitlines()[1:]) + "\n"


def test_a_consequence_never_outranks_the_cause_it_follows():
    # The watchdog abort is printed first here, the real NCCL failure later: the cause still leads.
    found = explain_text(_text("nccl-watchdog-timeout.log") + _text("nccl-unhandled-system-error.log"))
    assert found[0].rule == "nccl-unhandled-system-error"
    assert "nccl-watchdog-timeout" in [f.rule for f in found]
    found = explain_text(_text("vllm-engine-core-init-failed.log") + _text("vllm-no-cache-blocks.log"))
    assert found[0].rule == "vllm-no-cache-blocks"


def test_gloo_loopback_warning_alone_is_not_a_finding():
    warning = _text("gloo-loopback-fallback.log").splitlines()[0] + "\n"
    assert "Using the loopback address as fallback" in warning
    assert not [f.rule for f in explain_text(warning) if f.rule in OUR_IDS]
    # joined to the failure that follows it, the warning is the explanation
    found = explain_text(_text("gloo-loopback-fallback.log"))
    assert found[0].rule == "gloo-loopback-fallback"


def test_hccl_port_in_use_explains_the_link_timeout_after_it():
    found = explain_paths([str(FIXTURES / "hccl-port-in-use.log")])
    rules = [f.rule for f in found]
    assert rules[0] == "hccl-port-in-use" and "hccl-socket-timeout" in rules


# One line per message form, written as the source prints it with another value in each variable part
# (a device, a result code within its family, a version, a duration): a rule must match the words, not the
# values of the log it was written from. Where each form comes from is in the rule's comment.
MESSAGE_FORMS = [
    ("open device 1 failed, runtime result = 107001.[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:161]",
     "npu-set-device-failed"),
    ("[ERROR]  acl set device 3 failed, errorCode = 507899", "npu-set-device-failed"),
    ("RuntimeError: NPU function error: c10_npu::SetDevice(device_index), error code is 507033",
     "npu-set-device-failed"),
    ("EL0004: [PID: 912] 2025-06-01-10:00:00.000.001 Failed to allocate memory.", "npu-oom"),
    ("RuntimeError: NPU function error: aclrtMallocAlign32, error code is 207018", "npu-oom"),
    ("RuntimeError: HCCL function error: HcclCommInitRootInfo(numRanks, &rootInfo, rank, &(comm->hcclComm_)), "
     "error code is 9", "hccl-comm-init-failed"),
    ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled system error "
     "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5", "nccl-unhandled-system-error"),
    ("ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
     "nccl-unhandled-system-error"),
    ("NCCL error: remote process exited or there was a network error, NCCL version 2.27.3",
     "nccl-remote-error"),
    ("NET/IB: Got completion from peer 10.0.0.2<51234> with status=12 opcode=0 len=0 vendor err 129 (Send)",
     "nccl-ib-completion-error"),
    ("NET/IB : Got completion from peer 10.0.0.2<51234> with error 12, opcode 0, len 0, vendor err 129",
     "nccl-ib-completion-error"),
    ("[c10d] The client socket has timed out after 600s while trying to connect to (10.0.0.1, 29500).",
     "torch-dist-store-timeout"),
    ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 7/8 clients joined.",
     "torch-dist-store-clients-missing"),
    ("ValueError: The decoder prompt (length 9000) is longer than the maximum model length of 8192. Make sure "
     "that `max_model_len` is no smaller than the number of text tokens.", "vllm-prompt-longer-than-max-model-len"),
    ("ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be "
     "stored in KV cache (21520).", "vllm-max-len-exceeds-kv-cache"),
    ("EI0002: [PID: 77] A timeout occurs when the Notify register waits for execution. Waiting peer rank: 3; "
     "task information: streamID:[2]", "hccl-notify-wait-timeout"),
    ("EI0009: [PID: 77] Device 5 transport init error. Reason: [Create][DestLink]Create Dest error!",
     "hccl-transport-init-error"),
    ("EI0005: [PID: 77] The parameters of operator HcomAllGather are inconsistent between ranks, parameter count "
     "is 1024 on the local rank and 512 on the remote rank.", "hccl-args-inconsistent"),
    ("RuntimeError: HCCL function error: HcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, &config, "
     "&(comm->hcclComm_)), error code is 7", "hccl-comm-init-failed"),
]


@pytest.mark.parametrize("line,rule", MESSAGE_FORMS, ids=[f"{r}-{i}" for i, (_, r) in enumerate(MESSAGE_FORMS)])
def test_each_message_form_of_a_family_is_explained(line, rule):
    found = explain_text(line + "\n")
    assert found and found[0].rule == rule, [f.rule for f in found]


def test_live_store_whose_ranks_never_join_is_a_consequence():
    """Rank 0's store times out waiting for a rank that never came (real torch): named, but as the
    after-effect it is, so the absent rank's own error would rank first."""
    script = FIXTURES / "repro" / "store_clients.py"
    proc = subprocess.run([sys.executable, str(script), str(_free_port())], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0
    found = explain_text(proc.stderr)
    assert found and found[0].rule == "torch-dist-store-clients-missing", proc.stderr[-2000:]
    assert found[0].consequence
    cause = _text("nccl-unhandled-system-error.log")
    assert explain_text(proc.stderr + cause)[0].rule == "nccl-unhandled-system-error"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Two real torch.distributed failures in one interpreter (torch imports once): a Gloo interface that
# does not exist, then a store port another socket holds. Each prints its own traceback.
LIVE_FAILURES = """
import datetime, os, socket, sys, traceback
import torch.distributed as dist

def init(port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=10))

for scenario, port in (("gloo-socket-ifname-not-found", int(sys.argv[1])),
                       ("torch-dist-port-in-use", int(sys.argv[2]))):
    print("=== " + scenario, file=sys.stderr, flush=True)
    holder = None
    if scenario == "gloo-socket-ifname-not-found":
        os.environ["GLOO_SOCKET_IFNAME"] = "doctor-no-such-nic0"
    else:
        os.environ.pop("GLOO_SOCKET_IFNAME", None)
        holder = socket.socket()
        holder.bind(("127.0.0.1", port))
        holder.listen()
    try:
        init(port)
    except Exception:
        traceback.print_exc()
    if holder:
        holder.close()
"""


def test_live_torch_distributed_failures_are_explained():
    proc = subprocess.run([sys.executable, "-c", LIVE_FAILURES, str(_free_port()), str(_free_port())],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    parts = proc.stderr.split("=== ")[1:]
    assert len(parts) == 2, proc.stderr[-2000:]
    for part in parts:
        scenario, output = part.split("\n", 1)
        found = explain_text(output)
        assert found and found[0].rule == scenario, output[-2000:]


# Rank script for the two-host test: a Gloo all-reduce with GLOO_SOCKET_IFNAME unset.
GLOO_RANK = """
import datetime, sys, torch, torch.distributed as dist
rank, master = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method=f"tcp://{master}:29541", rank=rank, world_size=2,
                        timeout=datetime.timedelta(seconds=20))
x = torch.ones(4)
dist.all_reduce(x)
print("all-reduce done", x.tolist())
"""


@pytest.mark.netns
@pytest.mark.skipif(netns_unavailable_reason() is not None, reason=str(netns_unavailable_reason()))
def test_live_two_hosts_whose_hostname_resolves_to_loopback(tmp_path):
    """DESIGN.md's trap: GLOO_SOCKET_IFNAME unset and the hostname on 127.0.0.1 prints no warning;
    every rank advertises loopback and connectFullMesh fails. The log must still name it."""
    import os
    cluster = NetnsCluster(tmp_path, tag=f"ex{os.getpid() % 1000}")
    procs: list[subprocess.Popen] = []
    try:
        cluster.create()
        for node in cluster.nodes.values():  # a container-style /etc/hosts: hostname -> 127.0.0.1
            (Path("/etc/netns") / node.ns / "hosts").write_text(
                f"127.0.0.1 localhost {node.hostname}\n::1 localhost\n")
        master = cluster.nodes["a"].ip
        for rank, node in enumerate("ab"):
            argv = cluster.argv(node, [sys.executable, "-c", GLOO_RANK, str(rank), master])
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        # One rank fails within a second of meeting the other; the other hangs in Gloo's connect.
        first = _first_to_exit(procs, timeout=150)
        output = first.stdout.read()
    finally:
        cluster.destroy()
        for proc in procs:
            proc.wait(timeout=30)
    assert first.returncode != 0, output
    found = explain_text(output)
    assert found and found[0].rule == "gloo-hostname-loopback", output[-2000:]


def _first_to_exit(procs: list[subprocess.Popen], timeout: float) -> subprocess.Popen:
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                return proc
        time.sleep(0.1)
    raise AssertionError("neither Gloo rank finished")
