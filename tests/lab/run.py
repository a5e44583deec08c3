"""Run `doctor check --json` as a user would and read the findings back."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without the machine's own Ascend / interface settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ASCEND_", "HCCL_", "GLOO_", "NCCL_", "TP_SOCKET", "PYTHONPATH"))}
    env.update(extra)
    return env


def doctor_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "doctor", "check", "--json", *args]


def check_json(*args: str, env: dict | None = None, cwd=None, timeout: float = 60):
    """(exit code, document, {finding id: [findings]}) of `doctor check --json ARGS`."""
    r = subprocess.run(doctor_argv(*args), env=env if env is not None else clean_env(),
                       cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in r.stderr, r.stderr
    doc = json.loads(r.stdout) if r.stdout.strip() else None
    return r.returncode, doc, by_id(doc)


def by_id(doc) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for f in (doc or {}).get("findings", []):
        out.setdefault(f["id"], []).append(f)
    return out


def problems(doc, status=("fail",)) -> list[dict]:
    return [f for f in (doc or {}).get("findings", []) if f["status"] in status]


def check_inproc(*, python, cwd, launch: list[str] | None = None, env: dict | None = None,
                 only: str | None = None, nodes: int | None = None, timeout: float = 20,
                 deep: bool = False):
    """The same checks as `doctor check --only ONLY [-- LAUNCH]`, run in this process (the probe
    of `python` is still a real subprocess): (exit code, document, findings by id). Saves the CLI's
    start-up where the CLI itself is not what a test is about."""
    from checks.context import CheckContext
    from launch.script import parse_launch
    from checks.model import exit_code, overall_status
    from checks.registry import all_checks, flatten, run_checks, select

    env = dict(clean_env() if env is None else env)
    parsed = parse_launch(list(launch), cwd=Path(cwd), environ=env) if launch else None
    if parsed is not None:
        env.update(parsed.env)
    base = parsed.cwd if parsed is not None and parsed.cwd else Path(cwd).resolve()
    ctx = CheckContext(cwd=base, python=str(python), env=env, launch=parsed, nodes=nodes, timeout=timeout,
                       deep=deep)
    wanted = set(only.split(",")) if only else None
    findings = flatten(run_checks(select(all_checks(), wanted, None), ctx))
    doc = {"status": overall_status(findings), "findings": [f.to_dict() for f in findings]}
    return exit_code(findings), doc, by_id(doc)
