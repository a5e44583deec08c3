"""The memory estimate with the weights elsewhere (a CI runner, a login node): the model's config.json
from the Hugging Face cache when it is there, else from doctor's sourced table, and the finding
says which was used. huggingface_hub itself is the judge of where the cache is and which snapshot
a repo's refs/main names."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from checks.model_source import cached_config, find, hub_cache
from checks.plan import model_shape
from knowledge import load_toml
from tests.lab.run import check_json, clean_env
from trainer.tiny import ensure_tiny

# Qwen2-0.5B-Instruct's config.json: the fields the estimate reads (the rest do not change it)
QWEN2_05B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 151936,
             "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
             "intermediate_size": 4864, "tie_word_embeddings": True}
SHAPE = ["data.max_prompt_length=512", "data.max_response_length=1024", "data.train_batch_size=128",
         "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=32",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "actor_rollout_ref.rollout.name=vllm",
         "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4", "trainer.n_gpus_per_node=8",
         "trainer.nnodes=2", "trainer.device=npu"]


def estimate(tmp_path: Path, model_path: str, hf_home: Path, **env: str) -> dict:
    """memory.estimate of a launch naming `model_path`, judged as CI does (--scope launch)."""
    script = tmp_path / "run.sh"
    script.write_text(f"python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path={model_path} "
                      + " ".join(SHAPE) + "\n")
    full_env = {k: v for k, v in clean_env().items() if k not in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE")}
    full_env.update(HF_HOME=str(hf_home), **env)
    rc, doc, found = check_json("--scope", "launch", "--only", "memory", "--device-memory", "64GiB",
                                "--", "bash", str(script), env=full_env, timeout=120)
    assert rc in (0, 1), doc
    f, = found["memory.estimate"]
    return f


def figures(f: dict) -> tuple:
    e = f["evidence"]
    return e["params"], e["total"], e["phases"], e["parts"]


def test_qwen2_05b_with_nothing_on_the_machine_equals_the_estimate_from_its_config_json(tmp_path):
    empty_home = tmp_path / "hf"  # no cache at all
    model = tmp_path / "Qwen2-0.5B-Instruct"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN2_05B))
    on_disk = estimate(tmp_path, str(model), empty_home)
    assert on_disk["status"] == "pass" and on_disk["evidence"]["model_config"] == str(model / "config.json")
    for name in ("Qwen/Qwen2-0.5B-Instruct", "/data2/models/Qwen2-0.5B-Instruct", "models/qwen2-0.5b-instruct/"):
        away = estimate(tmp_path, name, empty_home)
        assert away["status"] == "pass", away
        assert figures(away) == figures(on_disk)
        assert away["evidence"]["params"] == 494_032_768
        where = away["evidence"]["model_config"]
        assert where.startswith("doctor's model table: Qwen/Qwen2-0.5B-Instruct")
        assert "https://huggingface.co/Qwen/Qwen2-0.5B-Instruct/blob/main/config.json" in away["message"]


def lay_cache(hub: Path, repo: str, config: dict, stale: dict | None = None) -> Path:
    """A hub cache as huggingface_hub writes it: refs/main -> snapshots/<commit>/config.json (and,
    with `stale`, an older snapshot written after it that refs/main does not name)."""
    folder = hub / ("models--" + repo.replace("/", "--"))
    commit = "a" * 40
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(config))
    if stale is not None:
        old = folder / "snapshots" / ("b" * 40)
        old.mkdir()
        (old / "config.json").write_text(json.dumps(stale))
    return snap / "config.json"


def test_the_hf_cache_wins_over_the_table_and_is_named(tmp_path):
    tiny = json.loads((ensure_tiny() / "model" / "config.json").read_text())
    home = tmp_path / "hf"
    cached = lay_cache(home / "hub", "Qwen/Qwen2-0.5B-Instruct", tiny, stale=QWEN2_05B)
    f = estimate(tmp_path, "Qwen/Qwen2-0.5B-Instruct", home)
    assert f["evidence"]["model_config"] == f"Hugging Face cache: {cached}"
    assert f["evidence"]["params"] == model_shape(tiny).params != model_shape(QWEN2_05B).params
    from_disk = estimate(tmp_path, str(ensure_tiny() / "model"), tmp_path / "none")
    assert figures(f) == figures(from_disk)
    # HF_HUB_CACHE beats HF_HOME, as in huggingface_hub
    other = tmp_path / "elsewhere"
    lay_cache(other, "Qwen/Qwen2-0.5B-Instruct", QWEN2_05B)
    f = estimate(tmp_path, "Qwen/Qwen2-0.5B-Instruct", home, HF_HUB_CACHE=str(other))
    assert f["evidence"]["params"] == 494_032_768 and str(other) in f["evidence"]["model_config"]


def test_the_snapshot_is_the_one_huggingface_hub_returns(tmp_path):
    hub_lib = pytest.importorskip("huggingface_hub")
    hub = tmp_path / "hub"
    lay_cache(hub, "Qwen/Qwen2-0.5B-Instruct", QWEN2_05B, stale={"vocab_size": 1})
    theirs = hub_lib.try_to_load_from_cache("Qwen/Qwen2-0.5B-Instruct", "config.json", cache_dir=str(hub))
    assert cached_config("Qwen/Qwen2-0.5B-Instruct", hub) == Path(theirs)
    # a local path with the repo's name finds the same file
    assert cached_config("/data2/models/Qwen2-0.5B-Instruct", hub) == Path(theirs)


@pytest.mark.parametrize("env", [{}, {"HF_HOME": "/tmp/h/home"}, {"XDG_CACHE_HOME": "/tmp/h/xdg"},
                                 {"HF_HOME": "/tmp/h/home", "HF_HUB_CACHE": "/tmp/h/hub"},
                                 {"HUGGINGFACE_HUB_CACHE": "/tmp/h/legacy"}])
def test_the_cache_directory_is_huggingface_hubs(env):
    pytest.importorskip("huggingface_hub")
    base = {k: v for k, v in os.environ.items()
            if k not in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME")}
    full = {**base, **env}
    theirs = subprocess.run([sys.executable, "-c", "from huggingface_hub import constants; print(constants.HF_HUB_CACHE)"],
                            env=full, capture_output=True, text=True, check=True).stdout.strip()
    assert hub_cache(full) == Path(theirs)


def test_not_found_anywhere_says_where_it_looked(tmp_path):
    found = find("/data2/models/MyOwnModel-7B", tmp_path, {"HF_HOME": str(tmp_path / "hf")})
    assert found.config is None
    assert "/data2/models/MyOwnModel-7B not found on this machine" in found.where
    assert str(tmp_path / "hf" / "hub") in found.where and "model table" in found.where


SIZE = re.compile(r"-(\d+(?:\.\d+)?)B\b")


def test_every_table_row_is_sourced_and_its_size_matches_its_name():
    rows = load_toml("models.toml")["model"]
    assert len(rows) >= 15
    seen = set()
    for row in rows:
        name = row["names"][0]
        assert row["source"] == f"https://huggingface.co/{name}/blob/main/config.json" and row["checked"]
        billions = float(SIZE.search(name).group(1))
        params = model_shape(row).params / 1e9
        assert abs(params - billions) / billions < 0.3, (name, params)
        keys = {n.rsplit("/", 1)[-1].lower() for n in row["names"]}
        assert not keys & seen, keys & seen  # a name picks one row
        seen |= keys
