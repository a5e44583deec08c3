"""The full verl config of a launch, composed the way verl composes it.

Two sources, best first:
1. verl's own packaged config (`verl/trainer/config/ppo_trainer.yaml`) in the TARGET interpreter, by
   Hydra, in one subprocess (`probes/verl_config.py`, run with the launch's cwd and environment). verl
   itself is not imported for this (that takes ~20 s); with `--deep` the probe also runs verl's own
   `validate_config`.
2. A snapshot in `knowledge/verl/<version>/ppo_trainer.json` (verl's composed tree, generated from the
   installed verl by `knowledge/verl/build_snapshot.py`), in this process: used when the target
   interpreter has no verl (a laptop preparing a cluster job) or the probe fails.

Either way Hydra's own override applier applies the overrides, so `key=v` on a missing key, `+key=v` on an existing one and
bad values fail with Hydra's own words. Every rejected override is recorded and the rest composed.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from probes import verl_config as verl_probe
from launch.script import Launch

SNAPSHOTS = Path(__file__).resolve().parents[1] / "knowledge" / "verl"
PROBE_SOURCE = Path(verl_probe.__file__).read_text()
_SESSION_LOCK = threading.Lock()


def snapshot_versions() -> list[str]:
    from packaging.version import Version

    found = [p.parent.name for p in SNAPSHOTS.glob("*/ppo_trainer.json")]
    return sorted(found, key=Version)


def snapshot_for(version: str | None) -> str:
    """The snapshot to use for a verl version: the same release, else the newest not newer, else the newest."""
    from packaging.version import InvalidVersion, Version

    versions = snapshot_versions()
    if not versions:
        raise FileNotFoundError("no verl config snapshot in knowledge/verl/")
    if version:
        try:
            want = Version(version)
        except InvalidVersion:
            return versions[-1]
        older = [v for v in versions if Version(v) <= want]
        if older:
            return older[-1]
    return versions[-1]


@dataclass
class Composed:
    """A composed config: nested (resolved) and flat, the overrides Hydra rejected, and where from."""
    config: dict[str, Any] | None
    errors: list[dict] = field(default_factory=list)
    source: str = ""  # "verl 0.9.1 (/path/to/verl/trainer/config)" or "snapshot of verl 0.9.1"
    verl_version: str | None = None
    from_snapshot: bool = True

    @property
    def flat(self) -> dict[str, Any]:
        return flatten(self.config or {})

    def get(self, dotted: str, default: Any = None) -> Any:
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node


def flatten(nested: dict, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists and empty mappings are values."""
    out: dict[str, Any] = {}
    for k, v in nested.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def hydra_overrides(launch: Launch | None) -> list[str]:
    """The override strings Hydra would receive (hydra's own --options aside)."""
    if launch is None:
        return []
    return [t for t in launch.raw_overrides if not t.startswith("-")]


@lru_cache(maxsize=None)
def load_snapshot(version: str) -> dict:
    with open(SNAPSHOTS / version / "ppo_trainer.json") as fh:
        return json.load(fh)


def compose_snapshot(overrides: list[str], version: str | None = None) -> Composed:
    chosen = snapshot_for(version)
    snap = load_snapshot(chosen)
    groups = set(snap["config_groups"])
    plain, errors = [], []
    for text in overrides:
        key = text.lstrip("+~").split("=", 1)[0].split("@", 1)[0]
        if key in groups and "." not in key and not isinstance(snap["config"].get(key), dict):
            errors.append({"override": text, "type": "SnapshotLimit",
                           "message": f"config group override '{text}' needs verl's own config tree "
                                      f"(verl is not importable by the target interpreter)"})
        else:
            plain.append(text)
    resolved, more = verl_probe.compose_all(None, plain, base=snap["config"])
    return Composed(resolved, errors + more, f"snapshot of verl {chosen}", chosen, True)


def effective_config(launch: Launch | None, version: str | None = None) -> dict[str, Any]:
    """Flat dotted keys -> values: verl's defaults (snapshot) with the launch's overrides applied."""
    return compose_snapshot(hydra_overrides(launch), version).flat


def launch_config(launch: Launch) -> dict[str, Any]:
    """`effective_config`, or {} when it does not compose (an override Hydra rejects is config.*'s
    finding, no snapshot for this verl): the launch's own values still count."""
    try:
        return effective_config(launch)
    except Exception:
        return {}


# --- the probe subprocess ---------------------------------------------------------------------

class ConfigProbe:
    """`probes/verl_config.py` running in the target interpreter. It starts with the first line of
    its request and imports Hydra and composes verl's config while doctor composes its snapshot;
    `finish` sends the rest (what the probe needs only after composing) and reads the reply. Used
    as a context manager, it never outlives an error on doctor's side."""

    def __init__(self, python: str, request: dict, cwd: str | os.PathLike, env: dict[str, str]):
        self.started = time.monotonic()
        self.error: str | None = None
        try:
            self.proc = subprocess.Popen([python, "-c", PROBE_SOURCE], cwd=str(cwd), env=env, text=True,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         start_new_session=True)
        except OSError as exc:
            self.proc, self.error = None, f"cannot run {python}: {exc.strerror}"
            return
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:  # it died at once: finish says how
            pass

    def finish(self, rest: dict, timeout: float) -> tuple[dict | None, str | None]:
        """(the probe's JSON reply, None), or (None, why there is none). `timeout` counts from the start."""
        if self.proc is None:
            return None, self.error
        left = max(timeout - (time.monotonic() - self.started), 0.1)
        try:
            stdout, stderr = self.proc.communicate(json.dumps(rest), timeout=left)
        except subprocess.TimeoutExpired:
            self._end()
            return None, f"the config probe did not finish in {timeout:.0f} s"
        for line in reversed(stdout.splitlines()):
            if line.startswith("{"):
                try:
                    return json.loads(line), None
                except json.JSONDecodeError:
                    break
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"the config probe failed (exit {self.proc.returncode}): {tail}"

    def _end(self) -> None:
        """Kill the probe and all it started: a wrapper script's children would keep the pipes open."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> "ConfigProbe":
        return self

    def __exit__(self, *exc) -> None:
        self._end()


# --- one session per check context: compose once, probe once, shared by every check ----------

@dataclass
class ConfigSession:
    """What the config, data and memory checks share about one launch."""
    snapshot: Composed
    probe: dict | None = None  # the probe's reply (compose, data, reward, validate)
    probe_error: str | None = None

    @property
    def composed(self) -> Composed:
        """verl's own composition when the probe had verl, else the snapshot's."""
        reply = (self.probe or {}).get("compose") or {}
        if reply.get("available") and reply.get("config") is not None:
            version = (self.probe or {}).get("verl_version")
            return Composed(reply["config"], reply.get("errors") or [],
                            f"verl {version} ({reply.get('config_dir')})", version, False)
        if reply.get("available") and reply.get("errors"):
            version = (self.probe or {}).get("verl_version")
            return Composed(None, reply["errors"], f"verl {version}", version, False)
        return self.snapshot

    @property
    def verl_version(self) -> str | None:
        return (self.probe or {}).get("verl_version") or self._facts_version

    _facts_version: str | None = None


def _facts_verl_version(ctx) -> str | None:
    """verl's version as the node facts' interpreter probe found it installed."""
    try:
        from probes.facts import installed_dist, package, probe_of

        dist = installed_dist(package(probe_of(ctx), "verl"))
    except Exception:  # facts are a second opinion here, never a reason to fail
        return None
    return (dist or {}).get("version")


def session(ctx) -> ConfigSession | None:
    """The shared config session of a check context (None without a launch). Built once."""
    if ctx.launch is None:
        return None
    with _SESSION_LOCK:
        cached = ctx.__dict__.get("_config_session")
        if cached is not None:
            return cached
        overrides = hydra_overrides(ctx.launch)
        request = {
            "overrides": overrides,
            "validate": bool(ctx.deep),
            "data": True,
            "sample": int(ctx.options.get("sample") or 1000),
            "check_sources": bool(ctx.deep),
        }
        timeout = max(float(ctx.timeout), 120.0 if ctx.deep else 60.0)  # transformers (and verl) imports
        with ConfigProbe(ctx.python, request, ctx.cwd, ctx.env) as probe:
            sess = ConfigSession(compose_snapshot(overrides))
            sess.probe, sess.probe_error = probe.finish(_rest_of_request(sess.snapshot), timeout)
        sess._facts_version = None if sess.probe else _facts_verl_version(ctx)
        ctx.__dict__["_config_session"] = sess
        return sess


def _rest_of_request(snap: Composed) -> dict:
    """What the probe needs only after composing: doctor's snapshot composition (its fallback when
    verl's does not compose) and the custom reward function to load."""
    rest: dict = {"fallback_config": snap.config}
    path, name = reward_target(snap)
    if path:
        rest["reward"] = {"path": path, "name": name}
    return rest


def reward_target(composed: Composed) -> tuple[str | None, str | None]:
    """The custom reward file and function the user meant: verl 0.9's key, else the legacy one."""
    path = composed.get("reward.custom_reward_function.path")
    name = composed.get("reward.custom_reward_function.name")
    if not path:
        path = composed.get("custom_reward_function.path")
        name = composed.get("custom_reward_function.name") or name or "compute_score"
    return (str(path) if path else None), name
