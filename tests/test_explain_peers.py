"""Cause over consequence across processes: when one rank of a job fails of its own, its peer's
collective setup breaks, and the peer's communication error is what it saw of that failure.

The log is a real Ray run (a local instance): two tasks are the two ranks of a gloo group. Rank 0
really fails to allocate its memory (a 4 GiB tensor, RLIMIT_DATA 512 MiB above what it holds) before
it creates the group's store; rank 1, started after it, really times out connecting to it (in that
order whatever the machine's speed). Each prints its traceback as a worker does. The same holds in
the generic layer, between CANN processes' own log files.
"""
from __future__ import annotations

import re

import pytest

from matching.explain import clean_line, explain_paths, explain_text

from .conftest import run_python

JOB = """import datetime, os, resource, socket, sys, traceback
import ray

@ray.remote(max_calls=1, max_retries=0)
def rank(r, port):
    import torch
    import torch.distributed as dist
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    try:
        if r == 0:
            # 512 MiB above what the worker holds now (its threads' arenas count): a 4 GiB tensor cannot fit
            data = next(int(ln.split()[1]) << 10 for ln in open("/proc/self/status") if ln.startswith("VmData:"))
            resource.setrlimit(resource.RLIMIT_DATA, (data + (512 << 20), hard))
            torch.empty(4 << 30, dtype=torch.uint8).fill_(1)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=r, world_size=2,
                                timeout=datetime.timedelta(seconds=3))
    except Exception:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))   # room to print what happened
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)

s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
ray.init(num_cpus=2, include_dashboard=False)
for r in (0, 1):   # rank 1 starts once rank 0 has ended, as a peer meets a rank already gone
    try:
        ray.get(rank.remote(r, port))
    except Exception as exc:
        print("rank ended:", type(exc).__name__)
"""
PID = re.compile(r"\(rank pid=(\d+)\)")


@pytest.fixture(scope="module")
def ray_log(tmp_path_factory) -> str:
    out = run_python(JOB, tmp_path_factory.mktemp("peers")).stdout
    assert "DefaultCPUAllocator: can't allocate memory" in out, out[-3000:]
    assert "DistNetworkError: The client socket has timed out" in out, out[-3000:]
    return out


def _pid_of(log: str, words: str) -> str:
    return next(PID.search(ln).group(1) for ln in log.splitlines() if words in ln and PID.search(ln))


def test_the_rank_that_ran_out_of_memory_is_the_cause_not_its_peers_timeout(ray_log):
    oom, timeout = _pid_of(ray_log, "can't allocate memory"), _pid_of(ray_log, "DistNetworkError")
    assert oom != timeout   # two processes
    found = explain_text(ray_log)
    assert (found[0].category, found[0].lines[0].process) == ("memory", f"rank pid={oom}")
    network = [f for f in found if f.category == "network"]
    assert network and network[0].lines[0].process == f"rank pid={timeout}"   # still shown, after it


def test_the_peers_timeout_alone_is_the_network(ray_log):
    oom = _pid_of(ray_log, "can't allocate memory")
    alone = "".join(ln for ln in ray_log.splitlines(keepends=True) if f"pid={oom})" not in ln)
    found = explain_text(alone)
    assert found and found[0].category == "network"


# CANN's own logs: each process writes its plog file (plog-<pid>_<time>.log), every line prefixed with the
# level, the module, and the process's pid and name. Lines from hixl's troubleshooting guide
# (https://github.com/hicann/hixl/blob/489f3e64c2c0c8990c120bd10d8d53e5198fce72/.agents/skills/hixl-troubleshoot/references/guides.md):
# the D side's link setup to the P side fails on a recv, because the P side has just run out of HBM. (The
# page spells the P side's level "ERR0R]"; CANN prints "[ERROR]".)
D_SIDE = """\
[ERROR] HCCL(128258,ker_DP51_EP51):2026-02-27-16:24:15.682.776 [adapter_hccp.cc:1505] [151808][Recv][RaSocket]errNo[0x000000000500000d] recv fail, data[0xfffceb7ee5e8], size[48], rtRet[228205]
[ERROR] HCCL(128258,ker_DP51_EP51):2026-02-27-16:24:15.682.785 [hccl_socket.cc:440] [151808][Recv]call trace: hcclRet -> 13
[ERROR] HCCL(128258,ker_DP51_EP51):2026-02-27-16:24:15.682.870 [transport_roce_mem.cc:363] [151738][ConnectImplWithTimeout]ConnectImplWithTimeout Prepare failed
"""
P_SIDE = """\
[ERROR] RUNTIME(27271,ker_DP7_EP7) :2026-02-27-16:24:15.595.677 [npu_driver.cc:1534]34603 DevMemAllocHugePageManaged:[drv api] halMemAlloc failed:size=2122688(bytes), type=2, moduleId=3, drvFlag=216172782123369479, drvRetCode=6, device_id 7, ErrCode=207001, desc=[driver error:out of memory], InnerCode=0x7020016
"""


def test_cann_s_prefix_names_the_process_and_stays_in_the_text():
    line = clean_line(D_SIDE.splitlines()[0].encode())
    assert line.process == "ker_DP51_EP51 pid=128258"
    assert line.text == D_SIDE.splitlines()[0]
    assert clean_line(P_SIDE.encode()).process == "ker_DP7_EP7 pid=27271"   # a space before the colon


def test_a_peer_s_own_failure_in_another_plog_ranks_before_the_link_failure_it_caused(tmp_path):
    # the D side's file sorts first by name, and no rule names either: the generic layer ranks them
    (tmp_path / "plog-128258_20260227162415682.log").write_text(D_SIDE)
    (tmp_path / "plog-27271_20260227162415595.log").write_text(P_SIDE)
    found = explain_paths([str(tmp_path)])
    assert all(f.generic for f in found)
    assert (found[0].category, found[0].lines[0].process) == ("memory", "ker_DP7_EP7 pid=27271")
    assert any(f.category == "network" for f in found[1:])   # still shown, after it
    alone = explain_text(D_SIDE)
    assert alone and alone[0].category == "network"
