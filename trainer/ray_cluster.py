"""Where the workers run: a Ray cluster (the one given by RAY_ADDRESS, or a local one started
here), or, for a one-worker run with no cluster given, the driver's own process (no Ray needed).

A local cluster for `trainer.nnodes=2` is two real Ray nodes on this machine (a head and one more
node, each with its own raylet and resources), so worker placement and the cross-node all-reduce
take the same code path as on two hosts. Only processes started here are stopped here; `ray stop`
is never used (it is machine-wide).

A local cluster keeps all its files in a private folder: Ray's `Cluster` writes the address file
`<RAY_TMPDIR or TMPDIR or /tmp>/ray/ray_current_cluster` whatever temp dir its nodes are given
(ray 2.60: ray/cluster_utils.py:261 -> ray/_private/utils.py:80 write_ray_address, the default
from ray/_common/utils.py:327 get_default_system_temp_dir). So RAY_TMPDIR names the private
folder while the cluster lives: no `/tmp/ray` is needed, and a user's own cluster address there
is neither overwritten nor deleted (`Cluster.shutdown` resets the same file).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import traceback
from dataclasses import dataclass


def describe(exc: BaseException) -> str:
    """One line for an exception: its type, its first line, and where it was raised."""
    text = (str(exc).strip().splitlines() or [""])[0][:300]
    frames = traceback.extract_tb(exc.__traceback__)
    at = ""
    if frames:  # the innermost frame
        last = frames[-1]
        where = last.filename.split("site-packages/")[-1] if "site-packages/" in last.filename \
            else os.path.basename(last.filename)
        at = f" (at {where}:{last.lineno} in {last.name})"
    return f"{type(exc).__name__}: {text}{at}"


class StartError(RuntimeError):
    """Ray could not be started or joined; the text is one line (`describe`)."""

    @classmethod
    def of(cls, exc: BaseException) -> "StartError":
        return cls(describe(exc))


@dataclass
class Placement:
    node_id: str
    node_ip: str
    options: dict  # ray .options(...) for a worker on this node


class RayCluster:
    def __init__(self, nnodes: int, per_node: int, num_cpus: int | None = None):
        self.nnodes, self.per_node = nnodes, per_node
        self.num_cpus = num_cpus
        self._cluster = None
        self._tmp = None
        self._saved_tmpdir: str | None = None
        self._tmpdir_set = False
        self.local = False

    def __enter__(self) -> "RayCluster":
        try:
            self._start()
        except Exception as exc:  # Ray missing, a temp dir it cannot write, a port taken, ...
            with contextlib.suppress(Exception):
                self._stop()  # what did start (a head node, RAY_TMPDIR) is undone
            raise StartError.of(exc) from exc
        return self

    def _start(self) -> None:
        import ray

        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a stray token in $HOME must not split the cluster
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        address = os.environ.get("RAY_ADDRESS")
        if ray.is_initialized():
            pass
        elif address:
            ray.init(address=address, log_to_driver=True)
        else:
            self._start_local()

    def _start_local(self) -> None:
        import ray

        self.local = True
        total = self.num_cpus or os.cpu_count() or 1
        node_cpus = max(self.per_node, total // self.nnodes)
        temp_dir = self._private_temp_dir()
        common = {"num_cpus": node_cpus, "include_dashboard": False, "object_store_memory": 100 * 1024 * 1024}
        if self.nnodes == 1:
            ray.init(_temp_dir=temp_dir, log_to_driver=True, **common)
            return
        from ray.cluster_utils import Cluster

        self._cluster = Cluster()  # first held, then the head: a failed start can still be shut down
        self._cluster.add_node(temp_dir=temp_dir, **common)
        for _ in range(self.nnodes - 1):
            self._cluster.add_node(**common)
        self._cluster.wait_for_nodes()
        ray.init(address=self._cluster.address, log_to_driver=True)

    def _private_temp_dir(self) -> str:
        """`<base>/vd-ray-XXXX/ray`, Ray's own layout under RAY_TMPDIR=<base>/vd-ray-XXXX. The base is
        the user's RAY_TMPDIR, else /tmp (short: Ray's socket paths are limited to 107 bytes)."""
        base = os.environ.get("RAY_TMPDIR") or "/tmp"
        os.makedirs(base, exist_ok=True)  # as Ray does with its temp dir (try_to_create_directory)
        self._tmp = tempfile.mkdtemp(prefix="vd-ray-", dir=base)
        temp_dir = os.path.join(self._tmp, "ray")
        os.mkdir(temp_dir)
        self._saved_tmpdir, self._tmpdir_set = os.environ.get("RAY_TMPDIR"), True
        os.environ["RAY_TMPDIR"] = self._tmp  # read by Ray at each use; the nodes inherit it
        return temp_dir

    def __exit__(self, *exc) -> None:
        self._stop()

    def _stop(self) -> None:
        try:
            if self._cluster is not None or self.local:
                import ray

                ray.shutdown()
            if self._cluster is not None:
                self._cluster.shutdown()
        finally:
            self._cluster, self.local = None, False
            if self._tmpdir_set:
                if self._saved_tmpdir is None:
                    os.environ.pop("RAY_TMPDIR", None)
                else:
                    os.environ["RAY_TMPDIR"] = self._saved_tmpdir
                self._tmpdir_set = False
            if self._tmp:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None

    def spawn(self, cls, options: dict, *args):
        import ray

        return ray.remote(cls).options(**options).remote(*args)

    def gather(self, refs, timeout: float | None = None):
        import ray

        return ray.get(refs, timeout=timeout)

    def kill(self, handle) -> None:
        import ray

        ray.kill(handle)

    def alive_nodes(self) -> list[str]:
        import ray

        return sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))

    def device_kind(self, requested: str, explicit: bool) -> str:
        """cuda/npu when the cluster has them (or when asked for explicitly), else cpu."""
        import ray

        resources = ray.cluster_resources()
        if explicit:
            return requested
        if resources.get("GPU"):
            return "cuda"
        if resources.get("NPU"):
            return "npu"
        return "cpu"

    def placements(self, device: str) -> list[Placement]:
        """`per_node` workers on each of `nnodes` distinct alive nodes, pinned by node affinity."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [n for n in ray.nodes() if n.get("Alive")]
        need = {"cuda": "GPU", "npu": "NPU"}.get(device, "CPU")
        usable = [n for n in nodes if n["Resources"].get(need, 0) >= self.per_node]
        if len(usable) < self.nnodes:
            raise RuntimeError(f"trainer.nnodes={self.nnodes} x trainer.n_gpus_per_node={self.per_node} needs "
                               f"{self.nnodes} Ray nodes with {self.per_node} {need} each; the cluster has "
                               f"{len(usable)} such node(s) of {len(nodes)} alive")
        # Head first, then by IP: rank 0 lands on the head node, as in verl.
        usable.sort(key=lambda n: (not n["Resources"].get("node:__internal_head__"), n["NodeManagerAddress"]))
        out = []
        for node in usable[:self.nnodes]:
            cpus = node["Resources"].get("CPU", 1)
            per_worker_cpus = max(1, int(cpus // self.per_node)) if device == "cpu" else 1
            options = {"num_cpus": per_worker_cpus,
                       "scheduling_strategy": NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)}
            if device == "cuda":
                options["num_gpus"] = 1
            elif device == "npu":
                options["resources"] = {"NPU": 1}
            for _ in range(self.per_node):
                out.append(Placement(node["NodeID"], node["NodeManagerAddress"], options))
        return out


class _Call:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs):  # runs now; the "reference" is the result itself
        return self.fn(*args, **kwargs)


class _InProcessHandle:
    """A worker object that answers `handle.method.remote(...)` like a Ray actor handle."""

    def __init__(self, worker):
        self.worker = worker

    def __getattr__(self, name):
        return _Call(getattr(self.worker, name))


class InProcess:
    """The single worker of a one-device run, in the driver's process: no Ray start, no RPC."""

    local = True

    def __enter__(self) -> "InProcess":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def spawn(self, cls, options: dict, *args):
        return _InProcessHandle(cls(*args))

    def gather(self, refs, timeout: float | None = None):
        return refs

    def kill(self, handle) -> None:
        pass

    def alive_nodes(self) -> list[str]:
        return [socket.gethostname()]

    def device_kind(self, requested: str, explicit: bool) -> str:
        from trainer.worker import pick_device

        return pick_device(requested, explicit)

    def placements(self, device: str) -> list[Placement]:
        return [Placement(socket.gethostname(), "127.0.0.1", {"num_cpus": os.cpu_count() or 1})]


def workers_home(nnodes: int, per_node: int, num_cpus: int | None, memory_limit: int | None = None):
    """In-process for one worker when no cluster is given; otherwise Ray. A memory limit needs a
    process of its own (in the driver it would also cap the tokenizer, which aborts on failure)."""
    if nnodes * per_node == 1 and not os.environ.get("RAY_ADDRESS") and not memory_limit:
        return InProcess()
    return RayCluster(nnodes, per_node, num_cpus)
