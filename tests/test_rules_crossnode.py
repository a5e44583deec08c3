"""Cross-node families (knowledge/rules/crossnode.toml): the retry and fallback forms of the same
messages, which healthy runs print, stay unmatched. Lines are built from the format strings the
rules cite (NCCL socket.cc v2.27 INFO retry, Gloo debug_logger.cc willRetry=1, c10d socket.cpp's
IPv6 attempt on [localhost], a Trainer warning in a run that went on)."""
from __future__ import annotations

import pytest

from matching.explain import explain_paths

BENIGN = {
    "nccl-retry": "host-a:10:20 [0] NCCL INFO socketStartConnect: connect to 10.0.0.2<40121> returned "
                  "Connection refused, retrying (1/34) after sleep for 100 msec",
    "gloo-retry": "[I1201 10:00:00.1 1 debug_logger.cc:15] failed to connect, willRetry=1, retry=0, retryLimit=3, "
                  "rank=1, size=2, local=[10.0.0.2]:4100, remote=[10.0.0.1]:4200, error=SO_ERROR: No route to host, "
                  "remote=[10.0.0.1]:4200",
    "c10d-ipv6-localhost": "[W1201 10:00:00.1 1 socket.cpp:752] [c10d] The client socket has failed to connect to "
                           "[localhost]:29500 (errno: 99 - Cannot assign requested address).",
    "trainer-warning": "[WARNING|trainer.py:2851] >> Could not locate the best model at out/checkpoint-4/model.bin, if "
                       "you are running a distributed training on multiple nodes, you should activate `--save_on_each_node`.",
    "nccl-ib-optional-verb": "host-a:10:10 [0] NCCL INFO Call to ibv_query_ece failed with error Operation not supported errno 95",
    "nccl-ib-benign-event": "host-a:10:40 [0] transport/net_ib.cc:94 NCCL WARN NET/IB : mlx5_0:1 Got async event : GID table change",
    "c10d-dns-late": "[W1201 10:00:00.1 1 socket.cpp:759] [c10d] The IPv4 network addresses of (trainer-0.svc, 29500) "
                     "cannot be retrieved (gai error: -2 - Name or service not known).",
    "nccl-interface-list": "host-a:10:10 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0> [1]veth1a2b:fe80::1%veth1a2b<0>",
}


@pytest.mark.parametrize("name", sorted(BENIGN))
def test_a_healthy_runs_form_of_the_message_is_no_finding(tmp_path, name):
    log = tmp_path / f"{name}.log"
    log.write_text("\n".join([BENIGN[name], "step:1 - actor/pg_loss:0.1", "step:2 - actor/pg_loss:0.1"]) + "\n")
    assert explain_paths([str(log)]) == [], name


def test_a_virtual_interface_is_not_blamed_for_a_cuda_failure(tmp_path):
    # one node, NCCL lists a bridge and then fails for a CUDA reason: not a network finding
    log = tmp_path / "one-node.log"
    log.write_text("host-a:10:10 [0] NCCL INFO NET/Socket : Using [0]docker0:172.17.0.1<0> [1]veth9:fe80::2%veth9<0>\n"
                   "host-a:10:30 [0] enqueue.cc:1100 NCCL WARN Cuda failure 'out of memory'\n"
                   "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error "
                   "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n")
    assert all(f.rule != "nccl-socket-virtual-interface" for f in explain_paths([str(log)]))
