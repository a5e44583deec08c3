"""The cluster fan-out, driver side. Runs in a subprocess of the target interpreter (the one with
Ray), never in doctor's own process:

    python -c "from probes.cluster_driver import main; main()" < request.json

It connects to the running cluster, asks doctor's agent on every alive node
(probes/cluster_agents.py; pinned there with NodeAffinitySchedulingStrategy(soft=False), all in
parallel, waited for with a deadline), and writes one JSON document to `request["out"]`. A node
that does not answer in time is reported, never waited for. Three rounds, each bounded by
`request["timeout"]`:

1. facts (probes/cluster_node.py): `probes.facts.gather_facts` on the node in its own environment,
   the fingerprints of the launch's model/data paths, verl's git state, the transports' addresses;
2. link (probes/cluster_link.py): every node listens on the addresses Gloo/HCCL/NCCL would bind
   there and connects to every other node's, on one agreed port; beside it (probes/cluster_ports.py)
   a sample of every node's HCCL host port range, each way, and the head's Ray ports from every node;
   then each node's clock against the driver's;
3. (deep) collective (probes/cluster_collective.py): a Gloo all-reduce across all nodes in
   subprocesses of the target interpreter with each node's environment (and NCCL/HCCL where
   every node has devices).

The node-side modules (`NODE_SIDE`) are pickled by value, so nodes need no copy of doctor for
rounds 2 and 3; round 1 falls back to shipping `checks` and `knowledge` with a runtime_env when
the node has no doctor.
"""
from __future__ import annotations

import json
import os
import random
import socket
import sys
import time
from collections import Counter

from probes import cluster_agents, cluster_collective, cluster_link, cluster_node, cluster_ports
from probes.cluster_agents import CODE_ROOT, NAMESPACE, Agents, code_version, end_agents
from probes.cluster_collective import collective_bound

WORKER_START_S = 20.0  # starting a node's agent starts a Python worker there (seconds on a busy node)
NODE_SIDE = (cluster_node, cluster_link, cluster_ports, cluster_collective, cluster_agents)  # what the agents run on the nodes


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

    for module in NODE_SIDE:  # by value: a node without doctor runs them all the same
        ray.cloudpickle.register_pickle_by_value(module)
    t0 = time.perf_counter()
    address = _reachable_gcs(req.get("address"), float(req["timeout"]))
    ctx = ray.init(address=address, logging_level="ERROR", log_to_driver=False, namespace=NAMESPACE)
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
        window = min(timeout, float(req.get("ports_window") or 5.0))
        ray_ports = {"gcs": int(address.rpartition(":")[2]), "dashboard": _dashboard_port(ctx)}
        jobs, samples = ports_jobs(nodes, ok_nodes, ray_ports, int(req.get("ports_sample") or 16))
        report["link"] = {"port": port, "by_node": agents.ask(
            "link", {nid: (nid, plan, port, window, jobs[nid]) for nid in ok_nodes}, window + timeout)}
        report["ports"] = {"ray": ray_ports, "hccl_host": samples, "window_s": window}
        report["clock"] = _clock_round(agents, ok_nodes, timeout)
        if req.get("deep"):
            report["collective"] = _collective_round(agents, req, nodes, ok_nodes, timeout)
    report["agents"] = _agents_summary(nodes, keep=req.get("keep_agents", True))
    if not report["agents"]["kept"]:
        end_agents()
    return report


def _dashboard_port(ctx) -> int | None:
    url = getattr(ctx, "dashboard_url", None) or ""
    tail = url.rpartition(":")[2]
    return int(tail) if tail.isdigit() else None


def ports_jobs(nodes: dict, ok_nodes: list[str], ray_ports: dict, sample: int) -> tuple[dict, dict]:
    """Per node: the HCCL host ports it listens on (a sample of its HCCL_HOST_SOCKET_PORT_RANGE, on
    its HCCL address), and what it connects to: every peer's sample, and the head's Ray ports."""
    samples = {}
    for nid in ok_nodes:
        n = nodes[nid]
        addr = ((n.get("links") or {}).get("hccl") or {}).get("address")
        value = (n.get("env") or {}).get("HCCL_HOST_SOCKET_PORT_RANGE")
        spans = cluster_ports.parse_port_list(value)[0] if value else None
        if addr and spans and not addr.startswith("127."):
            samples[nid] = {"address": addr, "ports": cluster_ports.sample_ports(spans, sample), "range": value}
    head = next((nid for nid in ok_nodes if nodes[nid]["head"]), None)
    jobs = {}
    for nid in ok_nodes:
        connect = [{"to": peer, "what": "hccl_host", "addr": s["address"], "port": p,
                    "token": f"{peer}|{s['address']}:{p}"}
                   for peer, s in samples.items() if peer != nid for p in s["ports"]]
        if head and nid != head:
            connect += [{"to": head, "what": what, "addr": nodes[head]["ip"], "port": p, "token": None}
                        for what, p in ray_ports.items() if p]
        mine = samples.get(nid)
        listen = [[mine["address"], p, len(ok_nodes) - 1] for p in mine["ports"]] if mine else []
        jobs[nid] = {"listen": listen, "connect": connect}
    return jobs, samples


def _clock_round(agents: Agents, node_ids: list[str], timeout: float, rounds: int = 3) -> dict:
    """Each node's clock minus the driver's, from the exchange with the shortest round trip
    (its half is the uncertainty)."""
    import ray

    best: dict = {}
    for _ in range(rounds):
        t0 = time.time()
        refs = {agents.handles[nid].clock.remote(): nid for nid in node_ids}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=min(timeout, 5.0))
            if not ready:
                break
            t1 = time.time()
            try:
                theirs = ray.get(ready[0])
            except Exception:  # an agent lost meanwhile: no clock from that node
                continue
            nid, half = refs[ready[0]], (t1 - t0) / 2
            if nid not in best or half < best[nid]["uncertainty_s"]:
                best[nid] = {"offset_s": round(theirs - (t0 + t1) / 2, 4), "uncertainty_s": round(half, 4)}
    return best


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
