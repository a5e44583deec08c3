"""versions.launch_stack: the launch decides what the stack must hold. Each test gives a real
interpreter (a fresh virtual environment) whose site-packages holds only what the test lays there,
and a real launch script read by doctor's launch parser, as on the machine the job will run on."""
from __future__ import annotations

from pathlib import Path

from tests.lab.ascend import lay_cann, lay_driver, sourced_env
from tests.lab.pyenv import SEED_STACK, lay_dist, lay_stack, make_venv, torch_version_py
from tests.lab.image import image
from tests.lab.run import check_inproc, clean_env, problems

# The seed article's launch (section 3.5), the lines that decide the stack.
SEED_LAUNCH = ("export HCCL_SOCKET_IFNAME=eth6\nexport GLOO_SOCKET_IFNAME=eth6\n"
               "python -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \\\n"
               "    actor_rollout_ref.rollout.name=vllm trainer.logger='[\"console\"]' \\\n"
               "    trainer.n_gpus_per_node=8 trainer.nnodes=2 trainer.device=npu $@\n")


def _script(tmp_path: Path, text: str = SEED_LAUNCH) -> list[str]:
    script = tmp_path / "run_grpo.sh"
    script.write_text(text)
    return ["bash", str(script)]


def _launch_findings(tmp_path, python, env, launch):
    rc, doc, found = check_inproc(python=python, cwd=tmp_path, only="versions", env=env, launch=launch)
    return rc, doc, found.get("versions.launch_stack", [])


def test_empty_stack_with_the_seed_launch_fails_naming_each_missing_part(tmp_path):
    python, _ = make_venv(tmp_path / "env")  # a real interpreter with none of the stack
    env = clean_env(DOCTOR_ASCEND_ROOT=str(tmp_path / "no-ascend"))
    rc, doc, found = _launch_findings(tmp_path, python, env, _script(tmp_path))
    assert rc == 1 and doc["status"] == "fail"
    titles = {f["title"]: f for f in found}
    for part in ("torch", "torch-npu", "CANN", "the NPU driver", "vllm", "vllm-ascend", "verl", "ray"):
        f = titles.get(f"The launch needs {part}: not installed")
        assert f is not None and f["status"] == "fail", (part, sorted(titles))
        assert f["fix"].startswith(("pip install", "VLLM_TARGET_DEVICE=empty pip install", "install CANN",
                                    "install the Ascend HDK driver")), f["fix"]
    assert len(found) == 8  # logger console: no wandb needed
    # The install lines come from one documented known-good set (knowledge/versions.toml).
    from checks.matrix import known_good_sets

    target = found[0]["evidence"]["nearest"]
    assert target in known_good_sets()
    assert f"pip install torch-npu=={target['torch_npu']}" in titles["The launch needs torch-npu: not installed"]["fix"]
    assert f"install CANN {target['cann']}" in titles["The launch needs CANN: not installed"]["fix"]
    assert f"vllm-ascend=={target['vllm_ascend']}" in titles["The launch needs vllm-ascend: not installed"]["fix"]


def test_no_launch_says_what_could_not_be_judged(tmp_path):
    python, _ = make_venv(tmp_path / "env")
    rc, doc, found = _launch_findings(tmp_path, python, clean_env(DOCTOR_ASCEND_ROOT=str(tmp_path)), None)
    (f,) = found
    assert f["status"] == "warn" and "no launch given" in f["message"]
    assert "CANN" in f["message"] and "torch-npu" in f["message"] and "vllm-ascend" in f["message"]
    assert "doctor check -- bash" in f["fix"]


def test_seed_image_holds_what_the_seed_launch_needs(tmp_path):
    python, _, _, env = image(tmp_path)
    rc, doc, found = _launch_findings(tmp_path, python, env, _script(tmp_path))
    assert [f["status"] for f in found] == ["pass"], found
    assert rc == 0 and not problems(doc, ("fail", "warn")), problems(doc, ("fail", "warn"))


def test_default_logger_needs_wandb_and_mlflow_needs_mlflow(tmp_path):
    """verl's default trainer.logger is ["console", "wandb"]; naming mlflow needs mlflow."""
    python, site = make_venv(tmp_path / "env")
    lay_stack(site, {k: v for k, v in SEED_STACK.items() if k != "wandb"})
    root = tmp_path / "ascend"
    lay_cann(root, "8.3.RC1")
    lay_driver(root, "25.3.rc1")
    env = clean_env(**sourced_env(root))
    unset = SEED_LAUNCH.replace("trainer.logger='[\"console\"]' ", "")
    rc, doc, found = _launch_findings(tmp_path, python, env, _script(tmp_path, unset))
    (f,) = [f for f in found if f["status"] == "fail"]
    assert f["title"] == "The launch needs wandb: not installed" and f["fix"].startswith("pip install wandb")
    mlflow = SEED_LAUNCH.replace("'[\"console\"]'", "'[\"console\",\"mlflow\"]'")
    rc, doc, found = _launch_findings(tmp_path, python, env, _script(tmp_path, mlflow))
    assert [f["title"] for f in found if f["status"] == "fail"] == ["The launch needs mlflow: not installed"]


def test_npu_is_picked_when_torch_npu_is_installed_and_trainer_device_unset(tmp_path):
    """verl picks the NPU when torch_npu is installed (its Ascend quick start, 2025/12/11)."""
    python, site = make_venv(tmp_path / "env")
    lay_stack(site, SEED_STACK)
    env = clean_env(DOCTOR_ASCEND_ROOT=str(tmp_path / "no-ascend"))
    unset = SEED_LAUNCH.replace(" trainer.device=npu", "")
    rc, doc, found = _launch_findings(tmp_path, python, env, _script(tmp_path, unset))
    titles = [f["title"] for f in found if f["status"] == "fail"]
    assert titles == ["The launch needs CANN: not installed", "The launch needs the NPU driver: not installed"]
    assert "torch_npu installed: verl picks the NPU" in found[0]["message"]
    # versions.cann_env refers the missing CANN to the launch's finding: one finding per fact.
    assert not [f for f in problems(doc) if f["id"] == "versions.cann_env"]


def _gpu_env(where: Path, torch: str, cuda: str | None, *dists: tuple[str, str]) -> Path:
    python, site = make_venv(where)
    lay_dist(site, "torch", torch, files={"version.py": torch_version_py(torch, cuda)})
    for dist, v in dists:
        lay_dist(site, dist, v)
    return python


def test_a_cuda_launch_with_a_cpu_torch_fails(tmp_path):
    launch = _script(tmp_path, "python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.name=vllm "
                               "trainer.logger=[console] trainer.device=cuda\n")
    env = clean_env(DOCTOR_ASCEND_ROOT=str(tmp_path))
    stack = (("vllm", "0.11.0"), ("verl", "0.7.0"), ("ray", "2.51.1"))
    python = _gpu_env(tmp_path / "cpu", "2.9.1+cpu", None, *stack)
    rc, doc, found = _launch_findings(tmp_path, python, env, launch)
    (f,) = found
    assert f["status"] == "fail" and "cpu build" in f["title"] and "download.pytorch.org/whl/cu" in f["fix"]
    # The same stack with a CUDA build of torch holds what the launch needs.
    python = _gpu_env(tmp_path / "cuda", "2.9.1+cu128", "12.8", *stack)
    rc, doc, found = _launch_findings(tmp_path, python, env, launch)
    assert [f["status"] for f in found] == ["pass"], found


def test_sglang_rollout_needs_sglang(tmp_path):
    python = _gpu_env(tmp_path / "env", "2.9.1+cu128", "12.8", ("verl", "0.7.0"), ("ray", "2.51.1"))
    launch = _script(tmp_path, "python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.name=sglang "
                               "trainer.logger=[console] trainer.device=cuda\n")
    rc, doc, found = _launch_findings(tmp_path, python, clean_env(DOCTOR_ASCEND_ROOT=str(tmp_path)), launch)
    assert [(f["title"], f["fix"]) for f in found] == [("The launch needs sglang: not installed", "pip install sglang")]
