"""Two fake hosts on one machine: network namespaces joined by a veth pair, a Ray head in one and
a Ray worker in the other (recipe: /work/shared/research/netns.md).

Rules the recipe learned the hard way, kept here:
- both veth ends are called `eth6` (like the seed's hosts) and carry a private test subnet that
  exists only inside these namespaces; no packet goes to or from the machine's own namespace,
  so every driver and probe runs inside namespace A;
- `lo` must be up in each namespace (Ray's agents and Gloo's store talk to themselves over it);
- every Ray process gets RAY_AUTH_MODE=disabled and a private HOME (a token in root's HOME would
  switch the head to token auth and the worker could not join), and its own --temp-dir;
- `ray stop` is machine-wide: teardown kills only the PIDs `ip netns pids` lists, TERM then KILL,
  then deletes the namespaces and /etc/netns/<ns>, also when a test failed.

Each `ip netns exec` runs in its own mount namespace, so a bind mount made by node B's
`ray start` wrapper is seen by node B's Ray processes only: that is how a test gives node B a
different launch directory, model file or site directory at the same path, as a second machine
would have.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUBNET = "10.231.77"  # used by no other test
IFACE = "eth6"
RAY_PORT = 6379


def netns_unavailable_reason() -> str | None:
    """Why two-namespace tests cannot run here, or None when they can."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN + CAP_SYS_ADMIN)"
    for tool in ("ip", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    probe = f"vdcprobe{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip() or made.returncode}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Node:
    name: str  # "a" or "b"
    ns: str
    ip: str
    hostname: str
    temp_dir: Path


@dataclass
class NetnsCluster:
    """Two namespaces (A = head, B = worker). Start/stop Ray per node; run commands inside."""

    base: Path
    tag: str
    python: str = str(Path(sys.executable))
    nodes: dict[str, Node] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.home = self.base / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        for i, name in enumerate("ab", 1):
            self.nodes[name] = Node(name, f"{self.tag}-{name}", f"{SUBNET}.{i}", f"host-{name}",
                                    self.base / f"ray-{name}")

    # -- network ---------------------------------------------------------------------------
    def create(self) -> None:
        a, b = self.nodes["a"], self.nodes["b"]
        va, vb = f"{self.tag}va", f"{self.tag}vb"  # temporary names in the machine's namespace
        _ip("netns", "add", a.ns)
        _ip("netns", "add", b.ns)
        _ip("link", "add", va, "type", "veth", "peer", "name", vb)
        _ip("link", "set", va, "netns", a.ns)
        _ip("link", "set", vb, "netns", b.ns)
        for node, tmp in ((a, va), (b, vb)):
            _ip("-n", node.ns, "link", "set", tmp, "name", IFACE)
            _ip("-n", node.ns, "addr", "add", f"{node.ip}/24", "dev", IFACE)
            _ip("-n", node.ns, "link", "set", "lo", "up")
            _ip("-n", node.ns, "link", "set", IFACE, "up")
            etc = Path("/etc/netns") / node.ns
            etc.mkdir(parents=True, exist_ok=True)
            hosts = ["127.0.0.1 localhost", "::1 localhost"]
            for n in (a, b):
                hosts += [f"{n.ip} {n.hostname}", f"::ffff:{n.ip} {n.hostname}"]
            (etc / "hosts").write_text("\n".join(hosts) + "\n")
            (etc / "resolv.conf").write_text("nameserver 127.0.0.1\n")  # DNS stays inside

    def add_interface(self, node: str, name: str, address: str) -> None:
        """A second interface on one node only: a veth pair with both ends inside that node."""
        ns = self.nodes[node].ns
        peer = f"{name}p"
        _ip("-n", ns, "link", "add", name, "type", "veth", "peer", "name", peer)
        _ip("-n", ns, "addr", "add", address, "dev", name)
        _ip("-n", ns, "link", "set", name, "up")
        _ip("-n", ns, "link", "set", peer, "up")

    # -- processes ---------------------------------------------------------------------------
    def ray_env(self) -> dict[str, str]:
        return {"HOME": str(self.home), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                "PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    def argv(self, node: str, argv: list[str], env: dict[str, str] | None = None,
             cwd: str | os.PathLike | None = None, binds: dict[str, str] | None = None,
             setup: list[str] = ()) -> list[str]:
        """`argv` as it runs on `node`: its namespace, hostname, bind mounts, cwd and env only;
        `setup`: shell steps before it (a `ulimit`, device nodes in the node's own mount namespace)."""
        n = self.nodes[node]
        full = {**self.ray_env(), **(env or {})}
        steps = [f"hostname {n.hostname}"]
        steps += [f"mount --bind {shlex.quote(src)} {shlex.quote(dst)}" for dst, src in (binds or {}).items()]
        steps += list(setup)
        if cwd:
            steps.append(f"cd {shlex.quote(str(cwd))}")
        assigns = " ".join(shlex.quote(f"{k}={v}") for k, v in full.items())
        steps.append(f"exec env -i {assigns} {shlex.join(argv)}")
        return ["ip", "netns", "exec", n.ns, "unshare", "--uts", "sh", "-ec", " && ".join(steps)]

    def run(self, node: str, argv: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(node, argv, **kw), capture_output=True, text=True, timeout=timeout)

    def start_ray(self, node: str, env: dict[str, str] | None = None, cwd=None,
                  binds: dict[str, str] | None = None, setup: list[str] = (), args: list[str] = ()) -> None:
        n = self.nodes[node]
        shutil.rmtree(n.temp_dir, ignore_errors=True)
        common = ["--node-ip-address", n.ip, "--num-cpus", "1", "--object-store-memory", str(80 * 2**20),
                  "--disable-usage-stats", f"--temp-dir={n.temp_dir}"]
        if node == "a":
            role = ["--head", f"--port={RAY_PORT}", "--include-dashboard=false"]
        else:
            role = [f"--address={self.nodes['a'].ip}:{RAY_PORT}"]
        ray = str(Path(self.python).with_name("ray"))
        # A killed node is noticed in about a second, not the default fifteen or so.
        health = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "2",
                  "RAY_health_check_timeout_ms": "500"}
        for attempt in (1, 2):  # Ray gives a node 30 s to register: a busy machine can miss that once
            r = self.run(node, [ray, "start", *role, *common, *args], env={**health, **(env or {})}, cwd=cwd,
                         binds=binds, setup=setup, timeout=120)
            if r.returncode == 0:
                return
            self.stop_node(node)
            shutil.rmtree(n.temp_dir, ignore_errors=True)
        raise RuntimeError(f"ray start on {node} failed ({r.returncode}): {r.stderr[-2000:]}")

    def stop_node(self, node: str, grace: float = 3.0) -> None:
        """End every process in the node's namespace (by PID), TERM then KILL."""
        ns = self.nodes[node].ns
        for sig, wait in (("TERM", grace), ("KILL", 5.0)):
            pids = self.pids(ns)
            if not pids:
                return
            subprocess.run(["kill", f"-{sig}", *pids], capture_output=True)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and self.pids(ns):
                time.sleep(0.1)

    @staticmethod
    def pids(ns: str) -> list[str]:
        r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
        return r.stdout.split() if r.returncode == 0 else []

    def wait_nodes(self, count: int, timeout: float = 60) -> None:
        """Until the head sees exactly `count` alive nodes (a restarted node replaces a dead one)."""
        code = ("import ray, sys, time\n"
                f"ray.init(address='{self.address}', logging_level='ERROR', log_to_driver=False)\n"
                f"deadline = time.time() + {timeout}\n"
                "while time.time() < deadline:\n"
                "    alive = [n for n in ray.nodes() if n['Alive']]\n"
                f"    if len(alive) == {count}: sys.exit(0)\n"
                "    time.sleep(0.2)\n"
                "sys.exit(1)\n")
        r = self.run("a", [self.python, "-c", code], timeout=timeout + 30)
        if r.returncode != 0:
            raise RuntimeError(f"cluster did not reach {count} alive nodes: {r.stderr[-1500:]}")

    @property
    def address(self) -> str:
        return f"{self.nodes['a'].ip}:{RAY_PORT}"

    def destroy(self) -> None:
        for name in ("b", "a"):
            self.stop_node(name)
        for n in self.nodes.values():
            subprocess.run(["ip", "netns", "del", n.ns], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / n.ns, ignore_errors=True)
            shutil.rmtree(n.temp_dir, ignore_errors=True)


@contextmanager
def running_cluster(base: Path, tag: str, env: dict[str, str] | None = None, prepare=None,
                    setup: list[str] = ()):
    """Namespaces up, `prepare(cluster)` (extra interfaces ...), Ray on A then B with `env` (and the
    shell steps `setup` before each `ray start`); everything torn down on the way out, also after a
    failure."""
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(f"two-host tests need network namespaces: {reason}")
    cluster = NetnsCluster(base, tag=tag)
    try:
        cluster.create()
        if prepare is not None:
            prepare(cluster)
        cluster.start_ray("a", env=env, setup=setup)
        cluster.start_ray("b", env=env, setup=setup)
        cluster.wait_nodes(2)
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture(scope="module")
def netns_cluster(tmp_path_factory):
    """Two namespaces with a Ray head (A) and worker (B), GLOO_SOCKET_IFNAME=eth6 on both,
    shared by a module's tests."""
    with running_cluster(Path(tmp_path_factory.mktemp("netns")), f"vdc{os.getpid() % 10000}",
                         env={"GLOO_SOCKET_IFNAME": IFACE}) as cluster:
        yield cluster
