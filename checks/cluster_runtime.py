"""verl's Ascend multi-machine checklist, what runs: the ports tested for real, Ray's resources
against the devices, and the clocks. Category `cluster`.

The probe (probes/cluster_ports.py and the clock round of probes/cluster_driver.py) leaves, per
node, which connects failed and which ports could not be listened on, and each node's clock
against the driver's. Settings: knowledge/cluster_checklist.toml.
"""
from __future__ import annotations

import json
from collections import defaultdict

from checks.cluster import ClusterView, _finding, ray_start_line
from checks.cluster_checklist import checklist, npus
from checks.registry import check

WHAT = {"hccl_host": "HCCL host ports (HCCL_HOST_SOCKET_PORT_RANGE)", "gcs": "the Ray GCS port",
        "dashboard": "the Ray dashboard port"}
SHORT = {"hccl_host": "HCCL host ports", "gcs": "Ray GCS port", "dashboard": "Ray dashboard port"}


def _port_answers(view: ClusterView) -> dict:
    """node id -> its ports answer ({results, listen_errors} or {error})."""
    by_node = (view.report.get("link") or {}).get("by_node") or {}
    return {nid: a["ports"] for nid, a in by_node.items() if isinstance(a.get("ports"), dict)}


@check("cluster.ports", "cluster", "The checklist's ports answer between the nodes, each way", scope="cluster")
def ports_answer(view: ClusterView) -> list:
    """What it checks: HCCL host ports, the GCS and the dashboard blocked between nodes, or taken.
    A real listener and a real connect each way: every node listens on a
    sample of its HCCL_HOST_SOCKET_PORT_RANGE (on the address HCCL binds) and every other node
    connects to each of those ports; every node connects to the head's Ray GCS and dashboard ports.
    A port that cannot be listened on because another process holds it is named with its holder.

    How the job fails without it: a firewall that drops part of the HCCL range lets `ping` and
    Ray work while HCCL's links to that node time out (EI0006) after HCCL_CONNECT_TIMEOUT; a
    port another job holds fails the rank that needs it; a node that cannot reach the GCS never
    joins, and the head waits for NPUs that never come.

    Fix: open the ports the finding names in the direction it names (firewall rules on the
    receiving node), stop the process holding a port or move the range, then check again.

    After the fact: hccl-socket-timeout, hccl-port-in-use, ray-gcs-unreachable
    """
    labels, answers, out = view.labels, _port_answers(view), []
    taken = set()
    for nid, ans in answers.items():
        for where, why in (ans.get("listen_errors") or {}).items():
            taken.add((nid, int(where.rpartition(":")[2])))
        out += _taken_findings(labels.get(nid, nid), ans.get("listen_errors") or {})
    failed = defaultdict(list)
    tested = 0
    for nid, ans in answers.items():
        for r in ans.get("results") or []:
            tested += 1
            if not r["ok"] and (r["to"], r["port"]) not in taken:  # a taken port is named above
                failed[(nid, r["to"], r["what"])].append(r)
    for (src, dst, what), rs in failed.items():
        out.append(_blocked(labels.get(src, src), labels.get(dst, dst), what, rs))
    if tested and not out:
        ray = (view.report.get("ports") or {}).get("ray") or {}
        out.append(_finding("cluster.ports", "pass", f"{tested} port connects answered",
                            f"HCCL host port samples each way and the head's Ray ports ({json.dumps(ray)}) "
                            "from every node", evidence={"tested": tested, "ray": ray}))
    return out


def _taken_findings(label: str, errors: dict) -> list:
    by_why = defaultdict(list)
    for where, why in errors.items():
        by_why[why].append(int(where.rpartition(":")[2]))
    return [_finding("cluster.ports", "fail", f"HCCL host port{'s' * (len(ports) > 1)} "
                     f"{_ports_text(ports)} on {label} cannot be listened on",
                     f"{_ports_text(ports)} of HCCL_HOST_SOCKET_PORT_RANGE on {label}: {why} (another job's ports?)",
                     f"on {label}: stop what holds {'them' if len(ports) > 1 else 'it'} (`ss -ltnp 'sport = :{ports[0]}'`), "
                     "or give HCCL_HOST_SOCKET_PORT_RANGE a free range on every node",
                     {"ports": sorted(ports), "why": why}, label)
            for why, ports in by_why.items()]


def _ports_text(ports: list[int]) -> str:
    ports = sorted(ports)
    return ", ".join(str(p) for p in ports[:8]) + (f" (+{len(ports) - 8} more)" if len(ports) > 8 else "")


def _blocked(src: str, dst: str, what: str, rs: list[dict]) -> object:
    ports = sorted(r["port"] for r in rs)
    status = "warn" if what == "dashboard" else "fail"
    fix = (f"on {dst}: let {src} in on TCP {_ports_text(ports)} (e.g. `nft list ruleset` / `iptables -S` there), "
           f"and check the route from {src} (ip route get {rs[0]['addr']})")
    if what == "dashboard":
        fix += "; start the head with --dashboard-host=<its cluster IP> to serve other nodes"
    return _finding("cluster.ports", status, f"{src} -> {dst}: {SHORT.get(what, what)} {_ports_text(ports)} blocked",
                    f"TCP from {src} to {dst} ({rs[0]['addr']}) on {WHAT.get(what, what)} {_ports_text(ports)}: "
                    f"{rs[0].get('error')}", fix,
                    {"from": src, "to": dst, "what": what, "ports": ports, "error": rs[0].get("error")}, dst)


@check("cluster.npu_resources", "cluster", "Ray registers every node's NPUs as NPU", scope="cluster")
def npu_resources(view: ClusterView) -> list:
    """What it checks: NPUs that Ray does not offer as `NPU` (missing, or counted as `GPU`).
    On every node with NPUs (/dev/davinci[0-9]*), that Ray offers them as the
    `NPU` resource: not missing, and not counted as `GPU` (`ray start --num-gpus=8` on an Ascend
    node makes Ray pick the GPU manager, and then no NPU is registered at all).

    How the job fails without it: verl asks Ray for NPU bundles; none can be placed, the job waits
    on "The following resource request cannot be scheduled right now: {'NPU': 1.0}" (or vllm-ascend
    says "Current node has no NPU available"), and the head waits for NPUs that never join.

    Fix: restart Ray on that node with the `ray start` line the finding gives (no --num-gpus,
    --resources='{"NPU": N}').

    After the fact: ray-npu-resource-missing, ray-resources-unschedulable
    """
    out = []
    for n in view.answered:
        real, res = npus(n), n.get("resources") or {}
        gpu = 0 if ((n["facts"].get("devices") or {}).get("nvidia")) else int(res.get("GPU", 0))
        if not real or (res.get("NPU") and not gpu):
            continue  # fewer NPU than devices: cluster.devices
        line, label = ray_start_line(view, n, real), n["label"]
        if gpu and res.get("NPU"):
            title = f"Ray counts the {real} NPUs of {label} as {gpu} GPUs as well as {int(res['NPU'])} NPUs"
            why = (f"Ray's resources on {label}: GPU {gpu} and NPU {int(res['NPU'])} (started with --num-gpus): "
                   "which of the two Ray registers follows the order of a set in Ray 2.60 "
                   "(ray/_private/resource_and_label_spec.py:466), so the next restart can drop NPU")
        elif gpu:
            title = f"Ray counts the {real} NPUs of {label} as {gpu} GPUs"
            why = f"Ray's resources on {label}: GPU {gpu}, no NPU (started with --num-gpus?)"
        else:
            title = f"Ray has no NPU resource on {label}, which has {real} NPUs"
            why = f"Ray's resources on {label}: no NPU (detection failed, or ASCEND_RT_VISIBLE_DEVICES empty)"
        out.append(_finding("cluster.npu_resources", "fail", title,
                            f"{why}; {real} /dev/davinci* devices; verl places its workers on NPU resources",
                            f"on {label}: {line}" + (" (drop --num-gpus)" if gpu else ""),
                            {"devices": real, "resources": {k: v for k, v in res.items() if k in ("GPU", "NPU")},
                             "ray_start": line}, label))
    return out


@check("cluster.clocks", "cluster", "Node clocks agree", scope="cluster")
def clocks_agree(view: ClusterView) -> list:
    """What it checks: Node clocks that disagree beyond what logs and authentication tolerate.
    Every node's clock against the reference node's, measured through the
    agents (the exchange with the shortest round trip; half of it is the uncertainty): a warning
    past the skew that scrambles log timelines, a failure past what token and ticket
    authentication tolerate (knowledge/cluster_checklist.toml, [clock]).

    How the job fails without it: logs of different nodes no longer line up, so the first error
    of a multi-node failure is read in the wrong order; beyond minutes, authentication between
    nodes (Kerberos-backed storage, expiring tokens) rejects the skewed node.

    Fix: run time sync on every node (`chronyc tracking` / `timedatectl` shows it; `systemctl
    enable --now chronyd` or systemd-timesyncd) against the same servers.

    After the fact: clock-skew-too-great
    """
    clock, ref = view.report.get("clock") or {}, view.reference
    if not clock or ref is None or ref.get("id") not in clock:
        return []
    c, out = checklist()["clock"], []
    base = clock[ref["id"]]
    for n in view.others():
        mine = clock.get(n.get("id"))
        if not mine:
            continue
        skew = mine["offset_s"] - base["offset_s"]
        sure = abs(skew) - mine["uncertainty_s"] - base["uncertainty_s"]  # at least this far apart
        status = "fail" if sure > c["fail_skew_s"] else "warn" if sure > c["warn_skew_s"] else None
        if status:
            why = c["fail_why"] if status == "fail" else c["warn_why"]
            out.append(_finding("cluster.clocks", status, f"the clock of {n['label']} is {skew:+.1f} s off {view.ref_label()}",
                                f"{n['label']} is {abs(skew):.1f} s {'ahead of' if skew > 0 else 'behind'} "
                                f"{view.ref_label()} (+/- {mine['uncertainty_s'] + base['uncertainty_s']:.2f} s): {why}",
                                f"on {n['label']} and every node: sync to the same time servers "
                                "(`systemctl enable --now chronyd`; `chronyc tracking` shows the offset)",
                                {"skew_s": round(skew, 3), "uncertainty_s": mine["uncertainty_s"]}, n["label"]))
    return out
