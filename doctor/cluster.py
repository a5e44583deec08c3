"""`doctor check --cluster [ADDRESS]`: every node of a running Ray cluster, compared.

doctor's own process never imports Ray: the fan-out (`probes/cluster_driver.py`) runs in a
subprocess of the target interpreter with a deadline, gathers each node's facts there (through
doctor's idle agent on each node, `probes/cluster_agents.py`, kept for the next check unless
`keep_agents` is off), and writes one JSON report. Here the report becomes findings: the
cross-node comparison and link tests (`checks/cluster.py`, category `cluster`), and the ordinary
local checks run once per node on that node's facts. A finding every node shares is shown once;
one that differs names its node.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from checks.cluster import ClusterView
from checks.model import Finding
from checks.registry import CheckResult, all_checks, run_checks, run_each, select
from doctor.cli import DoctorError
from matching.redact import is_secret_name

ROOT = Path(__file__).resolve().parents[1]
CONNECT_S = 45.0  # ray.init against a live head takes ~1 s; an unreachable one is retried for a while
PROBE_ENTRY = "from probes.cluster_driver import main; main()"
PER_NODE = ("imports", "versions", "network", "workdir")  # categories whose verdict depends on the machine


def _launch_json(launch) -> dict | None:
    if launch is None:
        return None
    env = {k: v for k, v in launch.env.items() if not is_secret_name(k)}
    return {"argv": launch.argv, "env": env, "python": launch.python, "module": launch.module,
            "entry": launch.entry, "cwd": str(launch.cwd) if launch.cwd else None,
            "overrides": [{"key": o.key, "value": o.value, "op": o.op, "text": o.text} for o in launch.overrides]}


def launch_paths(ctx) -> dict[str, str]:
    """Model/data/reward paths the launch names (absolute, as every node sees them) -> their key."""
    from probes.facts import PATH_KEYS, _as_list

    out: dict[str, str] = {}
    if ctx.launch is None:
        return out
    for key, kind in PATH_KEYS.items():
        if kind == "checkpoint" or not ctx.launch.has(key):
            continue
        for raw in _as_list(ctx.launch.get(key)):
            value = raw[len("file://"):] if raw.startswith("file://") else raw
            if not value or value in ("None", "null") or "${" in value or "://" in value:
                continue
            p = Path(os.path.expanduser(value))
            out[str(p if p.is_absolute() else ctx.cwd / p)] = key
    return out


def expected_shape(ctx) -> tuple[int | None, int | None]:
    """(nnodes, n_gpus_per_node) the launch asks for; verl's defaults where it names verl."""
    nnodes = ctx.nodes
    gpus = None
    launch = ctx.launch
    if launch is not None and launch.is_verl:
        from checks.verl_config import launch_config

        cfg = launch_config(launch)
        nnodes = nnodes or cfg.get("trainer.nnodes")
        gpus = cfg.get("trainer.n_gpus_per_node")
    if launch is not None:
        if nnodes is None and launch.has("trainer.nnodes"):
            nnodes = launch.nnodes
        if gpus is None and launch.has("trainer.n_gpus_per_node"):
            gpus = launch.get("trainer.n_gpus_per_node")
    try:
        return (int(nnodes) if nnodes else None), (int(gpus) if gpus else None)
    except (TypeError, ValueError):
        return None, None


def _ports_settings() -> dict:
    from knowledge import load_toml

    t = load_toml("cluster_checklist.toml")["ports_test"]
    return {"ports_sample": t["sample"], "ports_window": t["window_s"]}


def job_facts(ctx) -> dict:
    """What the checklist's checks need from the launch: trainer.device, the rollout engine and the
    model's size in billions of parameters (from its config.json, found as memory.estimate finds it,
    else from its name, e.g. '32B')."""
    import re

    launch = ctx.launch
    if launch is None:
        return {}
    from checks.verl_config import launch_config

    cfg = launch_config(launch) if launch.is_verl else {}

    def value(key: str):
        return launch.get(key, cfg.get(key))

    job = {"device": value("trainer.device"), "rollout": value("actor_rollout_ref.rollout.name")}
    path = value("actor_rollout_ref.model.path")
    if path:
        from checks.model_source import find
        from checks.plan import model_shape

        found = find(str(path), ctx.cwd, ctx.env)  # the launch's HF_HOME / HF_HUB_CACHE count
        said = {"hf-cache": "its config.json in the Hugging Face cache", "table": "doctor's model table"}
        try:
            job.update(params_b=round(model_shape(found.config).params / 1e9, 2),
                       params_from=said.get(found.origin, "its config.json"))
        except Exception:  # no config here, or not a decoder config: the name may still say
            m = re.search(r"(?i)(?<![\d.])(\d+(?:\.\d+)?)b(?![a-z])", os.path.basename(str(path).rstrip("/")))
            if m:
                job.update(params_b=float(m.group(1)), params_from=f"the model name {os.path.basename(str(path))}")
    return job


def probe_cluster(ctx, address: str | None, paths: list[str], keep_agents: bool = True) -> dict:
    """Run the fan-out in the target interpreter; its report, or DoctorError in one line."""
    from probes.cluster_collective import collective_bound
    from probes.cluster_driver import WORKER_START_S

    # connect; facts, and again on a node whose agent is started anew; link; (deep) the collectives
    budget = (CONNECT_S + 3 * ctx.timeout + 2 * WORKER_START_S + 60
              + (2 * (collective_bound(ctx.timeout) + 15) if ctx.deep else 0))
    with tempfile.TemporaryDirectory(prefix="doctor-cluster-") as tmp:
        out = os.path.join(tmp, "report.json")
        req = {"address": address, "cwd": str(ctx.cwd), "python": ctx.python, "timeout": ctx.timeout,
               "deep": ctx.deep, "launch": _launch_json(ctx.launch), "paths": paths, "out": out,
               "keep_agents": keep_agents, **_ports_settings()}
        env = dict(ctx.env)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        try:
            proc = subprocess.run([ctx.python, "-c", PROBE_ENTRY], input=json.dumps(req), cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=budget)
        except FileNotFoundError:
            raise DoctorError(f"cannot run {ctx.python}: not found (give --python)") from None
        except subprocess.TimeoutExpired:
            raise DoctorError(f"the cluster probe did not finish within {budget:g} s "
                              f"(is the Ray cluster at {address or 'auto'} up?)") from None
        if not os.path.exists(out):
            tail = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()][-1:] or [f"exit {proc.returncode}"]
            if "No module named 'ray'" in proc.stderr:
                raise DoctorError(f"{ctx.python} has no ray: give --python an interpreter of the cluster's environment")
            raise DoctorError(f"the cluster probe failed: {tail[0][:300]}")
        with open(out) as fh:
            report = json.load(fh)
    if report.get("fatal"):
        raise DoctorError(f"cannot probe the Ray cluster at {address or 'auto'}: {report['fatal']}")
    return report


def _node_env(node: dict) -> dict[str, str]:
    return {k: v for k, v in (node.get("env") or {}).items() if not is_secret_name(k)}


def _merge_nodes(per_node: dict[str, list[CheckResult]], n_nodes: int) -> list[CheckResult]:
    """One result per check: a finding every node shares once (no node), the rest per node."""
    by_check: dict[str, list[CheckResult]] = defaultdict(list)
    for results in per_node.values():
        for r in results:
            by_check[r.check.id].append(r)
    merged = []
    for rs in by_check.values():
        groups: dict[tuple, list[Finding]] = defaultdict(list)
        for r in rs:
            for f in r.findings:
                groups[(f.id, f.status, f.title, f.message)].append(f)
        findings = []
        for fs in groups.values():
            if len(fs) == n_nodes and n_nodes > 1:
                findings.append(replace(fs[0], node=None))
            else:
                findings.extend(fs)
        merged.append(CheckResult(rs[0].check, findings, max(r.seconds for r in rs)))
    return merged


def run_cluster_checks(ctx, address: str | None, only: set[str] | None, skip: set[str] | None,
                       keep_agents: bool = True) -> list[CheckResult]:
    paths = launch_paths(ctx)
    t0 = time.perf_counter()
    report = probe_cluster(ctx, address, list(paths), keep_agents)
    probe_s = time.perf_counter() - t0
    nnodes, gpus = expected_shape(ctx)
    view = ClusterView(report, nnodes=nnodes, gpus_per_node=gpus, path_keys=paths, job=job_facts(ctx))
    ctx.options["cluster_nodes"] = {n["label"]: n["facts"] for n in view.answered}  # for doctor report
    # The comparisons run one after another, in registration (report) order.
    results = run_each(select(all_checks("cluster"), only, skip), view, workers=1)
    for r in results:
        for f in r.findings:
            if f.status == "pass" and not f.message:
                f.message = f"{len(view.answered)} nodes compared"
        if r.check.id == "cluster.nodes":
            r.seconds += probe_s

    local = [c for c in select(all_checks(), only, skip) if c.category != "cluster"]
    if local and view.answered:
        # What differs by machine runs on every node's facts; what only reads the launch (config,
        # memory, data) runs once, on the reference node's facts.
        per_node = {}
        for node in view.answered:
            node_ctx = _node_context(ctx, node)
            per_node[node["label"]] = run_checks([c for c in local if c.category in PER_NODE], node_ctx)
        results += _merge_nodes(per_node, len(view.answered))
        once = [c for c in local if c.category not in PER_NODE]
        if once:
            results += run_checks(once, _node_context(ctx, view.reference, label=None))
    return results


def _node_context(ctx, node: dict, label: str | None = "node"):
    return replace(ctx, env=_node_env(node), facts=node["facts"], deep=False, _lock=threading.Lock(),
                   node=node["label"] if label else None)
