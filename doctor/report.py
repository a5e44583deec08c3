"""`doctor report`: one shareable, redacted diagnosis for an issue tracker.

The report is built as one JSON-able document (`doctor.report/v1`), redacted (and anonymized on
request) as a whole, and only then rendered: Markdown for GitHub, the document itself for --json,
both plus the (cut, redacted) logs for --bundle. Every section is gathered on its own: one that
cannot be gathered becomes a note, never a crash.
"""
from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from doctor import __version__
from doctor.report_logs import LogCut, cut_log

SCHEMA = "doctor.report/v1"
MAX_MARKDOWN_BYTES = 256 * 1024   # the stated bound, whatever the size of the logs
EVIDENCE_CONTEXT = 3              # lines shown either side of an evidence line
TAIL_LINES = 40                   # last lines of each log
SHOWN_CAUSES = 3                  # findings per log whose evidence is shown
MAX_PROBLEMS = 60                 # check problems listed (the rest are counted)
MAX_CELL = 300                    # characters of a table cell
MAX_LINE_CHARS = 400              # characters of a log line shown in the report

BUNDLE_FULL_LOG_BYTES = 4 << 20   # a log up to this size travels whole in the bundle
BUNDLE_CONTEXT = 50               # a larger one: the evidence with this many lines either side
BUNDLE_TAIL = 2000                # ... and its last lines
BUNDLE_MAX_CHARS = 4000           # characters kept of one line

STACK = ("python", "torch", "torch build", "torch_npu", "vllm", "vllm_ascend", "verl", "transformers",
         "ray", "flash_attn", "CANN", "driver", "firmware", "devices")


@dataclass
class ReportRequest:
    """What the user asked for (the command line, parsed)."""
    argv: list[str]                       # the doctor command line, for provenance
    launch: Any = None                    # launch.script.Launch or None
    logs: list[str] = field(default_factory=list)
    cluster: str | None = None            # "auto" or an address
    cwd: Path = field(default_factory=Path.cwd)
    python: str | None = None
    device_memory: str | None = None
    timeout: float = 20.0
    anonymize: bool = False
    bundle: bool = False                  # cut logs wide enough for the bundle (one pass serves both)


# ---------------------------------------------------------------------------------------------
# Gathering


def build_document(req: ReportRequest) -> tuple[dict, dict]:
    """The redacted (and anonymized) report document, and the log cuts the bundle needs."""
    from checks.context import CheckContext

    ctx = CheckContext.local(cwd=req.cwd, python=req.python, launch=req.launch, timeout=req.timeout,
                             options={"device_memory": req.device_memory})
    doc: dict[str, Any] = {"schema": SCHEMA, "notes": []}
    started = time.perf_counter()

    def section(name: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:  # a section that cannot be gathered is a note, not a crash
            doc["notes"].append(f"{name}: not available ({type(exc).__name__}: {str(exc)[:200]})")
            return None

    # The checks mostly wait on their probe subprocesses: read the logs and compose verl's
    # defaults meanwhile (Hydra is locked inside verl_config).
    from concurrent.futures import ThreadPoolExecutor

    from checks import verl_config

    cuts: dict[str, LogCut] = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        defaults = pool.submit(verl_config.compose_snapshot, []) if req.launch else None
        logs = pool.submit(lambda: [section(f"log {p}", lambda p=p: _log_section(p, cuts, req.bundle))
                                    or {"name": p, "error": "unreadable"} for p in req.logs])
        results = section("checks", lambda: _run_checks(ctx, req.cluster)) or []
        doc["checks"] = _checks_section(results)
        doc["logs"] = logs.result()
        doc["config"] = section("config", lambda: _config_section(ctx, defaults)) if req.launch else None
    doc["nodes"] = section("versions", lambda: _nodes_section(ctx)) or {}
    if req.cluster and not ctx.options.get("cluster_nodes"):
        doc["notes"].append("versions: this machine's only; the cluster probe did not hand over its nodes' facts")
    doc["version_differences"] = _differences(doc["nodes"])
    doc["launch"] = section("launch", lambda: _launch_section(req.launch))
    doc["plan"], doc["memory"] = (section("plan", lambda: _plan_section(ctx, doc["config"], req.device_memory))
                                  or (None, None)) if req.launch else (None, None)
    doc["verdict"] = _verdict(doc)
    doc["doctor"] = {"version": __version__, "command": _command_line(req.argv),
                     "python": platform.python_version(), "platform": platform.platform(terse=True),
                     "generated_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "seconds": round(time.perf_counter() - started, 2), "anonymized": req.anonymize}
    return protect(doc, ctx, req.anonymize), cuts


def _run_checks(ctx, cluster: str | None):
    if cluster:
        from doctor.cluster import run_cluster_checks

        return run_cluster_checks(ctx, None if cluster == "auto" else cluster, None, None)
    from checks.registry import all_checks, run_checks

    return run_checks(all_checks(), ctx)


def _checks_section(results) -> dict:
    from checks.model import overall_status
    from checks.registry import flatten

    findings = flatten(results)
    counts = {s: sum(f.status == s for f in findings) for s in ("fail", "warn", "pass", "skip")}
    problems = sorted((f for f in findings if f.status in ("fail", "warn")), key=lambda f: -f.severity)
    return {"status": overall_status(findings), "counts": counts,
            "problems": [_finding(f) for f in problems[:MAX_PROBLEMS]],
            "problems_not_listed": max(0, len(problems) - MAX_PROBLEMS)}


def _finding(f) -> dict:
    return {"id": f.id, "category": f.category, "status": f.status, "title": f.title,
            "message": f.message, "fix": f.fix, "node": f.node}


def _log_section(path: str, cuts: dict[str, LogCut], wide: bool) -> dict:
    from matching.explain import explain_report, open_log

    if path == "-":
        raise ValueError("a report reads log files, not stdin")
    report = explain_report([path])
    shown = report.findings[:SHOWN_CAUSES]
    evidence = {ln.n for f in shown for ln in f.lines} or {ln.n for ln in report.fallback}
    stream, name = open_log(path)
    with stream:
        if wide:
            cut = cut_log(stream, name, evidence, BUNDLE_CONTEXT, BUNDLE_TAIL, BUNDLE_MAX_CHARS,
                          total_lines=report.lines_read)
        else:
            cut = cut_log(stream, name, evidence, EVIDENCE_CONTEXT, TAIL_LINES, MAX_LINE_CHARS,
                          total_lines=report.lines_read)
    cuts[path] = cut
    out = {"name": name, "bytes": cut.bytes, "lines": cut.lines,
           "root_cause": report.findings[0].to_dict() if report.findings else None,
           "other_causes": [{"rule": f.rule, "category": f.category, "title": f.title,
                             "consequence": f.consequence} for f in report.findings[1:8]],
           "look_at": [ln.to_dict() for ln in report.fallback] if not report.findings else [],
           "excerpt": _narrow(cut)}
    out["excerpt_complete"] = len(out["excerpt"]) == cut.lines
    if report.truncated:
        out["note"] = "the compressed log ended early; what was there is explained"
    return out


def _narrow(cut: LogCut) -> list[dict]:
    """The report's excerpt: the evidence with a few lines of context, and the last lines."""
    def shown(n: int) -> bool:
        return n > cut.lines - TAIL_LINES or any(abs(n - e) <= EVIDENCE_CONTEXT for e in cut.evidence)

    def capped(text: str) -> str:
        return text if len(text) <= MAX_LINE_CHARS else text[:MAX_LINE_CHARS] + " ... [line cut]"

    return [{"n": n, "text": capped(t), "evidence": n in cut.evidence} for n, t in cut.excerpt if shown(n)]


def _nodes_section(ctx) -> dict[str, dict[str, str]]:
    """Versions of the stack per node: every node of a cluster when its facts are known."""
    nodes = ctx.options.get("cluster_nodes")  # {label: facts}, set by the cluster fan-out
    if not nodes:
        facts = ctx.get_facts()
        nodes = {(facts.get("hostname") or {}).get("name") or "this node": facts}
    return {label: stack_versions(facts) for label, facts in nodes.items()}


def stack_versions(facts: dict) -> dict[str, str]:
    """One node's stack as display strings (what `import` would load, and from where if odd)."""
    from probes.facts import installed_dist, package, stack_packages, winner_path

    probe = facts.get("probe") or {}
    out: dict[str, str] = {}
    if not probe.get("ok", True) and probe.get("error"):
        out["python"] = f"probe failed: {probe['error']}"
    else:
        out["python"] = (probe.get("python") or {}).get("version") or "?"
    for name in stack_packages():
        pkg = package(probe, name)
        dist = installed_dist(pkg)
        where = winner_path(pkg.get("spec"))
        if dist:
            text = str(dist.get("version"))
            if where and dist.get("files_at") and where != dist.get("files_at"):
                text += f" (imported from {where})"
        else:
            text = f"no metadata (imported from {where})" if where else "not installed"
        out[name] = text
        if name == "torch":
            build = probe.get("torch_build") or {}
            out["torch build"] = build.get("kind") or "-"
    ascend = facts.get("ascend") or {}
    out["CANN"] = ((ascend.get("cann") or {}).get("version")) or "not found"
    driver = ascend.get("driver") or {}
    out["driver"] = driver.get("version") or "not found"
    out["firmware"] = ((driver.get("firmware") or {}).get("version")) or "not found"
    dev = facts.get("devices") or {}
    out["devices"] = f"npu {dev.get('davinci', 0)}, gpu {dev.get('nvidia', 0)}"
    return {k: out[k] for k in STACK if k in out}


def _differences(nodes: dict[str, dict[str, str]]) -> list[str]:
    if len(nodes) < 2:
        return []
    names = [k for k in STACK if any(k in v for v in nodes.values())]
    return [k for k in names if len({v.get(k) for v in nodes.values()}) > 1]


def _launch_section(launch) -> dict | None:
    if launch is None:
        return None
    return {"argv": list(launch.argv), "script": str(launch.script) if launch.script else None,
            "cwd": str(launch.cwd) if launch.cwd else None, "python": launch.python,
            "runs": f"{launch.python} -m {launch.module}" if launch.module else f"{launch.python} {launch.entry or ''}".strip(),
            "exports": dict(launch.env),
            "overrides": list(launch.raw_overrides)}


def _config_section(ctx, defaults_future) -> dict:
    """Only the keys whose value differs from verl's defaults."""
    from checks import verl_config

    composed = verl_config.session(ctx).composed
    defaults = defaults_future.result()
    if defaults.verl_version != verl_config.snapshot_for(composed.verl_version):
        defaults = verl_config.compose_snapshot([], composed.verl_version)
    base, effective = defaults.flat, composed.flat
    changed = {k: {"value": v, "default": base.get(k)} for k, v in sorted(effective.items())
               if k not in base or base[k] != v}
    return {"source": composed.source, "defaults": defaults.source, "changed": changed,
            "rejected": [{"override": e.get("override"), "error": e.get("message") or e.get("type")}
                         for e in composed.errors],
            "effective": effective}


def _plan_section(ctx, config: dict | None, device_memory: str | None):
    from checks.plan import batch_plan, memory_estimate

    if not config:
        return None, None
    cfg = config["effective"]
    plan = batch_plan(cfg)
    from checks.memory import model_config  # what doctor check and doctor plan use: path, HF cache, table

    model_cfg, _where = model_config(cfg.get("actor_rollout_ref.model.path"), ctx.cwd, ctx.env)
    memory = None
    if model_cfg is not None:
        memory = memory_estimate(cfg, model_cfg, _bytes(device_memory)).to_dict()
    return plan, memory


def _bytes(text: str | None) -> int | None:
    import re

    if not text:
        return None
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?)(i?B)?\s*", text, re.I)
    if not m:
        raise ValueError(f"--device-memory {text!r} is not a size like 64GiB")
    return int(float(m.group(1)) * 1024 ** " KMGT".index((m.group(2) or " ").upper()))


def _verdict(doc: dict) -> dict:
    lines: list[str] = []
    status = doc["checks"]["status"]
    for log in doc["logs"]:
        cause = log.get("root_cause")
        if cause:
            first = cause["lines"][0]["n"] if cause.get("lines") else None
            phase = f", phase {cause['phase']}" if cause.get("phase") else ""
            where = f", line {first}" if first else ""
            lines.append(f"{log['name']}: {cause['title']} ({cause['category']}{phase}; rule "
                         f"{cause['rule']}{where})")
            status = "fail"
        elif log.get("error"):
            lines.append(f"{log['name']}: could not be read")
        elif log.get("look_at"):  # it failed, in a way no rule knows
            lines.append(f"{log['name']}: no known failure signature (the error lines are shown)")
            status = "fail"
        else:
            lines.append(f"{log['name']}: no error lines and no known failure signature")
    for f in doc["checks"]["problems"]:
        if f["status"] == "fail":
            on = f" on {f['node']}" if f.get("node") else ""
            lines.append(f"check failed: {f['title']} ({f['id']}{on})")
    for note in doc["notes"]:
        if note.startswith("checks:"):  # e.g. the cluster could not be probed: say so up front
            lines.append("doctor check could not run: " + note.split(": ", 1)[1])
            status = "fail" if status == "fail" else "warn"
    warns = doc["checks"]["counts"]["warn"]
    if warns:
        lines.append(f"{warns} warning{'s' * (warns != 1)} from doctor check")
    if doc["version_differences"]:
        lines.append("versions differ between nodes: " + ", ".join(doc["version_differences"]))
    if doc.get("memory") and doc["memory"].get("fits") is False:
        m = doc["memory"]
        lines.append(f"memory estimate: {m['peak_phase']} needs {m['total'] / 2**30:.1f} GiB of "
                     f"{m['capacity'] / 2**30:.1f} GiB")
    return {"status": status, "lines": lines}


def _command_line(argv: list[str]) -> str:
    import shlex

    return "doctor " + " ".join(shlex.quote(a) for a in argv)


# ---------------------------------------------------------------------------------------------
# Redaction and anonymization of the whole document


def protect(doc: dict, ctx, anonymize: bool) -> dict:
    from matching.redact import Redactor

    redactor = Redactor(ctx.env)
    safe = redactor.mapping(doc)
    safe["config"] = _without_effective(safe.get("config"))
    anon = None
    if anonymize:
        anon = anonymizer_for(ctx)
        # node labels first, in a fixed order: the same node is the same placeholder everywhere
        labels = list(safe.get("nodes") or {}) + [f["node"] for f in safe["checks"]["problems"] if f.get("node")]
        for label in labels:
            anon.host(label)
        safe = anon.mapping(safe)
    safe["_protect"] = (redactor, anon)  # for the renderers' final pass; never serialised
    return safe


def anonymizer_for(ctx):
    from matching.redact import Anonymizer

    anon = Anonymizer.for_this_machine(ctx.env)
    try:
        facts = ctx.get_facts()
    except Exception:
        facts = {}
    for label, node in (ctx.options.get("cluster_nodes") or {"": facts}).items():
        if label:
            anon.host(label)
        host = (node or {}).get("hostname") or {}
        if host.get("name"):
            anon.add_host(host["name"])
    return anon


def _without_effective(config: dict | None) -> dict | None:
    if config:
        config = dict(config)
        config.pop("effective", None)
    return config


def public(doc: dict) -> dict:
    """The document as it is serialised (without the in-memory redaction helpers)."""
    return {k: v for k, v in doc.items() if not k.startswith("_")}


def protect_text(doc: dict, text: str) -> str:
    """Raw text (a log for the bundle) with the document's redaction and anonymization."""
    redactor, anon = doc.get("_protect") or (None, None)
    if redactor is not None:
        text = redactor.text(text)
    if anon is not None:
        text = anon.text(text)
    return text


def final_pass(doc: dict, text: str) -> str:
    """Rendered text once more: every string of the document is already redacted, so hunting the
    known secret values (and identities) again is enough, and cheap on a large report."""
    redactor, anon = doc.get("_protect") or (None, None)
    if redactor is not None:
        text = redactor.literals(text)
    if anon is not None:
        text = anon.text(text)
    return text


def to_json(doc: dict) -> str:
    return final_pass(doc, json.dumps(public(doc), indent=2, default=str, ensure_ascii=False))


# ---------------------------------------------------------------------------------------------
# The bundle: the report, its JSON and the logs (redacted; large ones cut), size-bounded.


def bundle_plan(doc: dict, cuts: dict[str, LogCut]) -> dict[str, str]:
    """path -> how the log travels ("whole" / "cut"); the cuts are stated in the report."""
    plan = {}
    for path, cut in cuts.items():
        if cut.bytes <= BUNDLE_FULL_LOG_BYTES:
            plan[path] = "whole"
        else:
            plan[path] = "cut"
            doc["notes"].append(f"bundle: {cut.name} ({cut.bytes:,} bytes, {cut.lines:,} lines) is cut to "
                                f"{BUNDLE_CONTEXT} lines around each evidence line and its last {BUNDLE_TAIL} lines")
    return plan


def _bundle_log(path: str, cut: LogCut, how: str, doc: dict) -> bytes:
    """The log as it travels: whole when small, else the wide cut made while reporting."""
    if how == "whole":
        from matching.explain import open_log

        stream, _name = open_log(path)
        with stream:
            text = stream.read().decode("utf-8", "replace")
    else:
        lines = [f"# doctor: {os.path.basename(cut.name)} cut from {cut.lines:,} lines / {cut.bytes:,} bytes to {BUNDLE_CONTEXT} "
                 f"lines around the evidence and the last {BUNDLE_TAIL} lines; original line numbers in front"]
        for window in cut.windows():
            lines.append(f"# ... line {window[0][0]}")
            lines += [f"{n}: {t}" for n, t in window]
        text = "\n".join(lines) + "\n"
    return protect_text(doc, text).encode()


def write_bundle(target: str, doc: dict, markdown: str, cuts: dict[str, LogCut], plan: dict[str, str]) -> None:
    """A .tar.gz with report.md, report.json and logs/, written atomically."""
    import io
    import tarfile
    import tempfile

    members = {"report.md": markdown.encode(), "report.json": to_json(doc).encode()}
    seen: set[str] = set()
    for path, cut in cuts.items():
        base = protect_text(doc, os.path.basename(cut.name)) or "log"
        name = base
        i = 1
        while name in seen:
            i += 1
            name = f"{i}-{base}"
        seen.add(name)
        members[f"logs/{name}"] = _bundle_log(path, cut, plan.get(path, "cut"), doc)
    folder = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix=".doctor-bundle-", suffix=".tmp", dir=folder)
    _user_mode(fd)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            now = time.time()
            for name, data in members.items():
                info = tarfile.TarInfo(f"doctor-report/{name}")
                info.size, info.mtime, info.mode = len(data), now, 0o644
                tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _user_mode(fd: int) -> None:
    """mkstemp makes 0600 files; a report gets the mode any new file of the user gets."""
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)


def write_atomic(target: str, text: str) -> None:
    import tempfile

    folder = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix=".doctor-report-", suffix=".tmp", dir=folder)
    _user_mode(fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
