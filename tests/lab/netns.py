"""Run a command in a private network + UTS + mount namespace with the interfaces, hostname and
/etc/hosts a test asks for: a real machine layout that never touches the host's own network.

Interfaces are veth pairs (the dummy driver is not available everywhere); each end gets the
addresses and the up/down state asked for.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Iface:
    name: str
    ipv4: str | None = None  # "10.7.0.1/24"
    up: bool = True


@dataclass
class Layout:
    pairs: list[tuple[Iface, Iface]] = field(default_factory=list)
    hostname: str = "node7"
    hosts: str = "127.0.0.1 localhost\n"  # the /etc/hosts the namespace sees


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    if not (shutil.which("unshare") and shutil.which("ip")):
        return "needs unshare and ip"
    r = subprocess.run(["unshare", "-n", "-u", "-m", "true"], capture_output=True)
    return None if r.returncode == 0 else "cannot create namespaces here"


def _setup(layout: Layout, hosts_file: Path) -> str:
    lines = ["set -e", "ip link set lo up"]
    for a, b in layout.pairs:
        lines.append(f"ip link add {a.name} type veth peer name {b.name}")
        for i in (a, b):
            if i.ipv4:
                lines.append(f"ip addr add {i.ipv4} dev {i.name}")
            if i.up:
                lines.append(f"ip link set {i.name} up")
    lines += [f"hostname {shlex.quote(layout.hostname)}", f"mount --bind {hosts_file} /etc/hosts"]
    return "\n".join(lines)


def run_in(layout: Layout, argv: list[str], tmp: Path, env: dict | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess:
    hosts = tmp / "hosts"
    hosts.write_text(layout.hosts)
    script = _setup(layout, hosts) + "\nexec " + " ".join(shlex.quote(a) for a in argv)
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(["unshare", "-n", "-u", "-m", "sh", "-c", script], env=full_env,
                          capture_output=True, text=True, timeout=timeout)


# Runs inside the namespace: the real checks, once per scenario (an environment and a node count),
# in one process so that a layout costs one interpreter start.
_DRIVER = r"""
import json, sys
from checks.context import CheckContext
from checks.registry import all_checks, flatten, run_checks, select
from launch.script import parse_launch
out = []
for sc in json.loads(sys.argv[1]):
    launch = parse_launch(sc["launch"], cwd=sc["cwd"]) if sc.get("launch") else None
    ctx = CheckContext.local(cwd=sc["cwd"], python=sys.executable, launch=launch, nodes=sc.get("nodes"))
    ctx.env.update(sc.get("env", {}))
    results = run_checks(select(all_checks(), {"network"}, None), ctx)
    out.append([f.to_dict() for f in flatten(results)])
print(json.dumps(out))
"""


def network_findings(layout: Layout, scenarios: list[dict], tmp: Path, env: dict | None = None) -> list[dict]:
    """For each scenario ({"env": {...}, "nodes": N, "launch": argv, "cwd": dir}), the network
    findings by id, as the checks see this layout."""
    import json
    import sys

    for sc in scenarios:
        sc.setdefault("cwd", str(tmp))
    r = run_in(layout, [sys.executable, "-c", _DRIVER, json.dumps(scenarios)], tmp, env=env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    result = []
    for findings in json.loads(r.stdout):
        by: dict[str, list[dict]] = {}
        for f in findings:
            by.setdefault(f["id"], []).append(f)
        result.append(by)
    return result
