"""`doctor check --only data` on real files: parquet layout, prompt lengths measured with the tiny
model's own tokenizer and chat template, and the custom reward file."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainer.tiny import ensure_tiny

VENV_BIN = str(Path(sys.executable).parent)
ENV = {"PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", "")}
MAX_PROMPT = 64


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    return ensure_tiny() / "model"


def rows(n: int, long_every: int = 2, source: str = "openai/gsm8k") -> list[dict]:
    """Every `long_every`-th prompt is ~300 words (far over MAX_PROMPT tokens), the rest a few words."""
    out = []
    for i in range(n):
        text = ("many words " * 150 + str(i)) if i % long_every == 0 else f"what is {i} plus one?"
        out.append({"data_source": source, "prompt": [{"role": "user", "content": text}],
                    "reward_model": {"style": "rule", "ground_truth": str(i + 1)}})
    return out


def lab(tmp_path: Path, model: Path, table_rows: list[dict] | None = None, *extra: str,
        reward: str | None = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                              "    return 1.0\n") -> Path:
    if table_rows is not None:
        pq.write_table(pa.Table.from_pylist(table_rows), tmp_path / "train.parquet")
    if reward is not None:
        (tmp_path / "reward.py").write_text(reward)
    overrides = ["algorithm.adv_estimator=grpo", "data.train_files=./train.parquet",
                 "data.val_files=./train.parquet", "data.train_batch_size=8",
                 f"data.max_prompt_length={MAX_PROMPT}", "data.filter_overlong_prompts=True",
                 f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.rollout.name=vllm",
                 *(["reward.custom_reward_function.path=./reward.py"] if reward is not None else []), *extra]
    (tmp_path / "run.sh").write_text("#!/bin/bash\npython -m verl.trainer.main_ppo \\\n    "
                                     + " \\\n    ".join(overrides) + " $@\n")
    return tmp_path


def findings(doctor, job: Path, only: str = "data") -> dict[str, list[dict]]:
    r = doctor("check", "--json", "--only", only, "--timeout", "300", "--cwd", str(job), "--", "bash", "run.sh",
               env=ENV, timeout=600)
    assert r.returncode in (0, 1), r.stderr
    assert "Traceback" not in r.stderr
    out: dict[str, list[dict]] = {}
    for f in json.loads(r.stdout)["findings"]:
        out.setdefault(f["id"], []).append(f)
    return out


def test_overlong_prompts_are_counted_with_the_models_tokenizer(doctor, tmp_path, tiny_model):
    """Two training files in one run (one probe, one tokenizer load): a small one read whole, and a
    large one sampled, with the sample size stated."""
    pq.write_table(pa.Table.from_pylist(rows(2500, long_every=4)), tmp_path / "big.parquet")
    found = findings(doctor, lab(tmp_path, tiny_model, rows(40), "'data.train_files=[./train.parquet,./big.parquet]'"))
    small, big = found["data.prompt_length"]
    assert small["status"] == "warn"
    assert small["title"] == "filter_overlong_prompts will drop ~20 of 40 rows"
    assert "20 of all 40 rows exceed max_prompt_length=64 tokens" in small["message"]
    assert "a random sample of 1000 of 2500 rows" in big["message"]
    assert big["evidence"]["sample"] == 1000
    assert abs(big["evidence"]["estimate"] - 625) < 80  # a quarter of the rows are long
    assert found["data.reward"][0]["status"] == "pass"
    assert found["data.files"][0]["status"] == "pass"


def test_layout_problems(doctor, tmp_path):
    plain = [{"data_source": "openai/gsm8k", "prompt": "just a string", "answer": "1"}] * 10
    found = findings(doctor, lab(tmp_path, tmp_path / "no-model", plain))
    messages = " | ".join(f["message"] for f in found["data.train_files"])
    assert "not a list of chat messages" in messages
    assert "no 'reward_model' column" in messages


def test_broken_parquet_is_a_finding_not_a_crash(doctor, tmp_path):
    job = lab(tmp_path, tmp_path / "no-model")
    (job / "train.parquet").write_bytes(b"PAR1 garbage, not parquet")
    f = findings(doctor, job)["data.train_files"][0]
    assert f["status"] == "fail" and f["title"] == "data.train_files: not readable as parquet"


def test_too_few_rows_for_one_batch(doctor, tmp_path):
    found = findings(doctor, lab(tmp_path, tmp_path / "no-model", rows(5, long_every=99)))
    assert found["data.too_few_rows"][0]["status"] == "fail"


def test_a_tokenizer_that_will_not_load(doctor, tmp_path, tiny_model):
    broken = tmp_path / "model"
    broken.mkdir()
    (broken / "config.json").write_text((tiny_model / "config.json").read_text())
    (broken / "tokenizer.json").write_text("{ not json")
    job = tmp_path / "job"
    job.mkdir()
    found = findings(doctor, lab(job, broken, rows(10)))
    f = found["data.tokenizer"][0]
    assert f["status"] == "fail" and str(broken) in f["message"]


@pytest.mark.parametrize("reward, words", [
    (None, None),
    ("def compute_score(solution, answer):\n    return 0.0\n", "does not accept data_source, solution_str"),
    ("def score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n",
     "Object not found in module: object_name='compute_score'"),
    ("import not_a_module_anywhere\n", "Error loading module from module_path="),
    ("async def compute_score(**kwargs):\n    return 0.0\n", None),
])
def test_reward_function(doctor, tmp_path, reward, words):
    job = lab(tmp_path, tmp_path / "no-model", None, reward=reward)  # no data: the probe only loads the reward
    if reward is None:  # the path is set but the file is not there
        (job / "run.sh").write_text((job / "run.sh").read_text().replace(
            "data.val_files", "reward.custom_reward_function.path=./missing.py \\\n    data.val_files"))
        words = "Custom module file not found: module_path='./missing.py'"
    f = findings(doctor, job)["data.reward"][0]
    if words is None:
        assert f["status"] == "pass", f
    else:
        assert f["status"] == "fail" and words in f["message"]


def test_unregistered_data_source_without_custom_reward(doctor, tmp_path):
    no_model = tmp_path / "no-model"  # not needed here: skips the tokenizer
    job = lab(tmp_path, no_model, rows(16, source="verl_doctor/digits"), reward=None)
    f = findings(doctor, job, only="config.reward_source")["config.reward_source"][0]
    assert f["status"] == "fail"
    assert "Reward function is not implemented for data_source='verl_doctor/digits'" in f["message"]
    job2 = tmp_path / "with_reward"
    job2.mkdir()
    lab(job2, no_model, rows(16, source="verl_doctor/digits"))
    f = findings(doctor, job2, only="config.reward_source")["config.reward_source"][0]
    assert f["status"] == "pass"


def test_missing_files_are_the_finding_even_where_the_interpreter_has_no_pyarrow(doctor, tmp_path, tiny_model):
    """A missing parquet file is reported as missing, not as 'could not measure: no pyarrow'."""
    import subprocess

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    job = lab(tmp_path, tiny_model, None)  # no train.parquet written
    r = doctor("check", "--json", "--only", "data", "--python", str(tmp_path / "bare" / "bin" / "python"),
               "--cwd", str(job), "--", "bash", "run.sh", timeout=300)
    assert r.returncode == 1, r.stderr
    found = json.loads(r.stdout)["findings"]
    assert any(f["id"] == "data.train_files" and "does not exist" in f["message"] for f in found)
    assert not any("pyarrow" in f["message"] for f in found), [f["message"] for f in found]


def test_a_missing_data_file_is_one_finding_not_two(doctor, tmp_path, tiny_model):
    """workdir.paths and data.files both see ./train.parquet missing: workdir.paths (whose fix
    says where the file is) owns the fact, and data.files refers to it instead of failing again."""
    job = lab(tmp_path, tiny_model, None)  # no train.parquet written
    found = findings(doctor, job, only="data,workdir")
    workdir = [f for f in found["workdir.paths"] if "train.parquet" in f["title"]]
    assert [f["status"] for f in workdir] == ["fail", "fail"]  # data.train_files and data.val_files
    mine = found["data.train_files"] + found["data.val_files"]
    assert [f["status"] for f in mine] == ["skip", "skip"], mine
    assert all("workdir.paths" in f["message"] for f in mine)
    alone = findings(doctor, job, only="data")  # without the owner the data check still reports it
    assert [f["status"] for f in alone["data.train_files"]] == ["fail"]
