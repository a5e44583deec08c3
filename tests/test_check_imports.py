"""imports: where `import X` resolves for the target interpreter versus the installed copy.
Each test builds the situation for real: a virtual environment with a package installed by pip,
and source trees on the path the way a launch directory, PYTHONPATH or a .pth puts them there."""
from __future__ import annotations

import time

import pytest

from tests.lab.pyenv import make_venv, pip_install, write_package
from tests.lab.run import check_inproc, check_json, clean_env, problems


@pytest.fixture(scope="module")
def venv_with_vllm(tmp_path_factory):
    """A real venv with a tiny `vllm` 0.11.0 installed by pip."""
    root = tmp_path_factory.mktemp("venv")
    python, site = make_venv(root / "env")
    pip_install(site, "vllm", "0.11.0", work=root)
    return python, site


def test_source_tree_in_launch_directory_shadows_installed_package(venv_with_vllm, tmp_path):
    python, site = venv_with_vllm
    launch_dir = tmp_path / "job"
    tree = write_package(launch_dir, "vllm", "0.0.0-src")
    rc, doc, found = check_json("--python", str(python), "--cwd", str(launch_dir), "--only", "imports")
    assert rc == 1
    (f,) = found["imports.shadowed"]
    assert (f["category"], f["status"]) == ("imports", "fail")
    assert str(tree) in f["message"] and str(site / "vllm") in f["message"]
    assert "launch directory" in f["message"]
    assert f"mv {tree}" in f["fix"]


def test_pythonpath_entry_shadows_installed_package(venv_with_vllm, tmp_path):
    python, site = venv_with_vllm
    mount = tmp_path / "mnt" / "src"
    tree = write_package(mount, "vllm", "0.0.0-mounted")
    launch_dir = tmp_path / "job"
    launch_dir.mkdir()
    rc, doc, found = check_inproc(python=python, cwd=launch_dir, only="imports",
                                  env=clean_env(PYTHONPATH=str(mount)))
    assert rc == 1
    (f,) = found["imports.shadowed"]
    assert f["status"] == "fail" and str(tree) in f["message"] and "PYTHONPATH" in f["message"]
    assert "PYTHONPATH" in f["fix"]


def test_installed_copy_wins_from_a_clean_directory(venv_with_vllm, tmp_path):
    python, _ = venv_with_vllm
    rc, doc, found = check_inproc(python=python, cwd=tmp_path, only="imports")
    assert rc == 0, problems(doc)
    assert [f["status"] for f in found["imports.shadowed"]] == ["pass"]


def test_second_copy_through_a_pth_file_is_reported(venv_with_vllm, tmp_path):
    python, site = venv_with_vllm
    extra = tmp_path / "extra"
    stray = write_package(extra, "vllm", "0.0.0-stray")
    pth = site / "zz_doctor_test_extra.pth"
    pth.write_text(str(extra) + "\n")
    try:
        rc, doc, found = check_inproc(python=python, cwd=tmp_path, only="imports")
    finally:
        pth.unlink()
    (f,) = found["imports.duplicates"]
    assert f["status"] == "fail" and str(stray) in f["message"] and str(pth) in f["message"]
    assert found["imports.shadowed"][0]["status"] == "pass"  # the installed copy still wins


def test_pth_import_line_that_puts_a_tree_first_shadows(venv_with_vllm, tmp_path):
    python, site = venv_with_vllm
    src = tmp_path / "mnt"
    tree = write_package(src, "vllm", "0.0.0-dev")
    pth = site / "zz_doctor_test_dev.pth"
    pth.write_text(f"import sys; sys.path.insert(0, {str(src)!r})\n")
    try:
        rc, doc, found = check_inproc(python=python, cwd=tmp_path, only="imports")
    finally:
        pth.unlink()
    (f,) = found["imports.shadowed"]
    assert f["status"] == "fail" and str(tree) in f["message"] and str(pth) in f["message"]
    assert str(pth) in f["fix"]


def test_directory_without_init_resolves_to_namespace_package(tmp_path):
    python, _ = make_venv(tmp_path / "env")  # vllm not installed at all
    checkout_parent = tmp_path / "work"
    write_package(checkout_parent / "vllm", "vllm", "0.0.0")  # a checkout root: work/vllm/vllm/...
    (checkout_parent / "vllm" / "setup.py").write_text("")
    rc, doc, found = check_inproc(python=python, cwd=checkout_parent, only="imports")
    assert rc == 1
    (f,) = found["imports.namespace"]
    assert f["status"] == "fail" and str(checkout_parent / "vllm") in f["message"]
    assert "unknown location" in f["message"]


def test_hanging_interpreter_becomes_a_finding_not_a_hang(tmp_path):
    hang = tmp_path / "python3"
    hang.write_text("#!/bin/sh\nsleep 30\n")
    hang.chmod(0o755)
    t0 = time.monotonic()
    rc, doc, found = check_json("--python", str(hang), "--timeout", "1", "--only", "imports,versions")
    assert time.monotonic() - t0 < 15
    assert rc == 1
    (f,) = found["imports.probe"]
    assert f["status"] == "fail" and "did not answer within 1 s" in f["message"]
    assert found["imports.shadowed"][0]["status"] == "skip"


def test_crashing_or_missing_interpreter_becomes_a_finding(tmp_path):
    crash = tmp_path / "python3"
    crash.write_text("#!/bin/sh\necho 'Fatal Python error: init_fs_encoding' >&2\nexit 1\n")
    crash.chmod(0o755)
    rc, _, found = check_json("--python", str(crash), "--only", "imports")
    assert rc == 1 and "init_fs_encoding" in found["imports.probe"][0]["message"]
    rc, _, found = check_inproc(python=tmp_path / "no-such-python", cwd=tmp_path, only="imports")
    assert rc == 1 and found["imports.probe"][0]["status"] == "fail"


def test_clean_environment_has_no_failure(tmp_path):
    """This project's own environment (torch, verl, ray, transformers installed) is clean."""
    import sys

    rc, doc, found = check_json("--python", sys.executable, "--cwd", str(tmp_path),
                                env=clean_env(DOCTOR_ASCEND_ROOT=str(tmp_path / "no-ascend")))
    assert rc == 0, problems(doc)
    assert not problems(doc)
    stack = found["versions.stack"][0]["evidence"]["installed"]
    assert stack["torch"] and stack["verl"]
