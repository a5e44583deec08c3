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
