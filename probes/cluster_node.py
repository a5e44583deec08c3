"""Round 1 of the cluster check on one node: its facts, in the environment of its `ray start`.

`node_facts` runs inside doctor's agent on every node (probes/cluster_agents.py). It gathers
`probes.facts` for the launch directory and the target interpreter in the node's own environment
(that of its `ray start`, read from the raylet, because variables exported in the launching shell
never reach other nodes); plus a strong fingerprint of the launch's model/data paths, verl's git
state, and the address each transport (Gloo/HCCL/NCCL) would bind there.

Top level: the standard library only (psutil, which Ray needs, is imported where used). The
driver pickles this module by value, so a node needs no copy of doctor to run it; `node_facts`
imports `probes.facts` on the node and answers `need_code` where it is missing.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

FINGERPRINT_BYTES = 1 << 20  # head and tail hashed per file: catches a different copy cheaply
MAX_FILES = 500  # per directory path; model dirs hold a handful of files
STACK_SOURCE = ("verl",)  # packages whose git commit counts as their code version
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL")  # never leave the node


def _raylet():
    try:
        import psutil

        return next((p for p in psutil.Process().parents() if p.name() == "raylet"), None)
    except Exception:  # no psutil, no permission
        return None


def node_environment() -> dict[str, str]:
    """The environment of this node's `ray start`: the raylet's, which every worker inherits,
    without what Ray adds for its workers (runtime_env paths on PYTHONPATH)."""
    raylet = _raylet()
    try:
        env = raylet.environ() if raylet is not None else None
    except Exception:  # no permission: the worker's own environment is close enough
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


def open_file_limit(pid: int) -> list[int | None] | None:
    """[soft, hard] 'Max open files' of a process (None: unlimited), from /proc/<pid>/limits."""
    try:
        text = Path(f"/proc/{pid}/limits").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Max open files"):
            return [None if v == "unlimited" else int(v) for v in line.split()[3:5]]
    return None


def raylet_facts() -> dict:
    """This node's raylet: its pid, its open-file limit (every worker inherits it) and the ports
    its command line names (Ray's own ports on this node)."""
    raylet = _raylet()
    if raylet is None:
        return {}
    ports: dict[str, int] = {}
    try:
        cmdline = raylet.cmdline()
    except Exception:
        cmdline = []
    for arg in cmdline:
        m = re.match(r"--(\w*port\w*)=(\d+)$", arg)
        if m and int(m.group(2)):
            ports[m.group(1)] = int(m.group(2))
        m = re.match(r"--gcs[-_]address=.*:(\d+)$", arg)
        if m:
            ports["gcs"] = int(m.group(1))
    return {"pid": raylet.pid, "nofile": open_file_limit(raylet.pid), "ports": ports}


def sysctl_facts() -> dict:
    """The kernel's ephemeral port range and reserved ports (per network namespace)."""
    out = {}
    for key in ("ip_local_port_range", "ip_local_reserved_ports"):
        try:
            out[key] = Path(f"/proc/sys/net/ipv4/{key}").read_text().split()
        except OSError:
            pass
    return out


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
    """The address a transport would bind on this node, and why (each transport's own rule for choosing it)."""
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
        from probes.facts import Target, gather_facts
        from launch.script import Launch, Override
    except ImportError as exc:
        return {**out, "need_code": f"{type(exc).__name__}: {exc}"}
    launch = None
    if req.get("launch"):
        lj = req["launch"]
        launch = Launch(argv=lj["argv"], env=lj.get("env") or {}, python=lj.get("python"),
                        module=lj.get("module"), entry=lj.get("entry"),
                        cwd=Path(lj["cwd"]) if lj.get("cwd") else None,
                        overrides=[Override(o["key"], o["value"], o["op"], o["text"]) for o in lj["overrides"]])
    ctx = Target(cwd=Path(cwd), python=req["python"], env=env, launch=launch, timeout=req["timeout"])
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
    out.update(facts=facts, env=shown_env, git=git, links=links, raylet=raylet_facts(), sysctl=sysctl_facts(),
               fingerprints={p: path_fingerprint(p) for p in req.get("paths", [])},
               seconds=round(time.perf_counter() - t0, 3))
    return out

