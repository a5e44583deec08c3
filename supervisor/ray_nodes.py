"""How many nodes of a running Ray cluster answer now (the supervisor waits for them before a
relaunch). The probe runs in the job's interpreter, so the supervisor itself never imports ray."""
from __future__ import annotations

import json
import subprocess

_NODE_PROBE = r"""
import json, os, sys
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
@ray.remote(num_cpus=0)
def here():
    return 1
alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
refs = [here.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
        for n in alive]
ready, _ = ray.wait(refs, num_returns=len(refs), timeout=float(sys.argv[2]))
print(json.dumps({"alive": len(alive), "answering": len(ready)}), flush=True)
os._exit(0)
"""


def answering_nodes(python: str, address: str, env: dict[str, str], timeout: float = 10.0) -> int:
    """Nodes of the cluster at `address` that run a task now (a node the GCS has not yet declared
    dead is listed alive but does not answer). 0 when the cluster cannot be reached."""
    try:
        out = subprocess.run([python, "-c", _NODE_PROBE, address, str(timeout)], env=env,
                             capture_output=True, text=True, timeout=timeout + 60)
        return int(json.loads(out.stdout.strip().splitlines()[-1])["answering"])
    except (subprocess.TimeoutExpired, ValueError, IndexError, KeyError, OSError):
        return 0
