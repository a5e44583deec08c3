"""`doctor plan`: the seed article's batch arithmetic, verl's own view of it, and bad input."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from launch.script import parse_launch
from checks.plan import batch_plan
from checks.verl_config import effective_config
from tests.conftest import ROOT

SEED_EXAMPLE = [  # seed article 4.2.3 / 5.1: B=256, n=16, M=32, m=1, W=16, 10 epochs
    "data.train_batch_size=256", "actor_rollout_ref.rollout.n=16",
    "actor_rollout_ref.actor.ppo_mini_batch_size=32", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "trainer.nnodes=2", "trainer.n_gpus_per_node=8", "trainer.total_epochs=10",
]


def test_seed_worked_example_exactly(doctor):
    r = doctor("plan", "--json", "--rows", "3000", *SEED_EXAMPLE)
    assert r.returncode == 0, r.stderr
    b = json.loads(r.stdout)["batch"]
    assert (b["iters_per_epoch"], b["T"], b["updates_per_iter"], b["local_mini"], b["accum_steps"],
            b["total_updates"]) == (12, 4096, 128, 2, 2, 15360)


def test_verl_view_counts_mini_batch_in_prompts_and_drops_the_last_batch():
    cfg = effective_config(parse_launch(["python3", "-m", "verl.trainer.main_ppo", *SEED_EXAMPLE]))
    v = batch_plan(cfg, 3000)["verl"]
    # verl multiplies ppo_mini_batch_size by rollout.n and drops the partial batch (drop_last=True)
    assert v["mini_batch_samples"] == 32 * 16
    assert v["optimizer_steps_per_iter"] == 256 // 32
    assert v["local_mini_samples"] == 32 * 16 // 16
    assert v["steps_per_epoch"] == 3000 // 256
    assert v["total_training_steps"] == 11 * 10


def test_rows_are_counted_from_the_parquet_footer(doctor, tmp_path):
    path = tmp_path / "train.parquet"
    pq.write_table(pa.table({"data_source": ["openai/gsm8k"] * 3000}), path)
    r = doctor("plan", "--json", f"data.train_files={path}", *SEED_EXAMPLE)
    b = json.loads(r.stdout)["batch"]
    assert b["N"] == 3000 and b["iters_per_epoch"] == 12


def test_plan_reads_a_launch_script_and_appends_overrides(doctor, tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\nset -x\npython3 -m verl.trainer.main_ppo \\\n"
                      "    data.train_batch_size=128 \\\n    actor_rollout_ref.rollout.n=4 $@\n")
    r = doctor("plan", "--json", "--rows", "1000", "--script", str(script), "actor_rollout_ref.rollout.n=8")
    b = json.loads(r.stdout)["batch"]
    assert (b["B"], b["n"], b["T"]) == (128, 8, 1024)
    r = doctor("plan", "--json", "--rows", "1000", "--", "bash", str(script))
    assert json.loads(r.stdout)["batch"]["n"] == 4


@pytest.mark.parametrize("args, words", [
    (["trainer.n_gpu_per_node=8"], "did you mean trainer.n_gpus_per_node"),
    (["ray_kwargs.ray_init.num_gpus=1"], "+ray_kwargs.ray_init.num_gpus=1"),
    (["--device-memory", "lots", "trainer.nnodes=1"], "not a memory size"),
    (["--script", "/nonexistent/run.sh"], "cannot read launch script"),
    (["--", "ls", "-l"], "not a python or shell launch"),
])
def test_bad_input_is_one_line_and_exit_2(doctor, args, words):
    r = doctor("plan", *args)
    assert r.returncode == 2
    assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr


def test_broken_parquet_is_a_note_not_a_crash(doctor, tmp_path):
    bad = tmp_path / "train.parquet"
    bad.write_bytes(b"PAR1 this is not a parquet file")
    r = doctor("plan", "--json", f"data.train_files={bad}", *SEED_EXAMPLE)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["batch"]["N"] is None and "not readable as parquet" in doc["batch"]["rows_from"]


def test_plan_memory_table_and_schema(doctor, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from tests.test_memory import QWEN2_05B

    (tmp_path / "config.json").write_text(json.dumps(QWEN2_05B))
    r = doctor("plan", "--json", "--rows", "3000", "--device-memory", "910B3", "--model-config",
               str(tmp_path), *SEED_EXAMPLE)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    schema = json.loads((ROOT / "knowledge" / "schemas" / "doctor.plan.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert doc["memory"]["params"] == 494_032_768 and doc["memory"]["capacity"] == 64 * 2**30
    assert "910B3" in doc["memory_note"]
    human = doctor("plan", "--rows", "3000", "--device-memory", "910B3", "--model-config", str(tmp_path),
                   *SEED_EXAMPLE)
    assert "peak" in human.stdout and "iterations per epoch = ceil(N/B)" in human.stdout


def test_memory_estimate_of_a_model_that_is_not_here_comes_from_the_model_table(doctor, tmp_path):
    r = doctor("plan", "--json", "--rows", "100", "--device-memory", "910B3", *SEED_EXAMPLE,
               "actor_rollout_ref.model.path=/data2/models/Qwen2.5-7B-Instruct",
               env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf" / "hub")})
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert doc["memory"] is not None and 7.0e9 < doc["memory"]["params"] < 8.0e9
    assert doc["model_config"].startswith("doctor's model table: Qwen/Qwen2.5-7B")
    assert "https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json" in doc["model_config"]
