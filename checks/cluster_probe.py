"""The cluster fan-out. Runs in a subprocess of the target interpreter (the one with Ray), never in
doctor's own process:

    python -c "from checks.cluster_probe import main; main()" < request.json

It connects to the running cluster, asks doctor's agent on every alive node (pinned there with
NodeAffinitySchedulingStrategy(soft=False), all in parallel, waited for with a deadline), and
writes one JSON document to `request["out"]`. A node that does not answer in time is reported,
never waited for. Three rounds, each bounded by `request["timeout"]`:

1. facts: `checks.facts.gather_facts` on the node, for the launch directory and the target
   interpreter, in the node's own environment (that of its `ray start`, read from the raylet,
   because variables exported in the launching shell never reach other nodes); plus a strong
   fingerprint of the launch's model/data paths and verl's git state;
2. link: every node listens on the addresses Gloo/HCCL/NCCL would bind there and connects to
   every other node's, on one agreed port;
3. (deep) collective: a Gloo all-reduce across all nodes in subprocesses of the target
   interpreter with each node's environment (and NCCL/HCCL where every node has devices).

The node-side functions below use only the standard library and psutil (which Ray needs), and
this module is pickled by value, so nodes need no copy of doctor for rounds 2 and 3; round 1
imports `checks.facts` on the node and falls back to shipping `checks` and `knowledge` with a
runtime_env when the node has no doctor.

The agents: Ray starts a job's workers afresh for every driver, so a task per node would cost a
Python start on every node at every check. Instead each node keeps one `NodeAgent`, a detached
actor with no CPUs, named after this code's version and its node in the `doctor` namespace: a
repeated check costs one call per node. Agents keep code, never facts; an agent of another code
version is ended, a lost one is started again once, and `keep_agents: false` ends them all.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

WORKER_START_S = 20.0  # starting a node's agent starts a Python worker there (seconds on a busy node)
FINGERPRINT_BYTES = 1 << 20  # head and tail hashed per file: catches a different copy cheaply
MAX_FILES = 500  # per directory path; model dirs hold a handful of files
STACK_SOURCE = ("verl",)  # packages whose git commit counts as their code version
CODE_ROOT = Path(__file__).resolve().parents[1]  # driver side: the doctor checkout running the check
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL")  # never leave the node
NAMESPACE = "doctor"  # Ray namespace of the agents (and of doctor's driver, which looks them up)
AGENT_PREFIX = "node-agent-"
AGENT_THREADS = 4  # calls one agent serves at once: a second check need not wait for a first one
CODE_DIRS = ("checks", "knowledge")  # what the node side runs; its version names the agents
CODE_SUFFIXES = (".py", ".toml")


# --------------------------------------------------------------------------------------------
# node side (runs inside a Ray worker on each node)

def node_environment() -> dict[str, str]:
    """The environment of this node's `ray start`: the raylet's, which every worker inherits,
    without what Ray adds for its workers (runtime_env paths on PYTHONPATH)."""
    env = None
    try:
        import psutil

        for parent in psutil.Process().parents():
            if parent.name() == "raylet":
                env = parent.environ()
                break
    except Exception:  # no psutil, no permission: the worker's own environment is close enough
        env = None
    if env is None:
        env = dict(os.environ)
    if "PYTHONPATH" in env:
        kept = [p for p in env["PYTHONPATH"].split(os.pathsep) if p and "runtime_resources" not in p]
        if kept:
            env["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            env.pop("PYTHONPATH")
    return dict(env)


def file_fingerprint(path: str) -> dict:
    st = os.stat(path)
    h = hashlib.sha256(str(st.st_size).encode())
    with open(path, "rb") as fh:
        h.update(fh.read(FINGERPRINT_BYTES))
        if st.st_size > 2 * FINGERPRINT_BYTES:
            fh.seek(-FINGERPRINT_BYTES, os.SEEK_END)
        h.update(fh.read(FINGERPRINT_BYTES))
    return {"size": st.st_size, "digest": h.hexdigest()[:20]}


def path_fingerprint(path: str) -> dict:
    """Size and a fast content fingerprint of a file or a directory (per file inside)."""
    p = os.path.expanduser(path)
    if not os.path.exists(p):
        return {"exists": False}
    try:
        if os.path.isfile(p):
            return {"exists": True, "kind": "file", **file_fingerprint(p)}
        files: dict[str, dict] = {}
        for root, dirs, names in os.walk(p):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(names):
                if len(files) >= MAX_FILES:
                    break
                full = os.path.join(root, name)
                if os.path.isfile(full):
                    files[os.path.relpath(full, p)] = file_fingerprint(full)
        digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:20]
        return {"exists": True, "kind": "dir", "size": sum(f["size"] for f in files.values()),
                "digest": digest, "files": files}
    except OSError as exc:
        return {"exists": True, "error": f"{type(exc).__name__}: {exc.strerror or exc}"}


def git_state(path: str | None) -> dict | None:
    """Commit and dirty state of the git checkout holding `path`, if it is one."""
    if not path:
        return None
    d = Path(path)
    d = d if d.is_dir() else d.parent
    for cand in (d, *d.parents):
        if (cand / ".git").exists():
            break
    else:
        return None

    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", "-C", str(cand), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    # A package the checkout does not track is no source checkout of it: a pip-installed copy in a
    # virtualenv that happens to live inside some git checkout (a .venv in a project) has no commit.
    if not git("ls-files", "--error-unmatch", "--", str(d.relative_to(cand))):
        return None
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"root": str(cand), "commit": commit, "dirty": bool(status) if status is not None else None}


def parse_ifname_list(value: str) -> tuple[bool, bool, list[str]]:
    """NCCL/HCCL syntax: `^` excludes, `=` means exact names, else prefixes."""
    exclude = value.startswith("^")
    value = value[1:] if exclude else value
    exact = value.startswith("=")
    value = value[1:] if exact else value
    return exclude, exact, [v for v in value.split(",") if v]


def _first_ipv4(ifaces: dict, name: str) -> str | None:
    info = ifaces.get(name) or {}
    return (info.get("ipv4") or [None])[0]


def pick_address(transport: str, env: dict, ifaces: dict, hostname_addrs: list[str]) -> dict:
    """The address a transport would bind on this node, and why (research/ascend.md 5.1)."""
    if transport == "gloo":
        var = env.get("GLOO_SOCKET_IFNAME")
        if var:  # exact interface names; the first one carries the connection test
            name = var.split(",")[0]
            if name not in ifaces:
                return {"error": f"GLOO_SOCKET_IFNAME={var}: no interface {name} on this node"}
            if not ifaces[name].get("up"):
                return {"error": f"GLOO_SOCKET_IFNAME={var}: interface {name} is down"}
            ip = _first_ipv4(ifaces, name)
            return {"address": ip, "iface": name, "via": "GLOO_SOCKET_IFNAME"} if ip else \
                {"error": f"GLOO_SOCKET_IFNAME={var}: interface {name} has no IPv4 address"}
        v4 = [a for a in hostname_addrs if ":" not in a]
        if not v4:
            return {"error": "GLOO_SOCKET_IFNAME unset and the hostname does not resolve"}
        return {"address": v4[0], "via": "hostname (GLOO_SOCKET_IFNAME unset)"}
    prefix = transport.upper()
    if transport == "hccl" and env.get("HCCL_IF_IP"):
        return {"address": env["HCCL_IF_IP"], "via": "HCCL_IF_IP"}
    var = env.get(f"{prefix}_SOCKET_IFNAME")
    names = sorted(ifaces)
    if var:
        exclude, exact, items = parse_ifname_list(var)

        def match(n: str) -> bool:
            hit = any(n == i if exact else n.startswith(i) for i in items)
            return hit != exclude

        chosen = [n for n in names if match(n) and ifaces[n].get("up") and _first_ipv4(ifaces, n)]
        if not chosen:
            return {"error": f"{prefix}_SOCKET_IFNAME={var}: no interface that is up with IPv4 matches"}
        return {"address": _first_ipv4(ifaces, chosen[0]), "iface": chosen[0], "via": f"{prefix}_SOCKET_IFNAME"}
    # Unset: real NICs by name, then docker, then loopback.
    order = sorted(names, key=lambda n: (n == "lo", n.startswith("docker"), n))
    for n in order:
        if ifaces[n].get("up") and _first_ipv4(ifaces, n):
            return {"address": _first_ipv4(ifaces, n), "iface": n, "via": f"{prefix} automatic choice"}
    return {"error": f"{prefix}: no interface that is up with an IPv4 address"}


def transports(facts: dict) -> list[str]:
    env = facts.get("comm_env") or {}
    dev = facts.get("devices") or {}
    out = ["gloo"]
    if dev.get("davinci") or any(k.startswith("HCCL_") for k in env):
        out.append("hccl")
    if dev.get("nvidia") or "NCCL_SOCKET_IFNAME" in env:
        out.append("nccl")
    return out


def node_facts(req: dict, ray_node_ip: str) -> dict:
    """Round 1 on one node."""
    t0 = time.perf_counter()
    env = node_environment()
    cwd = req["cwd"]
    out: dict = {"hostname": socket.gethostname(), "ray_ip": ray_node_ip, "cwd_exists": os.path.isdir(cwd)}
    try:
        from checks.context import CheckContext
        from checks.facts import gather_facts
        from checks.launch import Launch, Override
    except ImportError as exc:
        return {**out, "need_code": f"{type(exc).__name__}: {exc}"}
    launch = None
    if req.get("launch"):
        lj = req["launch"]
        launch = Launch(argv=lj["argv"], env=lj.get("env") or {}, python=lj.get("python"),
                        module=lj.get("module"), entry=lj.get("entry"),
                        cwd=Path(lj["cwd"]) if lj.get("cwd") else None,
                        overrides=[Override(o["key"], o["value"], o["op"], o["text"]) for o in lj["overrides"]])
    ctx = CheckContext(cwd=Path(cwd), python=req["python"], env=env, launch=launch,
                       timeout=req["timeout"], deep=False)
    try:
        facts = gather_facts(ctx)
    except Exception as exc:  # a fact gatherer bug on one node is that node's finding
        return {**out, "error": f"gathering facts failed: {type(exc).__name__}: {exc}"}
    packages = (facts.get("probe") or {}).get("packages") or {}
    git = {}
    for name in STACK_SOURCE:
        spec = (packages.get(name) or {}).get("spec") or {}
        where = spec.get("origin") or (spec.get("locations") or [None])[0]
        state = git_state(where)
        if state:
            git[name] = state
    hostname_addrs = (facts.get("hostname") or {}).get("addresses") or []
    comm = facts.get("comm_env") or {}
    links = {t: pick_address(t, comm, facts.get("interfaces") or {}, hostname_addrs) for t in transports(facts)}
    shown_env = {k: v for k, v in env.items() if not any(w in k.upper() for w in SECRET_WORDS)}
    out.update(facts=facts, env=shown_env, git=git, links=links,
               fingerprints={p: path_fingerprint(p) for p in req.get("paths", [])},
               seconds=round(time.perf_counter() - t0, 3))
    return out


def _serve(sock: socket.socket, token: bytes, stop: float, expected: int, got: list) -> None:
    sock.settimeout(0.2)
    while time.monotonic() < stop and len(got) < expected:
        try:
            conn, peer = sock.accept()
        except OSError:
            continue
        with conn:
            try:
                conn.sendall(token)
            except OSError:
                pass
        got.append(peer[0])


def _connect(address: str, port: int, stop: float) -> dict:
    """Connect (retrying while the peer may not listen yet) and read the peer's token."""
    last = "no attempt"
    while time.monotonic() < stop:
        t0 = time.perf_counter()
        try:
            with socket.create_connection((address, port), timeout=max(0.1, stop - time.monotonic())) as s:
                ms = (time.perf_counter() - t0) * 1000
                s.settimeout(max(0.1, stop - time.monotonic()))
                token = s.recv(256).decode(errors="replace")
                return {"ok": True, "connect_ms": round(ms, 3), "token": token}
        except ConnectionRefusedError as exc:
            last = f"connection refused ({exc.strerror})"
            time.sleep(0.05)
        except OSError as exc:
            last = f"{type(exc).__name__}: {exc.strerror or exc}"
            if isinstance(exc, socket.timeout):
                break
            time.sleep(0.1)
    return {"ok": False, "error": last}


def link_test(me: str, plan: dict, port: int, window: float) -> dict:
    """Round 2 on one node: listen on our addresses, connect to every peer's, on one port."""
    stop = time.monotonic() + window
    mine = plan[me]
    listeners, threads, accepted, errors = [], [], {}, {}
    for transport, addr in mine.items():
        if addr in accepted or addr in errors:
            continue
        expected = sum(1 for peer, addrs in plan.items() if peer != me and transport in addrs)
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((addr, port))
            sock.listen(64)
        except OSError as exc:
            errors[addr] = f"cannot listen on {addr}:{port}: {exc.strerror or exc}"
            continue
        accepted[addr] = []
        th = threading.Thread(target=_serve, args=(sock, f"{me}|{addr}".encode(), stop, expected,
                                                   accepted[addr]), daemon=True)
        th.start()
        listeners.append(sock)
        threads.append(th)
    results = []
    for peer, addrs in plan.items():
        if peer == me:
            continue
        for transport, addr in addrs.items():
            if transport not in mine:
                continue
            r = _connect(addr, port, stop)
            if r.get("ok") and r.get("token") != f"{peer}|{addr}":
                r = {"ok": False, "error": f"reached {r.get('token') or 'something else'}, not {peer}"}
            results.append({"from": me, "to": peer, "transport": transport, "address": addr, **r})
    for th in threads:
        th.join(max(0.0, stop - time.monotonic()))
    for s in listeners:
        s.close()
    return {"results": results, "listen_errors": errors}


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
    runs the copy of checks/ and knowledge/ sent with its runtime_env."""
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

    def link(self, me: str, plan: dict, port: int, window: float) -> dict:
        return link_test(me, plan, port, window)

    def collective(self, req: dict, rank: int, world: int, master: str, port: int, backend: str) -> dict:
        return collective(req, rank, world, master, port, backend)


# --------------------------------------------------------------------------------------------
# driver side (runs in the subprocess doctor starts)

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
    """checks/ and knowledge/ for a node without doctor. Ray takes local directories only in
    `ray.init`'s job-wide runtime_env; for one actor they are uploaded first (Ray's own helper,
    the one `ray.init` uses) and named by their gcs:// package URIs."""
    import tempfile

    from ray._private.runtime_env.py_modules import upload_py_modules_if_needed

    env = {"py_modules": [str(CODE_ROOT / d) for d in CODE_DIRS], "excludes": ["__pycache__"]}
    with tempfile.TemporaryDirectory(prefix="doctor-ship-") as scratch:
        env = upload_py_modules_if_needed(env, include_gitignore=True, scratch_dir=scratch)
    env.pop("excludes", None)  # used by the upload only
    return env


class NoCluster(Exception):
    pass


def _reachable_gcs(address: str | None, timeout: float) -> str:
    """host:port of the cluster's GCS, checked with one TCP connect: `ray.init` retries an
    unreachable address for minutes."""
    from ray._private.services import canonicalize_bootstrap_address

    try:
        addr = address if address and address != "auto" else canonicalize_bootstrap_address("auto")
    except Exception as exc:
        raise NoCluster(f"{exc}") from None
    if not addr:
        raise NoCluster("no running cluster found (give its address: --cluster HEAD_IP:6379, or set RAY_ADDRESS)")
    host, _, port = addr.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=min(timeout, 10.0)).close()
    except (OSError, ValueError) as exc:
        raise NoCluster(f"nothing answers at {addr}: {getattr(exc, 'strerror', None) or exc}") from None
    return addr


def run(req: dict) -> dict:
    try:
        import ray
        import ray.cloudpickle
    except ImportError as exc:
        raise NoCluster(f"{sys.executable} cannot import ray ({exc}): give --python the interpreter "
                        "of the cluster's environment") from None

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    t0 = time.perf_counter()
    address = _reachable_gcs(req.get("address"), float(req["timeout"]))
    ray.init(address=address, logging_level="ERROR", log_to_driver=False, namespace=NAMESPACE)
    connect_s = time.perf_counter() - t0
    all_nodes = ray.nodes()
    alive = [n for n in all_nodes if n.get("Alive")]
    head_ip = ray.util.get_node_ip_address()
    nodes = {n["NodeID"]: {"id": n["NodeID"], "ip": n["NodeManagerAddress"],
                           "ray_hostname": n.get("NodeManagerHostname"),
                           "head": bool((n.get("Resources") or {}).get("node:__internal_head__")),
                           "resources": n.get("Resources") or {}} for n in alive}
    dead = [{"id": n["NodeID"], "ip": n["NodeManagerAddress"]} for n in all_nodes if not n.get("Alive")]
    timeout = float(req["timeout"])

    t_facts = time.perf_counter()
    agents = Agents(list(nodes), code_version(CODE_ROOT))
    for nid, a in _facts_round(agents, req, nodes, timeout).items():
        nodes[nid].update(a)
    report = {"address": req.get("address"), "head_ip": head_ip, "connect_s": round(connect_s, 3),
              "facts_s": round(time.perf_counter() - t_facts, 3),
              "ray_version": ray.__version__, "nodes": list(nodes.values()), "dead": dead}

    ok_nodes = [nid for nid in nodes if nodes[nid].get("facts")]
    if len(ok_nodes) > 1:
        plan = {nid: {t: v["address"] for t, v in (nodes[nid].get("links") or {}).items()
                      if v.get("address") and not v["address"].startswith("127.")}
                for nid in ok_nodes}
        # An address several nodes share cannot be told apart (and cannot be listened on twice).
        counts = Counter((t, a) for addrs in plan.values() for t, a in addrs.items())
        plan = {nid: {t: a for t, a in addrs.items() if counts[(t, a)] == 1} for nid, addrs in plan.items()}
        port = random.randint(42000, 48000)
        window = min(timeout, 5.0)
        report["link"] = {"port": port, "by_node": agents.ask(
            "link", {nid: (nid, plan, port, window) for nid in ok_nodes}, window + timeout)}
        if req.get("deep"):
            report["collective"] = _collective_round(agents, req, nodes, ok_nodes, timeout)
    report["agents"] = _agents_summary(nodes, keep=req.get("keep_agents", True))
    if not report["agents"]["kept"]:
        end_agents()
    return report


def _facts_round(agents: Agents, req: dict, nodes: dict, timeout: float) -> dict:
    """Round 1 on every node. A node whose agent was lost (node restarted, agent killed) or runs
    code changed on disk gets a new agent once; a node without doctor, one with the code shipped."""
    def ask(node_ids, bound):
        return agents.ask("facts", {nid: (req, nodes[nid]["ip"]) for nid in node_ids}, bound)

    bound = timeout + WORKER_START_S
    answers = ask(nodes, bound)
    retry = {nid: nid in agents.shipped or bool(a.get("need_code")) for nid, a in answers.items()
             if a.get("agent_lost") or a.get("stale_code") or (a.get("need_code") and nid not in agents.shipped)}
    for nid, shipped in retry.items():
        agents.restart(nid, shipped)
    if retry:
        answers.update(ask(retry, bound + 30))  # +30: unpacking the shipped code on the node
    return answers


def _agents_summary(nodes: dict, keep: bool) -> dict:
    """Per node whether its agent was started by this check or reused; and the counts."""
    for n in nodes.values():
        if n.get("agent_calls"):
            n["agent"] = "started" if n.pop("agent_calls") == 1 else "reused"
    states = Counter(n.get("agent") for n in nodes.values() if n.get("agent"))
    return {"reused": states["reused"], "started": states["started"], "kept": bool(keep),
            "namespace": NAMESPACE}


def _collective_round(agents: Agents, req: dict, nodes: dict, ok_nodes: list[str], timeout: float) -> dict:
    """Gloo across every node; NCCL/HCCL too where every node has devices of that kind."""
    # Rank 0 on the head (where verl's driver puts the store), else the first node.
    ordered = sorted(ok_nodes, key=lambda nid: (not nodes[nid]["head"], nodes[nid]["ip"]))
    master = nodes[ordered[0]]["ip"]
    backends = ["gloo"]
    devices = [(nodes[n]["facts"].get("devices") or {}) for n in ordered]
    if all(d.get("nvidia") for d in devices):
        backends.append("nccl")
    if all(d.get("davinci") for d in devices):
        backends.append("hccl")
    out = {"master": master, "ranks": {nid: i for i, nid in enumerate(ordered)}}
    for backend in backends:
        port = random.randint(48001, 54000)
        args = {nid: (req, i, len(ordered), master, port, backend) for i, nid in enumerate(ordered)}
        out[backend] = agents.ask("collective", args, collective_bound(timeout) + 15)
    out["bound_s"] = collective_bound(timeout)
    return out


def main() -> None:
    req = json.load(sys.stdin)
    try:
        report = run(req)
    except NoCluster as exc:
        report = {"fatal": str(exc)}
    except Exception as exc:  # cannot reach the cluster at all: doctor says so in one line
        text = str(exc).strip().splitlines()
        report = {"fatal": f"{type(exc).__name__}: {text[0][:400] if text else ''}"}
    tmp = req["out"] + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(report, fh, default=str)
    os.replace(tmp, req["out"])
    sys.stdout.flush()
    os._exit(0)  # skip Ray's slow atexit teardown: the report is written


if __name__ == "__main__":
    main()
