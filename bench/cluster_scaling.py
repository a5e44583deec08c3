"""How `doctor check --cluster` scales with the number of nodes: 2 nodes vs 8 nodes.

Both clusters are Ray's local multi-node simulation (`ray.cluster_utils.Cluster`: one raylet per
"node", all on loopback of this machine), started side by side, and the check runs against
each in turn, alternating, so both see the same machine load. Printed: the wall time of each run,
the medians, and the ratio 8-node / 2-node (goal: <= 1.5). The probe runs every node in parallel,
but each node's first task of a job starts a Python worker there (about 1.5 CPU-seconds; the
facts themselves take about 0.7 s per node): on real machines those run side by side, in this
simulation 8 nodes share the machine's cores, so the ratio here is an upper bound.

    .venv/bin/python bench/cluster_scaling.py [--rounds 3]

The clusters are private: their own RAY_TMPDIR, HOME and RAY_AUTH_MODE=disabled, so no other Ray
on the machine is touched or found, and they are shut down by the processes they started.
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


def time_check(address: str, nodes: int, launch: Path, argv: list[str], env: dict) -> float:
    cmd = [sys.executable, "-m", "doctor", "check", "--cluster", address, "--json", "--python", sys.executable,
           "--cwd", str(launch), "--nodes", str(nodes), "--timeout", str(TIMEOUT_S), "--", *argv]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=600)
    elapsed = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(f"doctor failed on the {nodes}-node cluster: {r.stderr.strip()[-500:]}")
    answered = [f for f in json.loads(r.stdout)["findings"] if f["id"] == "cluster.nodes" and f["status"] == "fail"]
    if answered:
        raise SystemExit(f"{nodes}-node cluster: {answered[0]['title']}: {answered[0]['message']}")
    return elapsed


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
        times: dict[int, list[float]] = {2: [], 8: []}
        for n in (2, 8):  # warm-up: each node's first task starts its worker
            time_check(clusters[n].address, n, launch, argv, env)
        for r in range(opts.rounds):
            order = (2, 8) if r % 2 == 0 else (8, 2)
            for n in order:
                times[n].append(time_check(clusters[n].address, n, launch, argv, env))
            print(f"round {r + 1}: 2 nodes {times[2][-1]:.2f} s, 8 nodes {times[8][-1]:.2f} s", flush=True)
        m2, m8 = statistics.median(times[2]), statistics.median(times[8])
        print(f"\nnodes  median wall (s)  runs")
        print(f"    2  {m2:15.2f}  {', '.join(f'{t:.2f}' for t in times[2])}")
        print(f"    8  {m8:15.2f}  {', '.join(f'{t:.2f}' for t in times[8])}")
        ratio = m8 / m2
        print(f"\nratio 8-node / 2-node: {ratio:.2f} (goal <= 1.5: {'met' if ratio <= 1.5 else 'NOT met'})")
    finally:
        for c in clusters.values():
            c.shutdown()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
