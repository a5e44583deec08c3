"""Round 3 of the cluster check (`--deep`) on one node: one rank of an all-reduce across all
nodes (Gloo, and NCCL/HCCL where every node has devices), in a subprocess of the target
interpreter with the node's environment, bounded.

Standard library only at top level; pickled by value, so a node needs no copy of doctor to run it.
"""
from __future__ import annotations

import json
import os
import subprocess
import time

from probes.cluster_node import node_environment


COLLECTIVE_SCRIPT = r"""
import json, sys, time
from datetime import timedelta
rank, world, master, port, backend, size = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
rank, world, port, size = int(rank), int(world), int(port), int(size)
import torch
import torch.distributed as dist
device = "cpu"
if backend == "nccl":
    device = "cuda:0"
elif backend == "hccl":
    import torch_npu  # noqa: F401
    device = "npu:0"
t0 = time.perf_counter()
dist.init_process_group(backend, init_method=f"tcp://{master}:{port}", rank=rank, world_size=world,
                        timeout=timedelta(seconds=float(sys.argv[7])))
init_s = time.perf_counter() - t0
x = torch.full((4,), float(rank + 1), device=device)
dist.all_reduce(x)
expect = world * (world + 1) / 2
ok = bool(torch.all(x == expect))
small = torch.ones(1, device=device)
lat = []
for _ in range(20):
    t = time.perf_counter(); dist.all_reduce(small)
    if device != "cpu": getattr(torch, device.split(":")[0]).synchronize()
    lat.append(time.perf_counter() - t)
big = torch.ones(size // 4, device=device)
dist.all_reduce(big)
reps = 5
t = time.perf_counter()
for _ in range(reps): dist.all_reduce(big)
if device != "cpu": getattr(torch, device.split(":")[0]).synchronize()
bw = size * reps / (time.perf_counter() - t)
dist.destroy_process_group()
lat.sort()
print("DOCTOR_RESULT " + json.dumps({"ok": ok, "value": x.tolist()[0], "expected": expect,
      "init_s": round(init_s, 4), "latency_us": round(lat[len(lat) // 2] * 1e6, 1),
      "bandwidth_MBps": round(bw / 2**20, 1)}))
"""


IMPORT_ALLOWANCE_S = 60.0  # starting python and importing torch (slow on a busy node)


def collective_bound(timeout: float) -> float:
    """How long one rank may take in all: torch's import, then the collective's own timeout."""
    return float(timeout) + IMPORT_ALLOWANCE_S


def collective(req: dict, rank: int, world: int, master: str, port: int, backend: str) -> dict:
    """Round 3 on one node: one rank of an all-reduce, in the target interpreter, bounded."""
    env = node_environment()
    argv = [req["python"], "-c", COLLECTIVE_SCRIPT, str(rank), str(world), master, str(port), backend,
            str(req.get("collective_bytes", 8 << 20)), str(req["timeout"])]
    bound = collective_bound(req["timeout"])
    t0 = time.perf_counter()
    try:
        r = subprocess.run(argv, cwd=req["cwd"] if os.path.isdir(req["cwd"]) else None, env=env,
                           capture_output=True, text=True, timeout=bound)
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return {"ok": False, "rank": rank, "error": f"no result within {bound:g} s (hung; killed)",
                "stderr": _error_lines(tail)}
    except OSError as exc:
        return {"ok": False, "rank": rank, "error": f"cannot run {req['python']}: {exc.strerror or exc}"}
    secs = round(time.perf_counter() - t0, 3)
    for line in r.stdout.splitlines():
        if line.startswith("DOCTOR_RESULT "):
            return {"rank": rank, "seconds": secs, **json.loads(line[len("DOCTOR_RESULT "):])}
    lines = _error_lines(r.stderr)
    return {"ok": False, "rank": rank, "seconds": secs, "returncode": r.returncode,
            "error": lines[-1] if lines else f"exit code {r.returncode}", "stderr": lines}


def _error_lines(text: str) -> list[str]:
    """The machine-printed error lines of a failed rank (last few), for the finding."""
    keep = [ln.strip() for ln in (text or "").splitlines()
            if any(w in ln for w in ("Error", "error", "failed", "Unable", "refused", "timed out"))]
    return keep[-4:]

