"""workdir: relative paths resolved from the launch directory, the verl checkout a `python -m`
launch expects, source trees that would shadow packages. A real project directory (a parquet
file, a model directory, a reward file, a launch script) is laid out and launched from the right
and the wrong place."""
from __future__ import annotations

import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.lab.pyenv import make_venv, write_package
from tests.lab.run import check_inproc, clean_env, problems

LAUNCH = """#!/bin/bash
set -x
python3 -m verl.trainer.main_ppo \\
    data.train_files=data/train.parquet \\
    data.val_files=data/test.parquet \\
    actor_rollout_ref.model.path=models/tiny \\
    reward.custom_reward_function.path=reward.py \\
    trainer.default_local_dir=checkpoints/run1 \\
    trainer.nnodes=1 $@
"""


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "project"
    (p / "data").mkdir(parents=True)
    table = pa.table({"prompt": [[{"role": "user", "content": "1+1?"}]], "data_source": ["gsm8k"]})
    for split in ("train", "test"):
        pq.write_table(table, p / "data" / f"{split}.parquet")
    (p / "models" / "tiny").mkdir(parents=True)
    (p / "models" / "tiny" / "config.json").write_text('{"model_type": "qwen2"}')
    (p / "reward.py").write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                                 "    return float(solution_str.strip() == ground_truth)\n")
    (p / "run_grpo.sh").write_text(LAUNCH)
    return p


def workdir(cwd, *launch, python=sys.executable):
    return check_inproc(python=python, cwd=cwd, launch=list(launch), only="workdir", env=clean_env())


def test_relative_paths_from_a_wrong_directory_fail_and_name_the_right_one(project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rc, doc, found = workdir(elsewhere, "bash", str(project / "run_grpo.sh"))
    assert rc == 1
    bad = {f["evidence"]["option"]: f for f in found["workdir.paths"] if f["status"] != "pass"}
    assert set(bad) == {"data.train_files", "data.val_files", "actor_rollout_ref.model.path",
                        "reward.custom_reward_function.path"}
    train = bad["data.train_files"]
    assert train["status"] == "fail" and str(elsewhere / "data" / "train.parquet") in train["message"]
    assert train["fix"].startswith(f"cd {project}")
    assert bad["actor_rollout_ref.model.path"]["status"] == "warn"  # `models/tiny` could be a hub id


def test_the_same_launch_from_its_directory_passes(project):
    rc, doc, found = workdir(project, "bash", str(project / "run_grpo.sh"))
    assert rc == 0, problems(doc)
    assert [f["status"] for f in found["workdir.paths"]] == ["pass"]


def test_python_m_verl_outside_the_checkout_it_needs(tmp_path):
    python, _ = make_venv(tmp_path / "env")  # verl is not installed: it is run from a checkout
    checkout = tmp_path / "verl-src"
    write_package(checkout, "verl", "0.7.0.dev0", extra={"trainer/__init__.py": "", "trainer/main_ppo.py": ""})
    (checkout / "examples").mkdir()
    script = checkout / "examples" / "run.sh"
    script.write_text("python3 -m verl.trainer.main_ppo trainer.nnodes=1\n")
    rc, doc, found = workdir(tmp_path, "bash", str(script), python=python)
    (f,) = found["workdir.entry"]
    assert rc == 1 and f["status"] == "fail" and "verl.trainer.main_ppo" in f["title"]
    assert f["fix"].startswith(f"cd {checkout}")
    rc, doc, found = workdir(checkout, "bash", str(script), python=python)
    assert [f["status"] for f in found["workdir.entry"]] == ["pass"]
    # A recipe module that is not in this checkout.
    rc, doc, found = workdir(checkout, "python3", "-m", "recipe.dapo.main_dapo", python=python)
    assert found["workdir.entry"][0]["status"] == "fail" and "recipe" in found["workdir.entry"][0]["message"]


def test_package_tree_in_the_launch_directory_is_a_warning_when_it_does_not_win(tmp_path):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "train.py").write_text("")
    job = tmp_path / "job"
    tree = write_package(job, "vllm", "0.0.0")
    # `python scripts/train.py` puts scripts/ first, not the launch directory.
    rc, doc, found = workdir(job, "python3", str(scripts / "train.py"))
    (f,) = found["workdir.source_trees"]
    assert f["status"] == "warn" and str(tree) in f["message"]
