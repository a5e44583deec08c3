"""verl's Ascend multi-machine checklist, the variables: category `cluster`.

Every setting comes from knowledge/cluster_checklist.toml (meaning, default, syntax, range, whether
it must match across nodes, sources). Values are each node's own: the environment of its
`ray start` (read from its raylet), its raylet's open-file limit and the kernel's port settings of
its network namespace, as probes/cluster_node.py gathers them.
"""
from __future__ import annotations

from checks.cluster import ClusterView, _compare, _finding
from checks.registry import check
from knowledge import load_toml
from probes.cluster_ports import parse_port_list, port_count

TIMEOUT_VARS = ("HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT")
PORT_VARS = ("HCCL_HOST_SOCKET_PORT_RANGE", "HCCL_NPU_SOCKET_PORT_RANGE")
NOSET = "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"
VISIBLE = "ASCEND_RT_VISIBLE_DEVICES"


def checklist() -> dict:
    return load_toml("cluster_checklist.toml")


def spec(name: str) -> dict:
    return next(v for v in checklist()["variable"] if v["name"] == name)


def env_of(n: dict) -> dict:
    return n.get("env") or {}


def npus(n: dict) -> int:
    return int(((n.get("facts") or {}).get("devices") or {}).get("davinci") or 0)


def npu_job(view: ClusterView) -> bool:
    """The job runs HCCL: a node has NPUs, or the launch asks for trainer.device=npu."""
    return view.job.get("device") == "npu" or any(npus(n) for n in view.answered)


def ranks_per_node(view: ClusterView, n: dict) -> int:
    return int(view.gpus_per_node or npus(n) or 0)


def restart_fix(label: str, assignment: str) -> str:
    return f"on {label}: export {assignment} in the shell that runs `ray start`, then restart `ray start` there"


def _same_fix(var: str) -> str:
    return f"export the same {var} before `ray start` on every node (verl's checklist sets it on all of them)"


def timeout_floor(view: ClusterView) -> tuple[dict, str]:
    """The HCCL timeouts this job's world size and model size call for, and why."""
    world = (view.nnodes or 1) * (view.gpus_per_node or 0)
    params = view.job.get("params_b") or 0
    floor, why = {}, []
    for row in checklist()["timeout_floor"]:
        if world >= row["min_world"] and params >= row["min_params_b"]:
            for var in TIMEOUT_VARS:
                floor[var] = max(floor.get(var, 0), row[var])
            why.append(row["why"])
    size = f"{world} ranks" + (f", a {params:g}B model ({view.job.get('params_from')})" if params else "")
    return floor, f"{size}: {'; '.join(why)}" if why else size


@check("cluster.hccl_timeouts", "cluster", "HCCL timeouts valid and long enough for the job", scope="cluster")
def hccl_timeouts(view: ClusterView) -> list:
    """What it checks: HCCL timeouts that are invalid, too short for the job, or differ across nodes.
    HCCL_CONNECT_TIMEOUT and HCCL_EXEC_TIMEOUT in every node's `ray start`
    environment: an integer within CANN's range, not below what the job's world size and model size
    call for (knowledge/cluster_checklist.toml, timeout_floor), and the same on every node.

    How the job fails without it: ranks that are still loading the model or compiling their first
    graph when the 120 s connect default runs out fail with EI0006 "wait socket establish timeout";
    a rank slower than HCCL_EXEC_TIMEOUT in a collective aborts the whole job mid-step.

    Fix: on every node export HCCL_CONNECT_TIMEOUT and HCCL_EXEC_TIMEOUT at least as large as the
    finding says (verl's Ascend checklist uses 3600 for both) and restart `ray start` there.

    After the fact: hccl-socket-timeout, hccl-notify-wait-timeout
    """
    if not npu_job(view):
        return []
    floor, why = timeout_floor(view)
    out = []
    for n in view.answered:
        for var in TIMEOUT_VARS:
            out += _timeout_problem(n, var, floor.get(var), why)
    for var in TIMEOUT_VARS:
        out += _compare(view, "cluster.hccl_timeouts", var, lambda n, v=var: env_of(n).get(v), _same_fix(var))
    return out


def _timeout_problem(n: dict, var: str, need: int | None, why: str) -> list:
    s, raw = spec(var), env_of(n).get(var)
    label = n["label"]
    try:
        value = int(s["default"] if raw is None else raw)
    except ValueError:
        value = None
    if value is None or not s["min"] <= value <= s["max"]:
        return [_finding("cluster.hccl_timeouts", "fail", f"{var}={raw} on {label} is not valid",
                         f"{var} takes an integer number of seconds in [{s['min']}, {s['max']}] ({s['sources'][0]})",
                         restart_fix(label, f"{var}={max(need or 0, int(s['default']))}"),
                         {"value": raw}, label)]
    if need and value < need and not (var == "HCCL_EXEC_TIMEOUT" and value == 0):
        shown = raw if raw is not None else f"unset (default {value})"
        return [_finding("cluster.hccl_timeouts", "fail", f"{var} on {label} is {value} s, below {need} s for this job",
                         f"{var}={shown} in the environment of `ray start` on {label}; this job has {why}",
                         restart_fix(label, f"{var}={need}"), {"value": value, "need": need}, label)]
    return []


@check("cluster.hccl_ports", "cluster", "HCCL port ranges valid, large enough and clear of Ray and the OS",
       scope="cluster")
def hccl_port_ranges(view: ClusterView) -> list:
    """What it checks: HCCL port ranges that are invalid, too small, clash with Ray or the OS, or differ.
    HCCL_HOST_SOCKET_PORT_RANGE and HCCL_NPU_SOCKET_PORT_RANGE on every node:
    CANN's syntax ('auto', or ports and lo-hi ranges, comma-separated, not overlapping), at least as
    many ports as the node's ranks need, the host range clear of the ports the node's raylet holds
    (its worker port range and its own ports) and of the kernel's ephemeral range
    (/proc/sys/net/ipv4/ip_local_port_range, less ip_local_reserved_ports), and the same on every node.

    How the job fails without it: a rank that finds its port held (by a Ray worker, by an outgoing
    connection the kernel numbered in the range, by another job) cannot listen, and its peers time
    out waiting for it; nodes with different ranges look for each other on the wrong ports.

    Fix: one range on every node with a port per rank, outside Ray's ports, reserved from the
    ephemeral range (`sysctl -w net.ipv4.ip_local_reserved_ports=<range>`); restart `ray start`.

    After the fact: hccl-port-in-use, hccl-socket-timeout
    """
    if not npu_job(view) and not any(env_of(n).get(v) for n in view.answered for v in PORT_VARS):
        return []
    out = []
    for n in view.answered:
        for var in PORT_VARS:
            out += _range_problems(view, n, var)
    for var in PORT_VARS:
        out += _compare(view, "cluster.hccl_ports", var, lambda n, v=var: env_of(n).get(v), _same_fix(var))
    return out


def _range_problems(view: ClusterView, n: dict, var: str) -> list:
    raw, label = env_of(n).get(var), n["label"]
    if raw is None:
        return []
    spans, why = parse_port_list(raw)
    fid = "cluster.hccl_ports"
    if spans is None:
        return [_finding(fid, "fail", f"{var}={raw} on {label} is not valid",
                         f"{why}; {var} takes 'auto' or ports and lo-hi ranges separated by ',' ({spec(var)['sources'][0]})",
                         restart_fix(label, f"{var}=60000-60050"), {"value": raw}, label)]
    if not spans:
        return []  # 'auto': the OS picks
    out, need = [], ranks_per_node(view, n) * spec(var)["ports_per_rank"]
    if port_count(spans) < need:
        lo = spans[0][0]
        out.append(_finding(fid, "fail", f"{var} on {label} holds {port_count(spans)} ports, {need} ranks need {need}",
                            f"{var}={raw}: HCCL needs a port per process on the node; the launch runs {need} there",
                            restart_fix(label, f"{var}={lo}-{lo + max(need, 51) - 1}"), {"value": raw, "need": need}, label))
    if min(a for a, _ in spans) < spec(var)["min"]:
        out.append(_finding(fid, "warn", f"{var} on {label} uses system ports below 1024",
                            f"{var}={raw}: ports 1-1023 are reserved for the system ({spec(var)['sources'][0]})",
                            restart_fix(label, f"{var}=60000-60050"), {"value": raw}, label))
    if var == "HCCL_HOST_SOCKET_PORT_RANGE":  # the NPU range lives on the NPU's own NIC, not the host's
        out += _host_overlaps(n, raw, spans)
    return out


def _ray_port_spans(n: dict) -> list[tuple[str, int, int]]:
    """Ports the node's raylet holds or hands to its workers (its command line; Ray's defaults)."""
    ports = (n.get("raylet") or {}).get("ports") or {}
    if not ports:
        return []
    d = checklist()["ray_ports"]
    lo, hi = ports.get("min_worker_port", d["min_worker_port"]), ports.get("max_worker_port", d["max_worker_port"])
    spans = [("Ray's worker ports (--min-worker-port/--max-worker-port)", lo, hi)]
    return spans + [(f"Ray's {name}", p, p) for name, p in ports.items() if name not in ("min_worker_port", "max_worker_port")]


def _host_overlaps(n: dict, raw: str, spans: list[tuple[int, int]]) -> list:
    label, var, out = n["label"], "HCCL_HOST_SOCKET_PORT_RANGE", []
    clash = [f"{what} {a}-{b}" if a != b else f"{what} {a}" for what, a, b in _ray_port_spans(n)
             if any(a <= y and x <= b for x, y in spans)]
    if clash:
        out.append(_finding("cluster.hccl_ports", "fail", f"{var} on {label} overlaps Ray's ports",
                            f"{var}={raw} overlaps {', '.join(clash)} on {label}: a Ray worker may hold the port "
                            f"HCCL needs ({checklist()['ray_ports']['source']})",
                            restart_fix(label, f"{var}=60000-60050") + " (or move Ray's ports)",
                            {"value": raw, "ray": clash}, label))
    eph = [int(x) for x in ((n.get("sysctl") or {}).get("ip_local_port_range") or [])]
    reserved = parse_port_list(",".join((n.get("sysctl") or {}).get("ip_local_reserved_ports") or []))[0] or []
    free = [p for a, b in spans for p in range(a, b + 1) if not any(x <= p <= y for x, y in reserved)]
    hit = [p for p in free if len(eph) == 2 and eph[0] <= p <= eph[1]]
    if hit:
        out.append(_finding("cluster.hccl_ports", "warn", f"{var} on {label} lies in the kernel's ephemeral port range",
                            f"{len(hit)} of its ports ({hit[0]}-{hit[-1]}) are within ip_local_port_range {eph[0]}-{eph[1]} "
                            f"on {label} and not reserved: an outgoing connection can take one before HCCL listens",
                            f"on {label} (and every node): sysctl -w net.ipv4.ip_local_reserved_ports={raw}",
                            {"ephemeral": eph, "in_range": len(hit)}, label))
    return out


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true")  # Ray's env_bool


@check("cluster.visible_devices", "cluster", "Ray leaves NPU visibility to the engine's device choice",
       scope="cluster")
def visible_devices_agree(view: ClusterView) -> list:
    """What it checks: Ray narrowing each worker's NPUs while the engine opens device = local rank.
    On every NPU node, RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 in the
    environment of its `ray start`, and ASCEND_RT_VISIBLE_DEVICES (when set) listing at least
    trainer.n_gpus_per_node devices: the rollout engine verl starts (vllm-ascend, sglang) opens
    device = its local rank, which must be among the devices the worker sees. The list itself must
    be distinct ids in ascending order: the CANN runtime rejects any other (runtime.cc, v8.5.0).

    How the job fails without it: Ray narrows each worker's ASCEND_RT_VISIBLE_DEVICES to the one
    NPU it assigned, so every rank but the first asks for a device it cannot see ("Set visible
    device failed, invalid device=1") and the rollout engine dies at start-up. A list out of order
    (0,2,4,6,1,3,5,7) or with a device twice leaves no device at all (error code 207004).

    Fix: on every node, before `ray start`: export RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1
    and ASCEND_RT_VISIBLE_DEVICES=0,1,...,N-1 (verl v0.9.0's multi-machine checklist).

    After the fact: ascend-visible-device-invalid, ascend-visible-devices-order
    """
    if not npu_job(view):
        return []
    out, engine = [], view.job.get("rollout") or "vllm"
    for n in view.answered:
        env, label, need = env_of(n), n["label"], ranks_per_node(view, n)
        ids = ",".join(str(i) for i in range(need or 8))
        if not _truthy(env.get(NOSET)):
            shown = f"{NOSET}={env[NOSET]}" if NOSET in env else f"{NOSET} is unset"
            out.append(_finding("cluster.visible_devices", "fail", f"{NOSET} is not set on {label}",
                                f"{shown} in the environment of `ray start` on {label}: Ray sets each worker's "
                                f"{VISIBLE} to its own NPU while {engine} opens device = local rank "
                                f"({spec(NOSET)['sources'][0]})",
                                restart_fix(label, f"{NOSET}=1 {VISIBLE}={ids}"), {"value": env.get(NOSET)}, label))
        listed = [i for i in (env.get(VISIBLE) or "").split(",") if i.strip()]
        if env.get(VISIBLE) is not None and need and len(listed) < need:
            out.append(_finding("cluster.visible_devices", "fail", f"{VISIBLE} on {label} lists {len(listed)} of {need} devices",
                                f"{VISIBLE}={env[VISIBLE]} on {label}; trainer.n_gpus_per_node={need} ranks open "
                                f"devices 0-{need - 1}", restart_fix(label, f"{VISIBLE}={ids}"),
                                {"value": env[VISIBLE], "need": need}, label))
        out += _visible_order(env.get(VISIBLE), label)
    return out


def _visible_order(value: str | None, label: str) -> list:
    """The CANN runtime's own test of the list (runtime.cc: each id greater than the one before it)."""
    ids = [t.strip() for t in (value or "").split(",") if t.strip()]
    if not ids or not all(t.isdigit() for t in ids):
        return []  # unset, or a word such as NoDevFiles: not a list the runtime orders
    nums = [int(t) for t in ids]
    if all(a < b for a, b in zip(nums, nums[1:])):
        return []
    why = "names a device twice" if len(set(nums)) < len(nums) else "is not in ascending order"
    fixed = ",".join(map(str, sorted(set(nums))))
    return [_finding("cluster.visible_devices", "fail", f"{VISIBLE} on {label} {why}",
                     f"{VISIBLE}={value} on {label} {why}: the CANN runtime accepts only distinct ids in "
                     f"ascending order and otherwise rejects the variable, so no device can be opened "
                     f"(hicann/runtime v8.5.0 src/runtime/feature/src/runtime.cc)",
                     restart_fix(label, f"{VISIBLE}={fixed}"), {"value": value}, label)]


@check("cluster.open_files", "cluster", "The raylet's open-file limit fits the job's workers", scope="cluster")
def open_files(view: ClusterView) -> list:
    """What it checks: A raylet whose open-file limit is too low for the job's workers.
    The soft 'Max open files' limit of every node's raylet
    (/proc/<raylet pid>/limits: `ulimit -n` of the shell that ran `ray start`), which every
    worker it starts inherits: at least Ray's recommended 8192, and on NPU jobs verl's 32768.

    How the job fails without it: workers holding sockets to the GCS, raylet, object store and
    every peer, plus model shards and logs, run out of descriptors: "Too many open files" (EMFILE)
    in a worker or the raylet, lost actors and a hung step.

    Fix: `ulimit -n 32768` in the shell that runs `ray start` on that node (raise the hard limit in
    /etc/security/limits.conf when it is lower), then restart `ray start` there.

    After the fact: ray-too-many-open-files
    """
    lim, out = checklist()["limits"]["nofile"], []
    for n in view.answered:
        nofile = (n.get("raylet") or {}).get("nofile")
        if not nofile or nofile[0] is None:
            continue
        soft, label = nofile[0], n["label"]
        floor = lim["npu_floor"] if npu_job(view) else lim["fail_below"]
        if soft >= floor:
            continue
        status = "fail" if soft < lim["fail_below"] else "warn"
        source = lim["fail_source"] if status == "fail" else lim["npu_source"]
        out.append(_finding("cluster.open_files", status, f"the raylet on {label} may open {soft} files, below {floor}",
                            f"soft RLIMIT_NOFILE {soft} (hard {nofile[1] or 'unlimited'}) of raylet pid "
                            f"{n['raylet'].get('pid')} on {label}; its workers inherit it ({source})",
                            f"on {label}: `ulimit -n {lim['npu_floor']}` in the shell that runs `ray start`, then "
                            "restart `ray start` there", {"soft": soft, "hard": nofile[1], "need": floor}, label))
    return out
