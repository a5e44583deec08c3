"""Everything checks need to know about ONE node, as a JSON-serialisable dict.

The target interpreter is probed once (one subprocess running `probes/target.py`, with a timeout);
the rest is read here from small files, psutil and the resolver. `doctor check --cluster` runs
`gather_facts` on every node and the same checks on each node's facts, so checks read these facts
instead of doing their own I/O.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probes import ascend

PROBE_SOURCE = Path(__file__).with_name("target.py")

# Variables that decide how collectives find each other across nodes.
COMM_VARS = ("HCCL_SOCKET_IFNAME", "HCCL_IF_IP", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
             "TP_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT", "HCCL_IF_BASE_PORT",
             "NCCL_IB_DISABLE", "NCCL_IB_HCA")

# Launch keys that name files or directories (verl 0.9.1 config schema).
PATH_KEYS = {
    "data.train_files": "data",
    "data.val_files": "data",
    "actor_rollout_ref.model.path": "model",
    "critic.model.path": "model",
    "reward.custom_reward_function.path": "reward",
    "custom_reward_function.path": "reward",
    "trainer.default_local_dir": "checkpoint",
}


def stack_packages() -> dict[str, list[str]]:
    from knowledge import load_toml

    return dict(load_toml("stack.toml")["packages"])


def probe_request(ctx) -> dict:
    req: dict = {"packages": stack_packages()}
    launch = ctx.launch
    if launch is not None and launch.module:
        req["module"] = launch.module
    elif launch is not None and launch.entry:
        entry = Path(os.path.expanduser(launch.entry))
        entry = entry if entry.is_absolute() else ctx.cwd / entry
        req["path0"] = str(entry.resolve().parent)
        req["path0_reason"] = f"directory of the script {launch.entry} (python puts it first)"
    return req


def start_probe(ctx) -> subprocess.Popen | dict:
    """Start the target interpreter; a missing interpreter is a fact, not a crash."""
    if not ctx.cwd.is_dir():
        return {"ok": False, "error": f"the launch directory {ctx.cwd} does not exist"}
    try:
        proc = subprocess.Popen(
            [ctx.python, "-c", PROBE_SOURCE.read_text(), json.dumps(probe_request(ctx))],
            cwd=str(ctx.cwd), env=ctx.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    except OSError as exc:
        return {"ok": False, "error": f"cannot run {ctx.python}: {exc.strerror or exc}"}
    proc.started = time.perf_counter()
    return proc


def finish_probe(proc, timeout: float) -> dict:
    if isinstance(proc, dict):
        return proc
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # Kill the whole group: a wrapper script's children would keep the pipes open.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        proc.communicate()
        return {"ok": False, "error": f"the interpreter did not answer within {timeout:g} s "
                                      "(a hanging sitecustomize, .pth import or filesystem)"}
    if proc.returncode != 0:
        tail = (err or "").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        return {"ok": False, "error": f"the interpreter failed: {tail[0][:300]}",
                "returncode": proc.returncode}
    try:
        data = json.loads(out)
    except ValueError:
        return {"ok": False, "error": "the interpreter printed no probe result"}
    data["ok"] = True
    data["seconds"] = round(time.perf_counter() - proc.started, 3)
    return data


def network_facts() -> dict:
    import psutil

    stats = psutil.net_if_stats()
    ifaces = {}
    for name, addrs in psutil.net_if_addrs().items():
        st = stats.get(name)
        ifaces[name] = {
            "up": bool(st and st.isup),
            "ipv4": [a.address for a in addrs if a.family == socket.AF_INET],
            "ipv6": [a.address.split("%")[0] for a in addrs if a.family == socket.AF_INET6],
        }
    return ifaces


def hostname_facts() -> dict:
    name = socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
        addrs = list(dict.fromkeys(i[4][0] for i in infos))
        error = None
    except OSError as exc:
        addrs, error = [], str(exc)
    return {"name": name, "addresses": addrs, "error": error}


def route_facts(env: dict, ifaces: dict) -> dict | None:
    """Which local interface routes to MASTER_ADDR (a UDP connect sends nothing)."""
    master = env.get("MASTER_ADDR")
    if not master:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master, 9))
            local = s.getsockname()[0]
    except OSError as exc:
        return {"master": master, "error": str(exc)}
    iface = next((n for n, i in ifaces.items() if local in i["ipv4"]), None)
    return {"master": master, "local_address": local, "interface": iface}


def device_facts() -> dict:
    return {
        "davinci": len(glob.glob("/dev/davinci[0-9]*")),
        "nvidia": len(glob.glob("/dev/nvidia[0-9]*")),
        "npu_smi": shutil.which("npu-smi"),
        "nvidia_smi": shutil.which("nvidia-smi"),
    }


def _fingerprint(p: Path) -> str:
    """Cheap identity of a file or directory, to compare the same path across nodes."""
    h = hashlib.sha1()
    if p.is_file():
        st = p.stat()
        h.update(str(st.st_size).encode())
        with open(p, "rb") as fh:
            h.update(fh.read(1 << 16))
            if st.st_size > 1 << 17:
                fh.seek(-(1 << 16), os.SEEK_END)
                h.update(fh.read())
    else:
        for child in sorted(p.iterdir())[:200]:
            h.update(child.name.encode())
            if child.is_file():
                h.update(str(child.stat().st_size).encode())
    return h.hexdigest()[:16]


def _as_list(value) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    text = str(value).strip()
    if text.startswith("[") and text.endswith("]"):  # a quoted list: data.train_files="[a,b]"
        return [v.strip().strip("'\"") for v in text[1:-1].split(",") if v.strip()]
    return [text]


def _other_bases(ctx) -> list[Path]:
    """Directories a relative path may have been meant from: the script's, its parents, and
    the launch directory's parents."""
    bases: list[Path] = []
    if ctx.launch is not None and ctx.launch.script is not None:
        bases += [ctx.launch.script.parent, *list(ctx.launch.script.parent.parents)[:3]]
    bases += list(ctx.cwd.parents)[:3]
    return [b for b in dict.fromkeys(bases) if b != ctx.cwd]


def path_facts(ctx) -> list[dict]:
    if ctx.launch is None:
        return []
    out = []
    for key, kind in PATH_KEYS.items():
        if not ctx.launch.has(key):
            continue
        for raw in _as_list(ctx.launch.get(key)):
            if raw in ("", "None", "null") or "${" in raw:
                continue
            value = raw[len("file://"):] if raw.startswith("file://") else raw
            if value.startswith(("pkg://", "hdfs://", "s3://", "gs://")):
                continue
            p = Path(os.path.expanduser(value))
            resolved = p if p.is_absolute() else ctx.cwd / p
            item = {"option": key, "kind": kind, "value": raw, "relative": not p.is_absolute(),
                    "resolved": str(resolved), "exists": resolved.exists()}
            if kind == "checkpoint":
                base = _nearest_existing(resolved)
                item["writable_base"] = str(base)
                item["writable"] = os.access(base, os.W_OK)
            if not item["exists"] and item["relative"]:
                item["found_from"] = [str(b) for b in _other_bases(ctx) if (b / p).exists()]
            if item["exists"]:
                item["is_dir"] = resolved.is_dir()
                try:
                    item["fingerprint"] = _fingerprint(resolved)
                except OSError:
                    item["fingerprint"] = None
            out.append(item)
    return out


def _nearest_existing(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def entry_homes(ctx) -> list[str]:
    """Directories from which the launch's `python -m top.x` would import `top` (a checkout such
    as /verl): the script's directory and its parents, the launch directory's parents, and the
    usual checkout places."""
    launch = ctx.launch
    if launch is None or not launch.module:
        return []
    top = launch.module.split(".")[0]
    places: list[Path] = []
    if launch.script is not None:
        places += [launch.script.parent, *list(launch.script.parent.parents)[:4]]
    places += [ctx.cwd, *list(ctx.cwd.parents)[:3]]
    places += [Path(p).expanduser() for p in ("/verl", "~/verl", "/workspace/verl", "/opt/verl")]
    found = []
    for d in dict.fromkeys(places):
        if (d / top).is_dir() and str(d) not in found:
            found.append(str(d))
    return found


def cwd_facts(ctx) -> dict:
    """What sits in the launch directory that could matter: source trees named like packages."""
    names = {}
    for name in stack_packages():
        d = ctx.cwd / name
        if d.is_dir():
            names[name] = {"path": str(d), "has_init": (d / "__init__.py").exists()}
    return {"path": str(ctx.cwd), "exists": ctx.cwd.is_dir(), "package_dirs": names}


@dataclass
class Target:
    """What gathering a node's facts reads: where training starts, with which interpreter and
    environment, for which launch. `checks.context.CheckContext` carries the same fields; a cluster
    node builds this one, so the probes need nothing from `checks`."""

    cwd: Path
    python: str
    env: dict[str, str] = field(default_factory=dict)
    launch: Any = None  # a launch.script.Launch, or None
    timeout: float = 20.0


def gather_facts(ctx: Target) -> dict:
    proc = start_probe(ctx)  # runs while the local facts are read
    facts = {
        "hostname": hostname_facts(),
        "interfaces": (ifaces := network_facts()),
        "route_to_master": route_facts(ctx.env, ifaces),
        "comm_env": {k: ctx.env[k] for k in COMM_VARS if k in ctx.env},
        "ascend": ascend.gather(ctx.env),
        "devices": device_facts(),
        "cwd": cwd_facts(ctx),
        "paths": path_facts(ctx),
        "entry_homes": entry_homes(ctx),
        "python_requested": ctx.python,
        "doctor_python": sys.executable,
    }
    from knowledge import load_toml

    load_toml("versions.toml")  # parse the matrix the checks need while the probe still runs
    facts["probe"] = finish_probe(proc, ctx.timeout)
    return facts


# --- reading the facts (shared by the checks) -------------------------------------------------

VISIBLE_VARS = {"davinci": "ASCEND_RT_VISIBLE_DEVICES", "nvidia": "CUDA_VISIBLE_DEVICES"}


def visible_devices(devices: dict, env: dict[str, str]) -> tuple[int | None, tuple[str, str] | None]:
    """The accelerators Ray will count on this node, and the (variable, value) that narrows them, if one does.

    Ray counts the devices, then keeps at most as many as the visible-devices variable lists ("" or
    NoDevFiles: none) -- ray/_private/resource_and_label_spec.py, accelerators/npu.py (Ray 2.60)."""
    for kind, var in VISIBLE_VARS.items():
        count = devices.get(kind)
        if not count:
            continue
        value = env.get(var)
        listed = None if value is None else [] if value in ("", "NoDevFiles") else value.split(",")
        if listed is None or len(listed) >= count:
            return count, None
        return len(listed), (var, value)
    return None, None


def probe_of(ctx) -> dict:
    return ctx.get_facts().get("probe") or {"ok": False, "error": "no probe result"}


def package(probe: dict, name: str) -> dict:
    return (probe.get("packages") or {}).get(name) or {"spec": None, "copies": [], "dists": []}


def winner_path(spec: dict | None) -> str | None:
    """The directory (package) or file (module) that `import name` would load."""
    if not spec or spec.get("error") or spec.get("namespace"):
        return None
    if spec.get("origin") and os.path.basename(spec["origin"]).startswith("__init__."):
        return os.path.dirname(spec["origin"])
    return spec.get("origin") or (spec.get("locations") or [None])[0]


def installed_dist(pkg: dict) -> dict | None:
    """The installed distribution whose files `import` loads, else the first one found."""
    dists = pkg.get("dists") or []
    win = winner_path(pkg.get("spec"))
    for d in dists:
        if win and d.get("files_at") == win:
            return d
    return dists[0] if dists else None
