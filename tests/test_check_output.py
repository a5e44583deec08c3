"""The check report in every format, on a real failing situation: JSON against its schema, JUnit
parsed back, GitHub annotations, --strict, and exit codes 0 / 1 / 2."""
from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import jsonschema
import pytest

from tests.conftest import ROOT
from tests.lab.pyenv import lay_dist, make_venv, write_package
from tests.lab.run import clean_env

SCHEMA = json.loads((ROOT / "knowledge" / "schemas" / "doctor.check.schema.json").read_text())


def doctor(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "doctor", "check", *args], cwd=cwd, env=clean_env(),
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def shadowed(tmp_path_factory):
    """An interpreter with vllm installed, and a launch directory whose vllm/ shadows it."""
    tmp = tmp_path_factory.mktemp("out")
    python, site = make_venv(tmp / "env")
    lay_dist(site, "vllm", "0.11.0")
    job = tmp / "job"
    write_package(job, "vllm", "0.0.0")
    return python, job, tmp


def test_json_validates_and_junit_parses(shadowed):
    python, job, tmp = shadowed
    junit = tmp / "report.xml"
    r = doctor("--json", "--junit", str(junit), "--python", str(python), "--cwd", str(job))
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["status"] == "fail"
    assert any(f["id"] == "imports.shadowed" and f["status"] == "fail" for f in doc["findings"])
    # every finding says what it judged: the imports of this machine; no launch, so nothing of one
    assert {f["scope"] for f in doc["findings"] if f["category"] == "imports"} == {"node"}
    assert {f["scope"] for f in doc["findings"]} == {"node", "launch"}  # launch checks skip, saying why
    suite = ET.parse(junit).getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert int(suite.get("tests")) == len(cases) >= 10  # one testcase per check
    assert cases["imports.shadowed"].find("failure") is not None
    assert cases["imports.probe"].find("failure") is None
    assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases.values())


def test_github_annotations(shadowed):
    python, job, _ = shadowed
    r = doctor("--format", "github", "--python", str(python), "--cwd", str(job), "--only", "imports")
    assert r.returncode == 1
    lines = r.stdout.strip().splitlines()
    assert lines and all(line.startswith(("::error ", "::warning ")) for line in lines)
    assert any("imports.shadowed" in line for line in lines)


def test_human_output_names_the_problem_and_the_fix(shadowed):
    python, job, _ = shadowed
    r = doctor("--python", str(python), "--cwd", str(job), "--only", "imports")
    assert r.returncode == 1
    assert "[✗] imports" in r.stdout and "fix: " in r.stdout and f"mv {job / 'vllm'}" in r.stdout
    assert "imports.shadowed · this machine" in r.stdout and "Doctor summary of this machine and the launch" in r.stdout


def test_strict_turns_a_warning_into_failure(tmp_path):
    """A source tree in the launch directory that does not win is a warning."""
    python, _ = make_venv(tmp_path / "env")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "train.py").write_text("")
    job = tmp_path / "job"
    write_package(job, "vllm", "0.0.0")
    launch = ("--", "python3", str(tmp_path / "scripts" / "train.py"))
    args = ("--json", "--python", str(python), "--cwd", str(job), "--only", "workdir")
    plain, strict = doctor(*args, *launch), doctor("--strict", *args, *launch)
    assert (plain.returncode, json.loads(plain.stdout)["status"]) == (0, "warn")
    assert (strict.returncode, json.loads(strict.stdout)["status"]) == (1, "fail")


@pytest.mark.parametrize("args", [("--cwd", "/no/such/dir"), ("--only", "nonsense")])
def test_bad_usage_is_one_line_and_exit_2(args):
    r = doctor(*args)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_doctor_itself_never_imports_the_heavy_stack(tmp_path):
    """The stack is only ever imported by the probed interpreter, in a subprocess."""
    script = tmp_path / "run.sh"
    script.write_text("python3 -m verl.trainer.main_ppo trainer.nnodes=2 actor_rollout_ref.rollout.name=vllm\n")
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "doctor", "check", "--json",
                        "--python", sys.executable, "--cwd", str(tmp_path), "--", "bash", str(script)],
                       cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 1) and json.loads(r.stdout)["schema"] == "doctor.check/v1"
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    heavy = {m for m in imported if m.split(".")[0] in ("torch", "torch_npu", "vllm", "vllm_ascend", "verl", "ray")}
    assert not heavy, sorted(heavy)[:5]
