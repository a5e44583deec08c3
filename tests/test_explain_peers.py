"""Cause over consequence across processes: when one rank of a job fails of its own, its peer's
collective setup breaks, and the peer's communication error is what it saw of that failure.

The log is a real Ray run (a local instance): two tasks are the two ranks of a gloo group. Rank 0
really fails to allocate its memory (a 4 GiB tensor, RLIMIT_DATA 512 MiB above what it holds) before
it creates the group's store; rank 1, started after it, really times out connecting to it (in that
order whatever the machine's speed). Each prints its traceback as a worker does.
"""
from __future__ import annotations

import re

import pytest

from matching.explain import explain_text

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
