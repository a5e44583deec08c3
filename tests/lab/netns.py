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
