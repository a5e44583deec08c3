"""Communication interfaces for a multi-node job, judged under each variable's own syntax.

NCCL_SOCKET_IFNAME and HCCL_SOCKET_IFNAME take a comma list of name prefixes; a leading `^`
excludes, a leading `=` means exact names (`^=` both). GLOO_SOCKET_IFNAME takes exact names only,
TP_SOCKET_IFNAME one exact name, HCCL_IF_IP one local address (it wins over HCCL_SOCKET_IFNAME).
With GLOO_SOCKET_IFNAME unset, Gloo binds to what the hostname resolves to; a hostname resolving
to loopback makes every rank advertise 127.x and the job fails in connectFullMesh, silently.
(HCCL, NCCL and Gloo documentation of each variable; Gloo resolves the hostname only when its
variable is unset)
"""
from __future__ import annotations

import ipaddress
import re

from checks.model import Finding
from checks.registry import check

PREFIX_SYNTAX = ("NCCL_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")
EXACT_SYNTAX = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
# Interfaces other nodes cannot reach, or only by accident.
BRIDGE = re.compile(r"^(docker\d*|br-|virbr|veth|cni|flannel|cali|tunl|kube-ipvs)")


def _finding(ctx, id, status, title, message="", fix="", evidence=None) -> Finding:
    return Finding(id, "network", status, title, message, fix, evidence or {}, ctx.node)


def _usable(ifaces: dict, name: str) -> bool:
    i = ifaces.get(name) or {}
    return bool(i.get("up") and i.get("ipv4"))


def _loopback(ifaces: dict, name: str) -> bool:
    return name == "lo" or any(a.startswith("127.") for a in (ifaces.get(name) or {}).get("ipv4", []))


def candidates(ifaces: dict) -> list[str]:
    """Interfaces another node could reach: up, with IPv4, neither loopback nor a bridge."""
    return sorted(n for n in ifaces if _usable(ifaces, n) and not _loopback(ifaces, n)
                  and not BRIDGE.match(n))


def select(value: str, names) -> tuple[list[str], dict]:
    """The interfaces a prefix-syntax variable (NCCL/HCCL) selects, and how it was read."""
    exclude = value.startswith("^")
    rest = value[1:] if exclude else value
    exact = rest.startswith("=")
    rest = rest[1:] if exact else rest
    tokens = [t.split(":")[0].strip() for t in rest.split(",") if t.strip()]

    def hit(n: str) -> bool:
        return any(n == t if exact else n.startswith(t) for t in tokens)

    chosen = sorted(n for n in names if hit(n) != exclude)
    return chosen, {"exclude": exclude, "exact": exact, "tokens": tokens}


def _suggest(ctx, ifaces: dict) -> str:
    route = ctx.get_facts().get("route_to_master") or {}
    if route.get("interface"):
        return route["interface"]
    cands = candidates(ifaces)
    return cands[0] if cands else "<iface>"


def _judge_selected(ctx, var, value, chosen, ifaces, how) -> Finding | None:
    usable = [n for n in chosen if _usable(ifaces, n)]
    good = [n for n in usable if not _loopback(ifaces, n) and not BRIDGE.match(n)]
    ev = {"variable": var, "value": value, "selects": chosen, "parsed": how,
          "interfaces": {n: ifaces[n] for n in chosen}}
    pick = _suggest(ctx, ifaces)
    if not chosen:
        return _finding(ctx, "network.ifname", "fail", f"{var}={value} matches no interface here",
                        f"interfaces on this node: {', '.join(sorted(ifaces))}",
                        f"export {var}={pick}", ev)
    if not usable:
        return _finding(ctx, "network.ifname", "fail", f"{var}={value} selects no interface that is up with IPv4",
                        "; ".join(f"{n}: {'up' if ifaces[n]['up'] else 'down'}, IPv4 "
                                  f"{', '.join(ifaces[n]['ipv4']) or 'none'}" for n in chosen),
                        f"export {var}={pick}  (or bring it up: ip link set {chosen[0]} up)", ev)
    if not good:
        kind = "loopback" if all(_loopback(ifaces, n) for n in usable) else "a container bridge"
        return _finding(ctx, "network.ifname", "warn", f"{var}={value} selects {kind} ({', '.join(usable)})",
                        "other nodes cannot reach this node through it",
                        f"export {var}={pick}", ev)
    return None


@check("network.interfaces", "network", "Communication interface variables name real interfaces",
       needs=("multi_node",), scope="node")
def interfaces(ctx):
    """What it checks: for a multi-node job, that each communication variable set here names an
    interface this node has, up and with IPv4, under that variable's own syntax: NCCL_SOCKET_IFNAME
    and HCCL_SOCKET_IFNAME take name prefixes with `^` (exclude) and `=` (exact)
    (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-socket-ifname,
    https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/83RC1/maintenref/envvar/envref_07_0075.html);
    GLOO_SOCKET_IFNAME takes exact names and TP_SOCKET_IFNAME exactly one
    (https://docs.pytorch.org/docs/stable/distributed.html#common-environment-variables); HCCL_IF_IP
    must be an address of this node, not loopback. Loopback or a container bridge is a warning.

    How the job fails without it: at the first collective, minutes after launch: Gloo raises
    `Unable to find address for: eth7` (or takes `^docker0` as a literal name), NCCL prints
    `Bootstrap : no socket interface found`, HCCL says `... by HCCL_SOCKET_IFNAME, but not found in
    the environment` and HcclCommInitRootInfo fails; a bridge or loopback address makes peers hang.

    Fix: `export VAR=<the interface that routes to the head>` (`ip route get <head ip>` names it) on
    every node before `ray start`; HCCL_IF_IP: this node's own cluster address, a different value per node.

    After the fact: gloo-socket-ifname-not-found, nccl-socket-ifname-not-found, nccl-no-socket-interface,
    hccl-socket-ifname-not-found, hccl-comm-init-failed"""
    facts = ctx.get_facts()
    ifaces, env = facts.get("interfaces") or {}, facts.get("comm_env") or {}
    out = []
    for var in PREFIX_SYNTAX:
        if env.get(var):
            chosen, how = select(env[var], ifaces)
            f = _judge_selected(ctx, var, env[var], chosen, ifaces, how)
            if f:
                out.append(f)
    for var in EXACT_SYNTAX:
        value = env.get(var)
        if not value:
            continue
        names = [t.strip() for t in value.split(",") if t.strip()]
        if var == "TP_SOCKET_IFNAME" and len(names) > 1:
            out.append(_finding(ctx, "network.ifname", "fail", f"{var}={value} names several interfaces",
                                "TensorPipe takes exactly one interface name",
                                f"export {var}={names[0]}", {"variable": var, "value": value}))
            continue
        missing = [n for n in names if n not in ifaces]
        if missing:
            like = sorted(i for i in ifaces if any(i.startswith(m.lstrip("^=")) for m in missing))
            hint = (f"; {var} takes exact names, not prefixes or ^/= (those are NCCL/HCCL syntax): "
                    f"did you mean {', '.join(like)}?" if like else "")
            out.append(_finding(ctx, "network.ifname", "fail", f"{var}={value}: no interface {', '.join(missing)}",
                                f"interfaces on this node: {', '.join(sorted(ifaces))}{hint}",
                                f"export {var}={like[0] if like else _suggest(ctx, ifaces)}",
                                {"variable": var, "value": value, "interfaces": sorted(ifaces)}))
            continue
        f = _judge_selected(ctx, var, value, names, ifaces, {"exact": True, "tokens": names})
        if f:
            out.append(f)
    if env.get("HCCL_IF_IP"):
        out += _if_ip(ctx, env["HCCL_IF_IP"], ifaces)
    return out


def _if_ip(ctx, value: str, ifaces: dict) -> list[Finding]:
    try:
        ip = ipaddress.ip_address(value.strip())
    except ValueError:
        return [_finding(ctx, "network.if_ip", "fail", f"HCCL_IF_IP={value} is not an IP address",
                         "HCCL_IF_IP takes one IPv4 or IPv6 address of this host",
                         "export HCCL_IF_IP=<this node's address on the cluster network>")]
    owner = [n for n, i in ifaces.items() if str(ip) in i.get("ipv4", []) + i.get("ipv6", [])]
    if not owner:
        return [_finding(ctx, "network.if_ip", "fail", f"HCCL_IF_IP={value} is not an address of this node",
                         "HCCL fails with 'ip ... is not found in the nic list'; HCCL_IF_IP wins over "
                         "HCCL_SOCKET_IFNAME, and each node needs its own value",
                         "export HCCL_IF_IP=$(hostname -I | awk '{print $1}')  (per node)",
                         {"addresses": {n: i.get("ipv4") for n, i in ifaces.items()}})]
    if ip.is_loopback:
        return [_finding(ctx, "network.if_ip", "fail", f"HCCL_IF_IP={value} is loopback",
                         "other nodes cannot reach it", "export HCCL_IF_IP=<this node's cluster address>")]
    return []


def _platform(ctx) -> str:
    probe = ctx.get_facts().get("probe") or {}
    pkgs = probe.get("packages") or {}
    if (pkgs.get("torch_npu") or {}).get("dists") or (ctx.get_facts().get("ascend") or {}).get("cann"):
        return "npu"
    if ((probe.get("torch_build") or {}).get("kind") == "cuda") or ctx.get_facts().get("devices", {}).get("nvidia"):
        return "gpu"
    return "any"


@check("network.unset", "network", "Interface variables are set where the choice is ambiguous",
       needs=("multi_node",), scope="node")
def unset(ctx):
    """What it checks: for a multi-node job on a node with two or more candidate interfaces (up, IPv4,
    neither loopback nor a container bridge), that GLOO_SOCKET_IFNAME is set, and HCCL_SOCKET_IFNAME
    on Ascend (unless HCCL_IF_IP is) or NCCL_SOCKET_IFNAME on NVIDIA.

    How the job fails without it: each library chooses on its own: Gloo by the hostname, HCCL the
    first NIC in name order (docker and lo last,
    https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/83RC1/maintenref/envvar/envref_07_0075.html),
    NCCL by its own order. When the chosen NIC does not route to the other nodes, the job hangs
    in its first collective until a timeout (HCCL EI0006 socket timeout, Gloo connectFullMesh, NCCL
    watchdog), with nothing naming the interface.

    Fix: `export GLOO_SOCKET_IFNAME=<iface>` and `export HCCL_SOCKET_IFNAME=<iface>` (NVIDIA:
    `NCCL_SOCKET_IFNAME`) on every node before `ray start`, as the seed article's section 3.3 does
    (eth6 there); the finding suggests the interface that routes to MASTER_ADDR.

    After the fact: gloo-connect-full-mesh-failed, hccl-socket-timeout, hccl-transport-init-error,
    nccl-watchdog-timeout"""
    facts = ctx.get_facts()
    ifaces, env = facts.get("interfaces") or {}, facts.get("comm_env") or {}
    cands = candidates(ifaces)
    if len(cands) < 2:
        return []
    wanted = ["GLOO_SOCKET_IFNAME"] + {"npu": ["HCCL_SOCKET_IFNAME"], "gpu": ["NCCL_SOCKET_IFNAME"]}.get(
        _platform(ctx), [])
    if "HCCL_SOCKET_IFNAME" in wanted and env.get("HCCL_IF_IP"):
        wanted.remove("HCCL_SOCKET_IFNAME")
    missing = [v for v in wanted if not env.get(v)]
    if not missing:
        return []
    pick = _suggest(ctx, ifaces)
    listed = ", ".join(f"{n} ({ifaces[n]['ipv4'][0]})" for n in cands)
    return [_finding(
        ctx, "network.unset", "warn", f"{', '.join(missing)} unset with {len(cands)} candidate interfaces",
        f"candidates: {listed}; each library picks "
        "on its own and may pick one that does not route to the other nodes.",
        "\n".join(f"export {v}={pick}" for v in missing), {"candidates": cands, "unset": missing})]


@check("network.hostname", "network", "The hostname resolves to a reachable address",
       needs=("multi_node",), scope="node")
def hostname(ctx):
    """What it checks: for a multi-node job with GLOO_SOCKET_IFNAME unset, that this node's hostname
    resolves, and to an address other than loopback. With GLOO_SOCKET_IFNAME set Gloo never resolves
    the hostname, and a single-node job does not care.

    How the job fails without it: Gloo binds to what the hostname resolves to; containers often map
    it to 127.0.0.1 or 127.0.1.1 in /etc/hosts, so every rank advertises loopback with no warning and
    the job fails in `connectFullMesh` (or Gloo falls back to loopback when the name does not resolve
    at all): https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/ProcessGroupGloo.cpp.

    Fix: `export GLOO_SOCKET_IFNAME=<cluster interface>` on every node before `ray start`, or map the
    hostname to the node's cluster address in /etc/hosts (`<ip> <hostname>`).

    After the fact: gloo-hostname-loopback, gloo-loopback-fallback, gloo-connect-full-mesh-failed"""
    facts = ctx.get_facts()
    host, env, ifaces = facts.get("hostname") or {}, facts.get("comm_env") or {}, facts.get("interfaces") or {}
    if env.get("GLOO_SOCKET_IFNAME"):
        return []  # Gloo binds to the named interface and never resolves the hostname
    addrs = host.get("addresses") or []
    pick = _suggest(ctx, ifaces)
    ev = {"hostname": host.get("name"), "resolves_to": addrs}
    if not addrs:
        return [_finding(ctx, "network.hostname", "fail", f"Hostname {host.get('name')} does not resolve",
                         f"GLOO_SOCKET_IFNAME is unset, so Gloo resolves the hostname: {host.get('error')}",
                         f"export GLOO_SOCKET_IFNAME={pick}", ev)]
    if all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs):
        ip = (ifaces.get(pick) or {}).get("ipv4", ["<address>"])[0]
        return [_finding(
            ctx, "network.hostname", "fail", f"Hostname {host.get('name')} resolves only to loopback",
            f"{host.get('name')} -> {', '.join(addrs)} and GLOO_SOCKET_IFNAME is unset: every rank "
            "advertises loopback and the multi-node job fails in connectFullMesh (no warning is printed).",
            f"export GLOO_SOCKET_IFNAME={pick}\n(or map the hostname to a real address in /etc/hosts: "
            f"{ip} {host.get('name')})", ev)]
    return []
