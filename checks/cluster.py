"""Cross-node comparison of a Ray cluster, and its link tests: category `cluster`.

Input is the report `probes.cluster_driver` writes (one entry per node with that node's facts,
gathered in the environment of its `ray start`). Every node is compared with the reference node,
the head (where verl's driver and rank 0 live) or, when the head did not answer, the first node
that did. Each difference is one finding that names the differing node and both values: a job
that starts on nodes that differ fails minutes in with a hang or a cryptic HCCL/Gloo error.
"""
from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

from probes.cluster_node import parse_ifname_list
from probes.facts import installed_dist, visible_devices, winner_path
from checks.model import Finding
from checks.registry import check
from knowledge import load_toml

# Variables naming the interface a transport binds (syntax: HCCL's and NCCL's environment-variable references, Gloo's tcp/device.cc).
IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
EXACT_LIST_VARS = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")  # exact names, no ^/= syntax


@dataclass
class ClusterView:
    """The probe report, with the nodes that answered, the reference, and what the launch expects."""

    report: dict
    nnodes: int | None = None
    gpus_per_node: int | None = None
    path_keys: dict[str, str] = field(default_factory=dict)  # path -> the launch key naming it
    job: dict = field(default_factory=dict)  # the launch's device, rollout engine, model size (params_b, params_from)

    def __post_init__(self) -> None:
        nodes = self.report.get("nodes") or []
        self.answered = [n for n in nodes if n.get("facts")]
        self.silent = [n for n in nodes if not n.get("facts")]
        heads = [n for n in self.answered if n.get("head")]
        self.reference = heads[0] if heads else (self.answered[0] if self.answered else None)
        # Hostname when unique, else IP, else IP/node id (Ray's local multi-node simulation).
        hosts = Counter(n.get("hostname") for n in nodes)
        ips = Counter(n.get("ip") for n in nodes)
        for n in nodes:
            host, ip = n.get("hostname"), n.get("ip")
            n["label"] = host if host and hosts[host] == 1 else ip if ips[ip] == 1 else f"{ip}/{n.get('id', '')[:8]}"
        self.labels = {n.get("id"): n["label"] for n in nodes}  # node id -> label, every node

    def others(self) -> list[dict]:
        return [n for n in self.answered if n is not self.reference]

    def ref_label(self) -> str:
        ref = self.reference
        return f"{ref['label']} ({'head' if ref.get('head') else 'reference'})"


def _fmt(value: Any) -> str:
    return "absent" if value is None else str(value)


def _finding(id: str, status: str, title: str, message: str = "", fix: str = "",
             evidence: dict | None = None, node: str | None = None) -> Finding:
    return Finding(id, "cluster", status, title, message, fix, evidence or {}, node)


def _compare(view: ClusterView, id: str, what: str, value_of: Callable[[dict], Any], fix: str,
             status: str = "fail") -> list[Finding]:
    """One finding per node whose value differs from the reference node's."""
    ref = view.reference
    if ref is None:
        return []
    ref_value = value_of(ref)
    values = {n["label"]: value_of(n) for n in view.answered}
    out = []
    for n in view.others():
        value = value_of(n)
        if value != ref_value:
            out.append(_finding(id, status, f"{what} differs on {n['label']}",
                                f"{what}: {_fmt(value)} on {n['label']}, {_fmt(ref_value)} on {view.ref_label()}",
                                fix, {"values": values}, n["label"]))
    return out


# --- what each node reports ------------------------------------------------------------------

def _probe(n: dict) -> dict:
    return (n.get("facts") or {}).get("probe") or {}


def _packages(n: dict) -> dict:
    return _probe(n).get("packages") or {}


def _version(n: dict, name: str) -> str | None:
    dist = installed_dist(_packages(n).get(name) or {})
    return dist.get("version") if dist else None


def _import_place(n: dict, name: str) -> str | None:
    """Where `import name` loads from on the node, saying when that is the launch directory."""
    pkg = _packages(n).get(name) or {}
    path = winner_path(pkg.get("spec"))
    if path is None:
        return None
    cwd = (n.get("facts") or {}).get("cwd", {}).get("path") or ""
    if cwd and (path == cwd or path.startswith(cwd.rstrip(os.sep) + os.sep)):
        return f"{path} (launch directory)"
    return path


# --- the comparisons ----------------------------------------------------------------------------

def _agents_said(agents: dict | None) -> str:
    """'; node agents: 1 reused, 1 started' (and whether they were ended after the check)."""
    if not agents:
        return ""
    counts = ", ".join(f"{agents[k]} {k}" for k in ("reused", "started") if agents.get(k))
    return f"; node agents: {counts or 'none'}" + ("" if agents.get("kept", True) else ", then ended")


@check("cluster.nodes", "cluster", "Every node answers", scope="cluster")
def nodes_answer(view: ClusterView) -> list[Finding]:
    """What it checks: that every alive node of the Ray cluster answered doctor's fact round within
    --timeout (through doctor's agent on each node), that no dead node is still
    listed, and that the cluster has at least trainer.nnodes alive nodes.

    How the job fails without it: verl waits for resources the cluster does not have: the placement
    group never schedules (`Total available GPUs ... is less than total desired GPUs ...`, or Ray's
    "resources cannot be satisfied" warning and a hang); a node that does not answer doctor will not
    run verl's workers either.

    Fix: on the silent node: `ray status` lists it, its raylet log
    (<ray temp dir>/session_latest/logs/raylet.out) shows why, and the interpreter exists there;
    start Ray on missing nodes (`ray start --address=<head>:6379`) or set trainer.nnodes to the nodes alive.

    After the fact: verl-not-enough-gpus, ray-resources-unschedulable, ray-node-died"""
    out = []
    for n in view.silent:
        why = n.get("no_answer") or n.get("error") or n.get("need_code") or "no facts"
        out.append(_finding("cluster.nodes", "fail", f"node {n['label']} did not report", why,
                            "check that node: `ray status` lists it, its raylet log under the Ray temp dir "
                            "(session_latest/logs/raylet.out), and that the interpreter exists there",
                            {"ip": n.get("ip"), "node_id": n.get("id")}, n["label"]))
    if view.answered and not view.silent:
        secs = view.report.get("facts_s")
        agents = view.report.get("agents")
        if agents:
            agents = {**agents, "by_node": {n["label"]: n.get("agent") for n in view.answered}}
        out.append(_finding("cluster.nodes", "pass", f"{len(view.answered)} nodes answered" + _agents_said(agents),
                            ", ".join(n["label"] + (" (head)" if n.get("head") else "") for n in view.answered)
                            + (f"; facts from every node in {secs:.1f} s" if secs is not None else ""),
                            evidence={"connect_s": view.report.get("connect_s"), "facts_s": secs,
                                      "agents": agents}))
    alive_ips = {n.get("ip") for n in view.report.get("nodes") or []}
    for d in view.report.get("dead") or []:
        if d.get("ip") in alive_ips:
            continue  # an earlier life of a node that has been restarted
        out.append(_finding("cluster.nodes", "warn", f"dead node {d.get('ip')} still listed",
                            f"Ray lists node {d.get('ip')} ({d.get('id', '')[:12]}) as dead",
                            "restart `ray start --address=...` on that machine if it should take part",
                            {"node_id": d.get("id")}, d.get("ip")))
    alive = len(view.report.get("nodes") or [])
    if view.nnodes and alive < view.nnodes:
        out.append(_finding("cluster.nodes", "fail", f"{alive} of trainer.nnodes={view.nnodes} nodes are alive",
                            f"the launch asks for trainer.nnodes={view.nnodes}; the cluster has {alive} alive "
                            f"node{'s' * (alive != 1)}: "
                            + ", ".join(n["label"] for n in view.report.get("nodes") or []),
                            f"start Ray on the missing node{'s' * (view.nnodes - alive != 1)} "
                            "(`ray start --address=<head>:6379`) or set trainer.nnodes="
                            f"{alive}", {"alive": alive, "nnodes": view.nnodes}))
    return out


@check("cluster.versions", "cluster", "Same versions on every node", scope="cluster")
def versions_match(view: ClusterView) -> list[Finding]:
    """What it checks: that every node runs the same Python, the same version of each package of the
    stack, the same torch build (cpu / cuda / npu), and the same CANN toolkit and NPU driver as the
    reference node (the head, where verl's driver and rank 0 run), each read on the node in the
    environment of its `ray start`.

    How the job fails without it: the node that differs fails when its workers start or at the first
    collective: HCCL `EI0008` (the CANN / HCCL versions of the ranks are inconsistent,
    https://github.com/hicann/hcomm/blob/534bd4ec9a0908c493548c94f5bd584688ce1bf1/docs/en/error_codes/EI0008-Package_Error_Incorrect_HCCL_Version.md),
    undefined symbols in torch_npu, or pickled objects the other side cannot load.

    Fix: install the same versions on every node (`pip freeze` on the head, `pip install -r` on the
    others); the same CANN toolkit and driver on every node.

    After the fact: hccl-cann-version-mismatch, npu-torch-npu-symbol-mismatch, ray-actor-died"""
    if view.reference is None:
        return []
    fix = "install the same versions on every node (pip freeze on the head, then pip install -r on the others)"
    out = _compare(view, "cluster.versions", "Python", lambda n: (_probe(n).get("python") or {}).get("version"), fix)
    names = sorted({name for n in view.answered for name in _packages(n)})
    for name in names:
        out += _compare(view, "cluster.versions", f"{name} version", lambda n, nm=name: _version(n, nm), fix)
    out += _compare(view, "cluster.versions", "torch build",
                    lambda n: (_probe(n).get("torch_build") or {}).get("kind"), fix)
    ascend_fix = "install the same CANN toolkit and NPU driver on every node (research: Ascend version matrix)"
    out += _compare(view, "cluster.versions", "CANN version",
                    lambda n: ((n["facts"].get("ascend") or {}).get("cann") or {}).get("version"), ascend_fix)
    out += _compare(view, "cluster.versions", "NPU driver version",
                    lambda n: ((n["facts"].get("ascend") or {}).get("driver") or {}).get("version"), ascend_fix)
    return out


@check("cluster.code", "cluster", "Same verl code on every node", scope="cluster")
def code_matches(view: ClusterView) -> list[Finding]:
    """What it checks: that a verl source checkout (an editable install or a checkout on the path)
    is at the same git commit on every node, and clean; the installed version is cluster.versions'.

    How the job fails without it: the workers on one node run other code than the driver: a config
    key one side has and the other lacks, a changed function signature, a Ray task that raises on
    one node only (`ray.exceptions.RayTaskError`), minutes into the run.

    Fix: check out the same commit on every node (`git -C <verl checkout> checkout <commit>`) and
    commit or stash local edits.

    After the fact: ray-task-error, ray-actor-died"""
    def state(n: dict) -> str | None:
        git = (n.get("git") or {}).get("verl")
        if not git:
            return None
        return f"{(git.get('commit') or 'unknown')[:12]}{' (dirty)' if git.get('dirty') else ''}"

    return _compare(view, "cluster.code", "verl source commit", state,
                    "check out the same commit on every node (git -C <verl checkout> checkout <commit>) "
                    "and commit or stash local edits")


@check("cluster.imports", "cluster", "Packages load from the same place on every node", scope="cluster")
def imports_match(view: ClusterView) -> list[Finding]:
    """What it checks: that `import X` for each package of the stack loads from the same place on every
    node, saying when it is the launch directory (a source tree shadowing the wheel on one node only).

    How the job fails without it: only the workers of the differing node fail, after the job has
    started: `ImportError: cannot import name ...`, `No module named 'vllm._C'` in a Ray worker's
    traceback, which the driver reports as a dead actor.

    Fix: make `import X` resolve to the installed package on every node: remove or rename the X/
    directory in the launch directory, or on PYTHONPATH of that node's `ray start`.

    After the fact: python-shadowed-package-source-tree, python-shadowed-package-unknown-location,
    npu-torch-npu-source-shadow, ray-actor-died"""
    out = []
    names = sorted({name for n in view.answered for name in _packages(n)})
    for name in names:
        out += _compare(view, "cluster.imports", f"where `import {name}` loads from",
                        lambda n, nm=name: _import_place(n, nm),
                        f"make `import {name}` resolve to the installed package on every node: remove or rename "
                        f"a {name}/ directory in the launch directory or on PYTHONPATH of that node's `ray start`")
    return out


@check("cluster.paths", "cluster", "Model and data identical on every node", scope="cluster")
def paths_match(view: ClusterView) -> list[Finding]:
    """What it checks: that the model and data paths the launch names exist on every node and hold
    the same files (each file's size and a fast content fingerprint, compared with the
    reference node's); a path missing on every node is left to workdir.paths and data.files.

    How the job fails without it: the workers on the node without the files fail when they load the
    model or the data (`FileNotFoundError`, `... is not a local folder and is not a valid model
    identifier`); a node with other weights or data trains on them without an error.

    Fix: copy the reference's copy there: `rsync -a --checksum <path> <node>:<dir>/`, or put the
    files on storage every node mounts at the same path.

    After the fact: verl-data-file-not-found, verl-model-path-invalid"""
    out = []
    for path, key in view.path_keys.items():
        def fp(n: dict, p=path) -> dict:
            return (n.get("fingerprints") or {}).get(p) or {"exists": False}

        ref = fp(view.reference) if view.reference else None
        everywhere_missing = all(not fp(n)["exists"] for n in view.answered)
        if ref is None or everywhere_missing:
            continue  # a path missing on every node is the local data/workdir checks' finding
        for n in view.others():
            mine = fp(n)
            ev = {"setting": key, "path": path, "values": {
                m["label"]: {k: v for k, v in fp(m).items() if k != "files"} for m in (view.reference, n)}}
            if mine["exists"] != ref["exists"]:
                has, lacks = (view.reference, n) if ref["exists"] else (n, view.reference)
                out.append(_finding("cluster.paths", "fail", f"{key} missing on {lacks['label']}",
                                    f"{path} ({key}) exists on {has['label']} but not on {lacks['label']}",
                                    f"copy it there: rsync -a {path} {lacks['label']}:"
                                    f"{os.path.dirname(path.rstrip('/')) or '/'}/", ev, lacks["label"]))
            elif mine["exists"] and mine.get("digest") != ref.get("digest"):
                missing, extra, changed = _file_diff(fp(view.reference), fp(n))
                parts = [f"{what} {', '.join(names[:5])}" for what, names in
                         ((f"missing on {n['label']}:", missing), (f"only on {n['label']}:", extra),
                          ("different content:", changed)) if names]
                title = f"{key}: files missing on {n['label']}" if missing else f"{key} differs on {n['label']}"
                out.append(_finding("cluster.paths", "fail", title,
                                    f"{path} ({key}) on {n['label']} ({mine.get('size')} bytes) is not the same as on "
                                    f"{view.ref_label()} ({ref.get('size')} bytes)" + (f"; {'; '.join(parts)}" if parts else
                                                                                       "; different content"),
                                    f"copy the reference: rsync -a --checksum {path} {n['label']}:"
                                    f"{os.path.dirname(path.rstrip('/')) or '/'}/",
                                    {**ev, "files": sorted(missing + extra + changed), "missing": missing}, n["label"]))
    return out


def _file_diff(ref: dict, mine: dict) -> tuple[list[str], list[str], list[str]]:
    """(missing here, only here, different content) between two directory fingerprints."""
    a, b = ref.get("files") or {}, mine.get("files") or {}
    return (sorted(set(a) - set(b)), sorted(set(b) - set(a)),
            sorted(k for k in set(a) & set(b) if a[k] != b[k]))


@check("cluster.env", "cluster", "Communication variables valid on every node", scope="cluster")
def interfaces_valid(view: ClusterView) -> list[Finding]:
    """What it checks: on every node, in the environment of its `ray start` (what Ray workers inherit,
    not the launching shell's), that each interface variable (GLOO_SOCKET_IFNAME, HCCL_SOCKET_IFNAME,
    NCCL_SOCKET_IFNAME, TP_SOCKET_IFNAME) names an interface that node has, up; that
    GLOO_SOCKET_IFNAME / TP_SOCKET_IFNAME list the same number of interfaces everywhere; and that the
    other communication variables (MASTER_ADDR, HCCL_IF_BASE_PORT, ...) agree with the reference node.

    How the job fails without it: a variable exported only in the launching shell never reaches
    the other nodes' workers, which then choose interfaces on their own; a name another node lacks
    fails there: `Unable to find address for: eth6`, `... by HCCL_SOCKET_IFNAME, but not found in
    the environment`; differing interface counts break Gloo's round-robin
    (https://docs.pytorch.org/docs/stable/distributed.html#common-environment-variables).

    Fix: on the node named: `export VAR=<its interface>` in the shell that runs `ray start`, then
    start Ray on that node again.

    After the fact: gloo-socket-ifname-not-found, hccl-socket-ifname-not-found, nccl-socket-ifname-not-found,
    gloo-connect-full-mesh-failed"""
    out = []
    for n in view.answered:
        env = n["facts"].get("comm_env") or {}
        ifaces = n["facts"].get("interfaces") or {}
        for var in IFNAME_VARS:
            value = env.get(var)
            if not value:
                continue
            problem = _ifname_problem(var, value, ifaces)
            if problem:
                have = ", ".join(f"{k}{'' if v.get('up') else ' (down)'}" for k, v in sorted(ifaces.items()))
                elsewhere = [m["label"] for m in view.answered if m is not n
                             and value.split(",")[0].lstrip("^=") in (m["facts"].get("interfaces") or {})]
                more = f"; it exists on {', '.join(elsewhere)}" if elsewhere else ""
                out.append(_finding("cluster.env", "fail", f"{var} on {n['label']}: {problem}",
                                    f"{var}={value} in the environment of `ray start` on {n['label']}, "
                                    f"which has: {have}{more}",
                                    f"on {n['label']}: export {var}={_cluster_iface(n)}, then restart `ray start` there",
                                    {"value": value, "interfaces": sorted(ifaces)}, n["label"]))
    ref = view.reference
    if ref is None:
        return out
    ref_env = ref["facts"].get("comm_env") or {}
    for n in view.others():
        env = n["facts"].get("comm_env") or {}
        for var in sorted(set(env) | set(ref_env)):
            a, b = ref_env.get(var), env.get(var)
            if a == b:
                continue
            if var in IFNAME_VARS and a and b:
                if var in EXACT_LIST_VARS and len(a.split(",")) != len(b.split(",")):
                    out.append(_finding("cluster.env", "fail", f"{var} lists a different number of interfaces",
                                        f"{var}={b} on {n['label']}, {a} on {view.ref_label()}: every process must "
                                        "name the same number of interfaces", f"give {var} one interface on every node",
                                        {"values": {ref["label"]: a, n["label"]: b}}, n["label"]))
                continue  # different NIC names per machine are fine when each is valid
            status = "fail" if var in IFNAME_VARS else "warn"
            out.append(_finding("cluster.env", status, f"{var} differs on {n['label']}",
                                f"{var}: {_fmt(b)} on {n['label']}, {_fmt(a)} on {view.ref_label()} "
                                "(what counts is each node's `ray start` environment)",
                                f"export the same {var} before `ray start` on every node",
                                {"values": {ref["label"]: a, n["label"]: b}}, n["label"]))
    return out


def _cluster_iface(n: dict) -> str:
    """The interface carrying the node's Ray address: the one its peers already reach it on."""
    for name, info in (n["facts"].get("interfaces") or {}).items():
        if n.get("ip") in (info.get("ipv4") or []):
            return f"{name} (the interface of its Ray address {n['ip']})"
    return f"<the interface of its cluster address (ip route get {n.get('ip')})>"


def _ifname_problem(var: str, value: str, ifaces: dict) -> str | None:
    if var in EXACT_LIST_VARS:
        for name in value.split(","):
            if name not in ifaces:
                return f"no interface {name}"
            if not ifaces[name].get("up"):
                return f"interface {name} is down"
        return None
    exclude, exact, items = parse_ifname_list(value)
    matched = [n for n in ifaces if any(n == i if exact else n.startswith(i) for i in items) != exclude]
    if not matched:
        return f"no interface matches {value}"
    if not any(ifaces[n].get("up") for n in matched):
        return f"every interface matching {value} is down"
    return None


@check("cluster.devices", "cluster", "Device counts match the launch and Ray", scope="cluster")
def devices_match(view: ClusterView) -> list[Finding]:
    """What it checks: that every node has the trainer.n_gpus_per_node devices the launch asks for
    (/dev/davinci* or /dev/nvidia*), and that Ray's NPU / GPU resource on the node counts all of
    them, naming ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES in its `ray start` environment when
    that is what narrows Ray's count.

    How the job fails without it: verl's resource pool asks Ray for n_gpus_per_node per node and
    stops with `Total available GPUs 8 is less than total desired GPUs 16`
    (https://github.com/volcengine/verl/blob/main/verl/single_controller/ray/base.py), or waits for
    a placement group Ray cannot place.

    Fix: trainer.n_gpus_per_node=<the devices each node has>; on a node where Ray counts too few:
    list every device in ASCEND_RT_VISIBLE_DEVICES (or unset it), or `ray start ...
    --resources='{"NPU": 8}'`, then start Ray there again.

    After the fact: verl-not-enough-gpus, ray-resources-unschedulable"""
    out = []
    counts = {n["label"]: _device_count(n) for n in view.answered}
    if view.answered and not any(c for _, c in counts.values()):
        return [_finding("cluster.devices", "skip", "no accelerators on any node",
                         "device counts not compared: no /dev/davinci* or /dev/nvidia* on any node",
                         evidence={"counts": {k: c for k, (_, c) in counts.items()}})]
    for n in view.answered:
        kind, real = counts[n["label"]]
        resource = "NPU" if kind == "npu" else "GPU"
        ray_count = int((n.get("resources") or {}).get(resource, 0))
        if kind == "npu" and not ray_count:
            continue  # no NPU resource at all: cluster.npu_resources says so, with its `ray start` line
        if view.gpus_per_node and real < view.gpus_per_node:
            out.append(_finding("cluster.devices", "fail",
                                f"{n['label']} has {real} devices, trainer.n_gpus_per_node={view.gpus_per_node}",
                                f"{n['label']} has {real} {resource}s; the launch asks for {view.gpus_per_node} per node",
                                f"set trainer.n_gpus_per_node={real} or use nodes with {view.gpus_per_node} devices",
                                {"devices": real, "n_gpus_per_node": view.gpus_per_node}, n["label"]))
        if real and ray_count < real:
            visible, limit = visible_devices(n["facts"].get("devices") or {}, n.get("env") or {})
            if limit and ray_count == visible:  # the node's `ray start` environment narrowed it on purpose?
                var, value = limit
                why = f"{var}={value} in the environment of its `ray start` leaves Ray {visible}"
                fix = f"on {n['label']}: list every device in {var} (or unset it), then `ray start` again"
            else:
                why = "Ray's NPU detector without pyACL counts /dev/davinci? only, single digits"
                fix = f"on {n['label']}: " + (ray_start_line(view, n, real) if kind == "npu" else
                                                f"ray start ... --num-gpus={real}")
            out.append(_finding("cluster.devices", "fail" if view.gpus_per_node and ray_count < view.gpus_per_node
                                else "warn",
                                f"Ray counts {ray_count} {resource}s on {n['label']}, which has {real}",
                                f"Ray's {resource} resource on {n['label']} is {ray_count} but the node has {real} "
                                f"devices ({why})", fix, {"ray": ray_count, "devices": real}, n["label"]))
    return out


def ray_start_line(view: ClusterView, n: dict, npu: int) -> str:
    """The `ray start` that registers the node's NPUs (verl's multi-machine script, with this
    cluster's head, GCS port and the node's address)."""
    gcs = (((view.report.get("ports") or {}).get("ray") or {}).get("gcs")
           or load_toml("cluster_checklist.toml")["ray_ports"]["gcs"])
    head = next((m for m in view.answered if m.get("head")), view.reference)
    role = f"--head --port={gcs}" if n.get("head") else f"--address={head['ip'] if head else '<head ip>'}:{gcs}"
    return f"ray start {role} --node-ip-address={n.get('ip')} --resources='{{\"NPU\": {npu}}}'"


def _device_count(n: dict) -> tuple[str, int]:
    dev = n["facts"].get("devices") or {}
    if dev.get("davinci"):
        return "npu", int(dev["davinci"])
    return "gpu", int(dev.get("nvidia") or 0)


def _address_problems(view: ClusterView) -> list[Finding]:
    """A transport with no usable address on a node, or one that would bind loopback."""
    out = []
    for n in view.answered:
        for transport, pick in (n.get("links") or {}).items():
            if pick.get("error"):
                out.append(_finding("cluster.link", "fail", f"{transport} has no usable address on {n['label']}",
                                    pick["error"], f"on {n['label']}: export {transport.upper()}_SOCKET_IFNAME="
                                    f"{_cluster_iface(n)}, then restart `ray start` there", {"transport": transport},
                                    n["label"]))
            elif pick.get("address", "").startswith("127.") and len(view.answered) > 1:
                out.append(_finding("cluster.link", "fail", f"{transport} would bind loopback on {n['label']}",
                                    f"{pick.get('via')}: {pick['address']}; other nodes cannot reach it and the job "
                                    "fails in connectFullMesh (one rank hangs)",
                                    f"on {n['label']}: export {transport.upper()}_SOCKET_IFNAME=<cluster interface>, "
                                    "or map the hostname to the cluster address in /etc/hosts",
                                    {"transport": transport, **pick}, n["label"]))
    return out


def _shared_addresses(view: ClusterView) -> list[Finding]:
    """Several nodes that would pick one address for a transport (a shared bridge, one machine)."""
    out = []
    shared = defaultdict(list)
    for n in view.answered:
        for transport, pick in (n.get("links") or {}).items():
            if pick.get("address") and not pick["address"].startswith("127."):
                shared[(transport, pick["address"])].append(n["label"])
    for (transport, addr), labels in shared.items():
        if len(labels) > 1:
            out.append(_finding("cluster.link", "fail", f"{len(labels)} nodes would use {addr} for {transport}",
                                f"{', '.join(labels)} all pick {addr} for {transport}: a collective cannot tell them "
                                "apart (a shared bridge such as docker0, or several nodes on one machine)",
                                f"set {transport.upper()}_SOCKET_IFNAME on each node to its own cluster interface",
                                {"transport": transport, "address": addr, "nodes": labels}, labels[-1]))
    return out


@check("cluster.link", "cluster", "Nodes reach each other on the collective interfaces", scope="cluster")
def links_work(view: ClusterView) -> list[Finding]:
    """What it checks: that each node has a usable, non-loopback address for each transport it will use
    (Gloo, HCCL, NCCL), chosen as that library would choose it from the node's variables; that no two
    nodes pick the same address; and, with a TCP connection from every node to every other node's
    address on one agreed port, that they reach each other.

    How the job fails without it: the first collective hangs, then times out or fails:
    `connectFullMesh failed` (Gloo), HCCL `EI0006` socket timeout or a transport init error, NCCL
    watchdog timeouts; a loopback or shared docker0 address makes ranks connect to themselves.

    Fix: set the transport's interface variable on each node to its own cluster interface before
    `ray start`; check routes (`ip route get <peer address>`) and firewalls between the named nodes.

    After the fact: gloo-connect-full-mesh-failed, gloo-hostname-loopback, hccl-socket-timeout,
    hccl-transport-init-error, torch-dist-store-timeout, nccl-watchdog-timeout"""
    out = _address_problems(view) + _shared_addresses(view)
    link = view.report.get("link")
    if not link:
        return out
    tested = 0
    for nid, res in (link.get("by_node") or {}).items():
        label = view.labels.get(nid, nid)
        if res.get("no_answer") or res.get("error"):
            out.append(_finding("cluster.link", "fail", f"link test did not run on {label}",
                                res.get("no_answer") or res.get("error"), node=label))
            continue
        for addr, err in (res.get("listen_errors") or {}).items():
            out.append(_finding("cluster.link", "warn", f"link test could not listen on {label}", err, node=label))
        for r in res.get("results") or []:
            tested += 1
            if r.get("ok"):
                continue
            target = view.labels.get(r["to"], r["to"])
            out.append(_finding("cluster.link", "fail",
                                f"{label} cannot reach {target} over {r['transport']}",
                                f"TCP {r['address']}:{link['port']} ({r['transport']} address of {target}) from "
                                f"{label}: {r.get('error')}",
                                f"make {target}'s {r['transport']} interface reachable from {label}: check "
                                f"{r['transport'].upper()}_SOCKET_IFNAME on both, routes (ip route get {r['address']}) "
                                "and firewalls", {k: r.get(k) for k in ("transport", "address", "error")}, target))
    if tested and not any(f.status == "fail" for f in out):
        times = [r["connect_ms"] for res in link["by_node"].values() for r in res.get("results") or []
                 if r.get("ok")]
        out.append(_finding("cluster.link", "pass", "every node reaches every other node",
                            f"{tested} TCP connection{'s' * (tested != 1)} on the addresses Gloo/HCCL/NCCL would "
                            f"use; connect time median {sorted(times)[len(times) // 2]:.2f} ms",
                            evidence={"connect_ms": times}))
    return out


@check("cluster.collective", "cluster", "A collective across the nodes works (--deep)", scope="cluster")
def collective_works(view: ClusterView) -> list[Finding]:
    """What it checks: with --deep, a real Gloo all-reduce across all nodes (and NCCL or HCCL where
    every node has devices), run in the target interpreter with each node's environment: the result
    on every rank, its latency (20 one-element all-reduces) and bandwidth (an 8 MiB all-reduce).

    How the job fails without it: the interface, route and version problems the other checks can
    only infer show up in verl's first collective, minutes after launch: a hang until
    HCCL_EXEC_TIMEOUT or the NCCL watchdog, `HcclCommInitRootInfo` failures, `connectFullMesh failed`.

    Fix: fix what cluster.env, cluster.link and cluster.versions report, then rerun with --deep;
    the failing rank's stderr is in the finding's evidence.

    After the fact: hccl-comm-init-failed, hccl-notify-wait-timeout, hccl-call-failed,
    gloo-connect-full-mesh-failed, nccl-watchdog-timeout"""
    coll = view.report.get("collective")
    if not coll:
        return [_finding("cluster.collective", "skip", "collective not run",
                         "add --deep to run a Gloo all-reduce (and NCCL/HCCL where devices exist) across the nodes")]
    out = []
    for backend in ("gloo", "nccl", "hccl"):
        ranks = coll.get(backend)
        if not ranks:
            continue
        bad = {view.labels.get(nid, nid): r for nid, r in ranks.items() if not r.get("ok")}
        if bad:
            for label, r in bad.items():
                why = r.get("no_answer") or r.get("error") or "wrong result"
                out.append(_finding("cluster.collective", "fail", f"{backend} all-reduce failed on {label}",
                                    f"rank {r.get('rank', '?')} on {label}: {why}",
                                    "fix the interface variables and link findings above, then rerun with --deep",
                                    {"backend": backend, "stderr": r.get("stderr") or []}, label))
            continue
        lat = max(r["latency_us"] for r in ranks.values())
        bw = min(r["bandwidth_MBps"] for r in ranks.values())
        out.append(_finding("cluster.collective", "pass",
                            f"{backend} all-reduce across {len(ranks)} nodes works",
                            f"latency {lat:.0f} us (median of 20 one-element all-reduces), "
                            f"bandwidth {bw:.0f} MiB/s (8 MiB all-reduce)",
                            evidence={"backend": backend, "latency_us": lat, "bandwidth_MBps": bw,
                                      "master": coll.get("master")}))
    return out
