"""No planted secret reaches any `doctor check` output: human -v, --json, --junit, --format github."""
from __future__ import annotations

import json

from checks.model import Finding
from checks.registry import Check, CheckResult
from doctor import render
from matching.redact import REDACTED
from tests.conftest import run_doctor
from tests.lab.planted import BEARER, HF, MLFLOW_URI, SECRETS, WANDB, planted_env, planted_script


def leaking_results():
    """Findings that carry what real checks carry: env variables, config values and log lines."""
    env = {"HF_TOKEN": HF, "WANDB_API_KEY": WANDB, "GLOO_SOCKET_IFNAME": "eth0", "MLFLOW_TRACKING_URI": MLFLOW_URI}
    findings = [
        Finding("network.gloo", "network", "warn", "GLOO_SOCKET_IFNAME names no interface",
                f"seen env {env}", "export GLOO_SOCKET_IFNAME=eth1", evidence={"env": env}),
        Finding("other.log", "other", "fail", "a log line",
                f"Authorization: Bearer {BEARER}\nHF token was {HF}", evidence={"line": f"token {WANDB}"}),
    ]
    check = Check("network.gloo", "network", "t", lambda ctx: [])
    return [CheckResult(check, findings, 0.01)]


def assert_clean(text: str):
    for secret in SECRETS:
        assert secret not in text, f"secret leaked: {secret[:6]}..."


def test_every_renderer_redacts(tmp_path, capsys):
    results = leaking_results()
    render.to_human(results, verbose=True)
    human = capsys.readouterr().out
    assert "GLOO_SOCKET_IFNAME" in human and "eth0" in human  # the diagnosis is still there
    for text in (human, render.to_json(results), render.to_junit(results), render.to_github(results)):
        assert_clean(text)
    doc = json.loads(render.to_json(results))
    assert doc["findings"][0]["evidence"]["env"]["HF_TOKEN"] == REDACTED
    assert doc["findings"][0]["evidence"]["env"]["GLOO_SOCKET_IFNAME"] == "eth0"


def test_check_cli_outputs_carry_no_planted_secret(tmp_path):
    script = planted_script(tmp_path / "run_grpo.sh")
    env = planted_env()
    junit = tmp_path / "junit.xml"
    for args in (["check", "-v", "--junit", str(junit)], ["check", "--json"]):
        r = run_doctor(*args, "--", "bash", str(script), cwd=tmp_path, env=env)
        assert r.returncode in (0, 1), r.stderr
        assert "Traceback" not in r.stderr
        assert_clean(r.stdout + r.stderr)
    assert_clean(junit.read_text())
