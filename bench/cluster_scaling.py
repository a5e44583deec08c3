"""How `doctor check --cluster` scales with the number of nodes: 2 nodes vs 8 nodes.

Both clusters are Ray's local multi-node simulation (`ray.cluster_utils.Cluster`: one raylet per
"node", all on loopback of this machine), started side by side, and the check runs against
each in turn, alternating, so both see the same machine load. Two figures per cluster, each the
median over rounds:

- cold: no doctor agent on the nodes (each round ends them first, by their names in doctor's Ray
  namespace), so every node starts one: a Python process, about 0.4 CPU-seconds plus Ray's work;
- warm: the agents the cold run left are reused: one call per node (the repeated pre-flight).

Printed: every run, the medians, and the 8-node / 2-node ratio of each. The goal (<= 1.5) reads
on the warm ratio. The cold ratio is an upper bound: here the 8 nodes' process starts share this
machine's cores, where on real machines each node starts its own agent side by side. The runs
check the JSON: a cold run must have started every agent, a warm one reused every agent.

    .venv/bin/python bench/cluster_scaling.py [--rounds 3]

doctor runs from a copy of this checkout taken at the start (as an installed doctor would), so
edits made meanwhile do not change its code version, and with it the agents, between runs. The
clusters are private: their own RAY_TMPDIR, HOME and RAY_AUTH_MODE=disabled, so no other Ray on
the machine is touched or found, and they are shut down by the processes they started.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 90  # per round: 8 simulated nodes start their workers on 2 shared cores


def _private_ray_env(base: Path) -> dict[str, str]:
    env = {"RAY_TMPDIR": str(base / "ray"), "HOME": str(base / "home"), "RAY_AUTH_MODE": "disabled",
           "RAY_USAGE_STATS_ENABLED": "0",
           # Ray's local-only mode: every node, worker and driver uses 127.0.0.1 (nothing leaves loopback)
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    for d in ("ray", "home"):
        (base / d).mkdir(parents=True, exist_ok=True)
    return env


def start_cluster(nodes: int, attempts: int = 3):
    """Ray gives each node 30 s to register; on a busy machine a start can miss that: retry."""
    from ray.cluster_utils import Cluster

    args = {"num_cpus": 1, "object_store_memory": 80 << 20}
    for attempt in range(1, attempts + 1):
        cluster = Cluster(shutdown_at_exit=True)
        try:
            cluster.add_node(**args, include_dashboard=False)
            for _ in range(nodes - 1):
                cluster.add_node(**args)
            cluster.wait_for_nodes()
            return cluster
        except Exception as exc:
            cluster.shutdown()
            if attempt == attempts:
                raise SystemExit(f"could not start a {nodes}-node cluster: {exc}")
            print(f"{nodes}-node cluster did not start ({exc}); retrying", flush=True)


def make_launch(base: Path) -> tuple[Path, list[str]]:
    """A launch directory with a small model and data file, so every node fingerprints paths."""
    launch, model = base / "launch", base / "model"
    launch.mkdir()
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"hidden_size": 64}))
    (model / "model.safetensors").write_bytes(os.urandom(3 << 20))
    (base / "train.parquet").write_bytes(os.urandom(4096))
    return launch, ["python3", "-m", "verl.trainer.main_ppo", f"actor_rollout_ref.model.path={model}",
                    f"data.train_files={base / 'train.parquet'}", "trainer.n_gpus_per_node=1"]


def install_copy(base: Path) -> Path:
    """doctor as installed: a copy of the code this run measures."""
    root = base / "doctor-install"
    from probes.cluster_agents import CODE_DIRS
    for d in ("doctor", *CODE_DIRS):
        shutil.copytree(ROOT / d, root / d, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def end_agents(doctor_root: Path, address: str, env: dict) -> None:
    """End doctor's agents on a cluster, the way `--no-keep-agents` does (not `ray stop`)."""
    code = ("import ray\nfrom probes.cluster_agents import NAMESPACE, end_agents\n"
            f"ray.init(address={address!r}, namespace=NAMESPACE, logging_level='ERROR', log_to_driver=False)\n"
            "end_agents()\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=doctor_root, capture_output=True, text=True,
                       env={**os.environ, **env}, timeout=120)
    if r.returncode != 0:
        raise SystemExit(f"could not end the agents at {address}: {r.stderr.strip()[-500:]}")


def time_check(doctor_root: Path, address: str, nodes: int, launch: Path, argv: list[str], env: dict,
               agents: str) -> float:
    """Wall time of one `doctor check --cluster`; `agents`: "started" or "reused", as every
    node's agent must have been."""
    cmd = [sys.executable, "-m", "doctor", "check", "--cluster", address, "--json", "--python", sys.executable,
           "--cwd", str(launch), "--nodes", str(nodes), "--timeout", str(TIMEOUT_S), "--", *argv]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=doctor_root, env={**os.environ, **env}, timeout=600)
    elapsed = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(f"doctor failed on the {nodes}-node cluster: {r.stderr.strip()[-500:]}")
    findings = [f for f in json.loads(r.stdout)["findings"] if f["id"] == "cluster.nodes"]
    failed = [f for f in findings if f["status"] == "fail"]
    if failed:
        raise SystemExit(f"{nodes}-node cluster: {failed[0]['title']}: {failed[0]['message']}")
    (passed,) = [f for f in findings if f["status"] == "pass"]
    if passed["evidence"]["agents"][agents] != nodes:
        raise SystemExit(f"{nodes}-node cluster: expected {nodes} agents {agents}, got {passed['title']}")
    return elapsed


def _row(nodes: int, times: dict) -> str:
    cells = [f"{statistics.median(times[k][nodes]):6.2f}  {', '.join(f'{t:.2f}' for t in times[k][nodes]):<22}"
             for k in ("cold", "warm")]
    return (f"{nodes:5d}  " + "  ".join(cells)).rstrip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="doctor-bench-cluster-"))
    env = _private_ray_env(base)
    os.environ.update(env)  # before Ray is imported: its temp dir and auth mode come from here
    clusters = {}
    try:
        launch, argv = make_launch(base)
        for n in (2, 8):
            t0 = time.perf_counter()
            clusters[n] = start_cluster(n)
            print(f"started a {n}-node cluster in {time.perf_counter() - t0:.1f} s", flush=True)
        root = install_copy(base)
        for n in (2, 8):  # warm-up: the first driver on a fresh cluster pays Ray's one-time costs
            time_check(root, clusters[n].address, n, launch, argv, env, "started")
        times: dict[str, dict[int, list[float]]] = {"cold": {2: [], 8: []}, "warm": {2: [], 8: []}}
        for r in range(opts.rounds):
            order = (2, 8) if r % 2 == 0 else (8, 2)
            for n in order:
                end_agents(root, clusters[n].address, env)
                times["cold"][n].append(time_check(root, clusters[n].address, n, launch, argv, env, "started"))
                times["warm"][n].append(time_check(root, clusters[n].address, n, launch, argv, env, "reused"))
            print(f"round {r + 1}: cold 2 nodes {times['cold'][2][-1]:.2f} s, 8 nodes {times['cold'][8][-1]:.2f} s; "
                  f"warm 2 nodes {times['warm'][2][-1]:.2f} s, 8 nodes {times['warm'][8][-1]:.2f} s", flush=True)
        print(f"\n{'':7}{'cold: agents started':<32}warm: agents reused")
        print(f"nodes  {'median  runs (s)':<32}median  runs (s)")
        for n in (2, 8):
            print(_row(n, times))
        ratio = {k: statistics.median(times[k][8]) / statistics.median(times[k][2]) for k in times}
        print(f"\nwarm ratio 8-node / 2-node: {ratio['warm']:.2f} "
              f"(goal <= 1.5: {'met' if ratio['warm'] <= 1.5 else 'NOT met'})")
        print(f"cold ratio 8-node / 2-node: {ratio['cold']:.2f} (simulation: the 8 nodes' agent starts, one "
              f"Python process each, share this machine's {os.cpu_count()} cores; real nodes start theirs side by side)")
    finally:
        for c in clusters.values():
            c.shutdown()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
