"""What `doctor check` judges, and what it is told to: --only/--skip names are checked, --list names
every check, and --scope launch judges a launch for a cluster from a machine outside it (a CI
runner), with the cluster's own Ray CPUs from --cpus-per-node and nothing of the runner's.

The runner here is this machine, with its real CPU count; the launch asks TransferQueue for one
storage unit more than this machine has CPUs, so this machine alone is too small for it."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from doctor.commands.check import summary_line
from tests.conftest import ROOT
from tests.lab.run import check_json, clean_env

SCHEMA = json.loads((ROOT / "knowledge" / "schemas" / "doctor.check.schema.json").read_text())
CPUS = os.cpu_count() or 1
UNITS = CPUS + 1  # storage actors, 1 CPU each, beside the TaskRunner's: CPUS + 2 needed


def doctor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "doctor", "check", *args], cwd=ROOT, env=clean_env(),
                          capture_output=True, text=True, timeout=120)


def defined_check_ids() -> set[str]:
    """The ids of every @check in the checks package, read from the source, not from the registry."""
    ids = set()
    for path in (ROOT / "checks").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            for deco in getattr(node, "decorator_list", []):
                if isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "check":
                    ids.add(deco.args[0].value)
    return ids


@pytest.mark.parametrize("option", ["--only", "--skip"])
def test_a_typo_in_only_or_skip_exits_2_and_names_the_valid_ids(option):
    r = doctor(option, "versions.torchnpu")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "No issues found" not in r.stdout
    line, = r.stderr.strip().splitlines()
    assert "'versions.torchnpu'" in line and "did you mean versions.torch_npu?" in line
    for name in defined_check_ids() | {"imports", "versions", "network", "cluster"}:
        assert name in line


def test_list_names_every_check_defined_in_the_package_cluster_ones_included():
    r = doctor("--list", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert {row["id"] for row in rows} == defined_check_ids()
    by_id = {row["id"]: row for row in rows}
    assert by_id["cluster.link"]["scope"] == "cluster" and by_id["config.runtime"]["scope"] == "launch"
    assert by_id["imports.shadowed"]["scope"] == "node" and by_id["memory.estimate"]["category"] == "memory"
    assert all(row["catches"] for row in rows)
    human = doctor("--list")
    assert human.returncode == 0
    assert all(any(line.startswith(i + " ") for line in human.stdout.splitlines()) for i in by_id)


def test_the_catch_line_is_the_first_sentence_of_what_it_checks():
    doc = """What it checks: that the launch's interface variables name
    real interfaces. Otherwise Gloo binds to nothing.
    How the job fails without it: connectFullMesh times out.
    Fix: name an interface every node has.
    After the fact: -
    """
    assert summary_line(doc, "Title") == "that the launch's interface variables name real interfaces."
    assert summary_line("No sections here.", "Title") == "Title"


def launch_script(tmp_path: Path, *extra: str) -> Path:
    """A two-node, 8-device launch that needs more Ray CPUs than this machine has."""
    script = tmp_path / "run_grpo.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_batch_size=16 "
        "actor_rollout_ref.rollout.n=4 actor_rollout_ref.actor.ppo_mini_batch_size=8 "
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 "
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2 actor_rollout_ref.rollout.name=vllm "
        "trainer.n_gpus_per_node=8 trainer.nnodes=2 trainer.device=cuda trainer.save_freq=10 "
        f"transfer_queue.backend.SimpleStorage.num_data_storage_units={UNITS} " + " ".join(extra) + "\n")
    return script


def run(script: Path, *args: str):
    rc, doc, found = check_json("--python", sys.executable, "--timeout", "120", *args, "--", "bash", str(script),
                                timeout=300)
    assert rc in (0, 1) and doc is not None
    jsonschema.validate(doc, SCHEMA)
    return doc, found


def test_this_machine_as_a_node_is_too_small_for_the_launch(tmp_path):
    """The situation the launch scope is for: judged as a node of the job, this machine fails it."""
    doc, found = run(launch_script(tmp_path))
    f, = found["config.ray_cpus"]
    assert f["status"] == "fail" and f"Ray has {CPUS} CPUs (this machine's" in f["message"]
    # ... and this venv has no flash_attn: a finding about this machine's packages
    assert "config.flash_attn" in found
    assert {f["scope"] for f in doc["findings"]} == {"node", "launch"}
    # every check of both scopes ran on its own terms (the two-node launch reaches the network ones)
    assert not [f["id"] for f in doc["findings"] if "the check itself failed" in f["message"]]
    assert {f["status"] for f in found["network.unset"]} != {"skip"}


def test_launch_scope_judges_no_cpus_packages_or_paths_of_this_machine(tmp_path):
    doc, found = run(launch_script(tmp_path), "--scope", "launch")
    assert doc["findings"] and {f["scope"] for f in doc["findings"]} == {"launch"}
    assert {f["category"] for f in doc["findings"]} <= {"config", "data", "memory"}
    assert not {"config.ray_cpus", "config.flash_attn", "config.devices"} & set(found)
    assert not any(f["id"].startswith(("imports.", "versions.", "workdir.", "network.")) for f in doc["findings"])


def test_launch_scope_with_the_clusters_cpus_judges_those(tmp_path):
    script = launch_script(tmp_path)
    need = UNITS + 1
    small = (need - 1) // 2  # two nodes of this many CPUs: one short
    doc, found = run(script, "--scope", "launch", "--cpus-per-node", str(small))
    f, = found["config.ray_cpus"]
    assert f["status"] == "fail" and f["scope"] == "launch"
    assert f"Ray has {small * 2} CPUs (--cpus-per-node {small} x 2 nodes)" in f["message"]
    doc, found = run(script, "--scope", "launch", "--cpus-per-node", str(need))
    assert "config.ray_cpus" not in found
    # --nodes overrides trainer.nnodes: one node of need - 1 CPUs is one short
    doc, found = run(script, "--scope", "launch", "--cpus-per-node", str(need - 1), "--nodes", "1")
    assert "config.ray_cpus" in found


@pytest.mark.parametrize("args", [("--scope", "launch"), ("--scope", "launch", "--cluster", "--", "bash", "run.sh"),
                                  ("--scope", "node", "--cpus-per-node", "8")])
def test_scope_misuse_is_one_line_exit_2(args):
    r = doctor(*args)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_launch_scope_does_not_fail_on_data_that_lives_on_the_cluster(tmp_path):
    """CI pre-flight judges the launch, not this runner's disks: /data2/... is on the cluster."""
    script = launch_script(tmp_path, "data.train_files=/data2/gsm8k/train.parquet")
    doc, found = run(script, "--scope", "launch", "--only", "data")
    f, = found["data.train_files"]
    assert f["status"] == "skip" and "this machine" in f["message"]
    doc, found = run(script, "--only", "data")  # judged as a node of the job, the file is missing here
    assert [f["status"] for f in found["data.train_files"]] == ["fail"]
