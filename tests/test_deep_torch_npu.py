"""`doctor check --deep` on the real torch and torch_npu wheels, without CANN.

The interpreter is a virtual environment over the test run's own site-packages (torch 2.13.0, the
CPU build the README installs) with the published torch-npu 2.13.0 wheel installed into it by pip.
Nothing is faked: `import torch` really fails there, because torch auto-loads torch_npu, whose
`_C` extension really cannot load libhccl.so (no CANN on this machine). doctor must name that
innermost cause and say to install or source CANN, not to reinstall torch, and must not suggest
an old matrix row for a torch_npu newer than the matrix.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

from tests.lab.pyenv import pip_into, venv_over
from tests.lab.run import ROOT, clean_env

TORCH_NPU = "2.13.0"  # on PyPI, with torch 2.13.0 (its wheel pins torch==2.13.0.*)
LAUNCH = ("python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.name=vllm trainer.logger=[console] "
          "trainer.n_gpus_per_node=8 trainer.nnodes=2 trainer.device=npu $@\n")


@pytest.fixture(scope="session")
def npu_venv(tmp_path_factory) -> Path:
    """Built once per test session: ~45 MB from PyPI (pip's cache after the first time)."""
    python, site = venv_over(tmp_path_factory.mktemp("torch-npu") / "env", sysconfig.get_paths()["purelib"])
    if not metadata.version("torch").startswith("2.13.0"):
        pip_into(site, "torch==2.13.0")
    pip_into(site, f"torch-npu=={TORCH_NPU}")
    return python


def _env(python: Path, tmp: Path) -> dict[str, str]:
    env = clean_env(DOCTOR_ASCEND_ROOT=str(tmp / "no-ascend"))  # and no /usr/local/Ascend read
    env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"  # `python3` in the script is the venv's
    env["PYTHONPATH"] = str(ROOT)
    return env


def test_the_situation_is_real(npu_venv, tmp_path):
    r = subprocess.run([str(npu_venv), "-c", "import torch"], env=_env(npu_venv, tmp_path),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "libhccl.so: cannot open shared object file" in r.stderr
    assert "Failed to load the backend extension: torch_npu" in r.stderr
    r = subprocess.run([str(npu_venv), "-c", "import importlib.metadata as m; print(m.version('torch-npu'))"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == TORCH_NPU


def test_deep_names_the_missing_cann_and_no_old_matrix_row(npu_venv, tmp_path):
    (tmp_path / "run_grpo.sh").write_text(LAUNCH)
    r = subprocess.run([sys.executable, "-m", "doctor", "check", "--json", "--deep", "--only", "versions",
                        "--", "bash", "run_grpo.sh"], cwd=tmp_path, env=_env(npu_venv, tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    found = json.loads(r.stdout)["findings"]
    (deep,) = [f for f in found if f["id"] == "versions.deep"]
    assert deep["status"] == "fail" and deep["title"].startswith("`import torch` fails")
    assert "libhccl.so" in deep["title"] and deep["evidence"]["rule"] == "npu-libhccl-missing"
    assert "innermost cause: ImportError: libhccl.so: cannot open shared object file" in deep["message"]
    assert deep["fix"].startswith("install CANN 9.1.0") and "source" in deep["fix"]
    assert "reinstall" not in deep["fix"]
    (npu,) = [f for f in found if f["id"] == "versions.torch_npu"]
    assert npu["status"] == "warn" and npu["title"] == f"torch_npu {TORCH_NPU} is newer than the matrix"
    assert "torch_npu 2.12.0" in npu["fix"] and "cann 9.1.0" in npu["fix"]
    # No old release picked by distance (the verl 0.4.1 set: CANN 8.1.RC1, torch 2.5.1), anywhere.
    text = json.dumps([{k: f[k] for k in ("title", "message", "fix")} for f in found])
    assert "8.1.RC1" not in text and "2.5.1" not in text and "0.4.1" not in text
