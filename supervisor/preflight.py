"""`doctor check` on the job's launch before the first attempt: a failure stops the run before
anything starts."""
from __future__ import annotations

from checks.context import CheckContext
from checks.model import Finding
from checks.registry import all_checks, flatten, run_checks, select
from supervisor.engine import Engine


def failed_checks(engine: Engine, overrides: list[str], external_cluster: bool) -> list[Finding]:
    launch = engine.preflight_launch(overrides)
    # Ray nodes the reference trainer starts itself all live on this machine: one host.
    nodes = 1 if engine.name == "reference" and not external_cluster else None
    ctx = CheckContext.local(cwd=engine.cwd, python=engine.python, launch=launch, nodes=nodes)
    ctx.env = dict(engine.env)
    checks = select(all_checks(), None, set(engine.preflight_skip) or None)
    return [f for f in flatten(run_checks(checks, ctx)) if f.status == "fail"]


def failure_report(findings: list[Finding]) -> list[str]:
    """What the user reads when the pre-flight check stops the run."""
    lines = [f"pre-flight check failed ({len(findings)} problem(s)); nothing was launched "
             f"(--no-preflight to launch anyway):"]
    for f in findings:
        lines.append(f"  [{f.category}] {f.title} ({f.id})" + (f" on {f.node}" if f.node else ""))
        lines += [f"      {line}" for line in (f.message or "").splitlines()[:4]]
        if f.fix:
            lines.append(f"      fix: {f.fix.splitlines()[0]}")
    return lines
