"""doctor's resident agent on every node of the cluster, and its versioning.

Ray starts a job's workers afresh for every driver, so a task per node would cost a Python start
on every node at every check. Instead each node keeps one `NodeAgent`, a detached actor with no
CPUs, named after this code's version and its node in the `doctor` namespace: a repeated check
costs one call per node. Agents keep code, never facts; an agent of another code version is
ended, a lost one is started again once, and `keep_agents: false` ends them all.

`NodeAgent` runs on the nodes and `Agents` on the driver. Top level: the standard library and
the node-side modules only; the driver pickles this module by value, so a node without doctor
runs the agent all the same (its `facts` round gets the node-side code (CODE_DIRS) shipped, see
`_code_runtime_env`).
"""
from __future__ import annotations

import hashlib
import sys
import threading
import time
from pathlib import Path

from probes.cluster_collective import collective
from probes.cluster_link import link_test
from probes.cluster_node import node_facts
from probes.cluster_ports import ports_test

CODE_ROOT = Path(__file__).resolve().parents[1]  # driver side: the doctor checkout running the check
NAMESPACE = "doctor"  # Ray namespace of the agents (and of doctor's driver, which looks them up)
AGENT_PREFIX = "node-agent-"
AGENT_THREADS = 4  # calls one agent serves at once: a second check need not wait for a first one
CODE_DIRS = ("checks", "knowledge", "launch", "matching", "probes")  # what the node side runs; its version names the agents
CODE_SUFFIXES = (".py", ".toml")


def code_files(root: Path) -> list[Path]:
    """The node side's code and data under `root` (a doctor checkout or a node's install)."""
    return sorted(f for d in CODE_DIRS for f in (root / d).rglob("*")
                  if f.suffix in CODE_SUFFIXES and "__pycache__" not in f.parts and f.is_file())


def code_version(root: Path) -> str:
    """Hash of what the node side runs: every check and knowledge file, path and content."""
    h = hashlib.sha256()
    for f in code_files(root):
        data = f.read_bytes()
        h.update(f"{f.relative_to(root)}\0{len(data)}\0".encode() + data)
    return h.hexdigest()[:16]


def agent_name(version: str, node_id: str, shipped: bool = False) -> str:
    """Unique per code version and node; `shipped`: the agent of a node without doctor, which
    runs the copy of CODE_DIRS sent with its runtime_env."""
    return f"{AGENT_PREFIX}{version}-{node_id}" + ("-shipped" if shipped else "")


def _loaded_code_stamp() -> tuple:
    """Size and mtime of the node's own check/knowledge files this process imported: an agent
    whose node upgraded doctor under it must not go on running the old code."""
    roots = {Path(d).parent for name in CODE_DIRS if name in sys.modules
             for d in getattr(sys.modules[name], "__path__", [])}
    stamp = []
    for root in sorted(roots):
        for f in code_files(root):
            st = f.stat()
            stamp.append((str(f), st.st_size, st.st_mtime_ns))
    return tuple(stamp)


class NodeAgent:
    """doctor's resident process on one node (a detached Ray actor holding no CPUs): each method
    is one round of the check, run there. Every call gathers afresh; the agent keeps only its
    imported code, and answers `stale_code` once that code changed on disk."""

    def __init__(self) -> None:
        self.calls = 0
        self.code_stamp: tuple | None = None

    def facts(self, req: dict, ray_node_ip: str) -> dict:
        self.calls += 1
        if self.code_stamp is not None and _loaded_code_stamp() != self.code_stamp:
            return {"stale_code": "doctor's code on this node changed since its agent started"}
        answer = node_facts(req, ray_node_ip)
        self.code_stamp = _loaded_code_stamp()  # the first call imports the code
        return {**answer, "agent_calls": self.calls}

    def link(self, me: str, plan: dict, port: int, window: float, ports: dict | None = None) -> dict:
        """The link test, and beside it (same window) the checklist's ports (probes/cluster_ports.py)."""
        if not ports:
            return link_test(me, plan, port, window)
        got: dict = {}
        th = threading.Thread(target=lambda: got.update(ports=ports_test(me, ports, window)), daemon=True)
        th.start()
        answer = link_test(me, plan, port, window)
        th.join(window + 5)
        return {**answer, "ports": got.get("ports") or {"error": "the ports test did not finish"}}

    def clock(self) -> float:
        return time.time()

    def collective(self, req: dict, rank: int, world: int, master: str, port: int, backend: str) -> dict:
        return collective(req, rank, world, master, port, backend)


# --------------------------------------------------------------------------------------------
# driver side: find, start and ask the agents (runs in the subprocess doctor starts)

def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def _gather(refs: dict, timeout: float) -> dict:
    """node id -> answer, {"no_answer": ...} or {"error": ...} (with "agent_lost" when the agent
    died or cannot be reached); never waits past `timeout`."""
    import ray
    from ray.exceptions import ActorDiedError, ActorUnavailableError

    ids = list(refs.values())
    ready, _ = ray.wait(ids, num_returns=len(ids), timeout=timeout) if ids else ([], [])
    ready_set = set(ready)
    out = {}
    for node, ref in refs.items():
        if ref not in ready_set:
            out[node] = {"no_answer": f"no answer within {timeout:g} s"}
            continue
        try:
            out[node] = ray.get(ref)
        except (ActorDiedError, ActorUnavailableError) as exc:
            out[node] = {"error": _first_line(exc), "agent_lost": True}
        except Exception as exc:  # the call failed on that node: a finding, not a crash
            out[node] = {"error": _first_line(exc)}
    return out


class Agents:
    """doctor's agent on every alive node: the one of this code version where it runs, else a new
    one (`get_if_exists`: two checks at once still make one). Agents of other versions are ended."""

    def __init__(self, node_ids: list[str], version: str) -> None:
        import ray

        self.version = version
        self.actor_class = ray.remote(NodeAgent)
        names = set(ray.util.list_named_actors())
        mine = f"{AGENT_PREFIX}{version}-"
        end_agents([n for n in names if n.startswith(AGENT_PREFIX) and not n.startswith(mine)])
        self.shipped = {nid for nid in node_ids if agent_name(version, nid, shipped=True) in names}
        self.handles = {nid: self._get_or_start(nid) for nid in node_ids}

    def _get_or_start(self, node_id: str):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        shipped = node_id in self.shipped
        opts = {"name": agent_name(self.version, node_id, shipped), "namespace": NAMESPACE,
                "get_if_exists": True, "lifetime": "detached", "max_restarts": 0, "num_cpus": 0,
                "max_concurrency": AGENT_THREADS,
                "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}
        if shipped:
            opts["runtime_env"] = _code_runtime_env()
        return self.actor_class.options(**opts).remote()

    def ask(self, method: str, args: dict[str, tuple], timeout: float) -> dict:
        """One call per node, all in parallel. An agent that gives no answer in time is ended: it
        may be wedged, and the next check starts a new one."""
        refs = {nid: getattr(self.handles[nid], method).remote(*a) for nid, a in args.items()}
        answers = _gather(refs, timeout)
        for nid, a in answers.items():
            if "no_answer" in a:
                self.stop(nid)
        return answers

    def restart(self, node_id: str, shipped: bool) -> None:
        self.stop(node_id)
        if shipped:
            self.shipped.add(node_id)
        self.handles[node_id] = self._get_or_start(node_id)

    def stop(self, node_id: str) -> None:
        import ray

        try:
            ray.kill(self.handles[node_id], no_restart=True)
        except Exception:  # already gone
            pass


def end_agents(names: list[str] | None = None) -> int:
    """End doctor's agents in this cluster (all of them by default); how many were asked to end."""
    import ray

    if names is None:
        names = [n for n in ray.util.list_named_actors() if n.startswith(AGENT_PREFIX)]
    for name in names:
        try:
            ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
        except Exception:  # it ended meanwhile
            pass
    return len(names)


def _code_runtime_env() -> dict:
    """The node-side code (CODE_DIRS) for a node without doctor. Ray takes local directories only in
    `ray.init`'s job-wide runtime_env; for one actor they are uploaded first (Ray's own helper,
    the one `ray.init` uses) and named by their gcs:// package URIs."""
    import tempfile

    from ray._private.runtime_env.py_modules import upload_py_modules_if_needed

    env = {"py_modules": [str(CODE_ROOT / d) for d in CODE_DIRS], "excludes": ["__pycache__"]}
    with tempfile.TemporaryDirectory(prefix="doctor-ship-") as scratch:
        env = upload_py_modules_if_needed(env, include_gitignore=True, scratch_dir=scratch)
    env.pop("excludes", None)  # used by the upload only
    return env

