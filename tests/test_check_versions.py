"""versions: the stack judged against knowledge/versions.toml, read without importing anything.
Each test lays out a real interpreter whose site-packages holds the stack's dist-info (as pip
writes it) and an Ascend install tree found through ASCEND_HOME_PATH, like a real image."""
from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.lab.ascend import lay_cann
from tests.lab.pyenv import SEED_STACK, lay_dist, lay_stack, make_venv
from tests.lab.image import image
from tests.lab.run import check_inproc, clean_env, problems


_image = image


def _versions(python, env, tmp_path):
    return check_inproc(python=python, cwd=tmp_path, only="versions,imports", env=env)


def test_seed_article_image_is_a_known_good_set(tmp_path):
    """CANN 8.3.RC1, torch/torch_npu 2.7.1, vllm 0.11.0, vllm-ascend 0.11.0rc1, verl 0.7.0.dev0."""
    python, _, _, env = _image(tmp_path)
    script = tmp_path / "run_grpo.sh"  # launched the seed article's way
    script.write_text("export HCCL_SOCKET_IFNAME=eth6\nexport GLOO_SOCKET_IFNAME=eth6\n"
                      "export VLLM_ASCEND_ENABLE_NZ=0\npython -m verl.trainer.main_ppo "
                      "algorithm.adv_estimator=grpo actor_rollout_ref.rollout.name=vllm "
                      "trainer.n_gpus_per_node=8 trainer.nnodes=2 trainer.device=npu $@\n")
    rc, doc, found = check_inproc(python=python, cwd=tmp_path, only="versions,imports", env=env,
                                  launch=["bash", str(script)])
    assert rc == 0, problems(doc)
    assert not problems(doc, ("fail", "warn"))
    have = found["versions.stack"][0]["evidence"]["installed"]
    assert have["cann"] == "8.3.RC1" and have["torch_npu"] == "2.7.1" and have["vllm_ascend"] == "0.11.0rc1"
    for cid in ("versions.torch_npu", "versions.vllm_ascend", "versions.verl", "versions.cann_env",
                "versions.driver", "versions.launch_stack"):
        assert [f["status"] for f in found[cid]] == ["pass"], cid


def test_cann_that_does_not_match_torch_npu_fails_with_the_nearest_set(tmp_path):
    python, _, _, env = _image(tmp_path, cann="8.0.0", driver=None)
    rc, doc, found = _versions(python, env, tmp_path)
    assert rc == 1
    f = next(f for f in found["versions.torch_npu"] if "CANN" in f["title"])
    assert f["status"] == "fail" and "8.0.0" in f["title"] and "torch_npu 2.7.1" in f["title"]
    assert "8.3.RC1" in f["message"]
    # Every package belongs to the 8.3.RC1 set: the nearest set changes CANN only.
    assert "install CANN 8.3.RC1" in f["fix"] and "pip install" not in f["fix"]
    va = next(f for f in found["versions.vllm_ascend"] if "CANN" in f["title"])
    assert va["status"] == "fail"


def test_cann_of_the_same_line_is_a_warning(tmp_path):
    python, _, _, env = _image(tmp_path, cann="8.3.RC2", driver=None)
    rc, doc, found = _versions(python, env, tmp_path)
    f = next(f for f in found["versions.vllm_ascend"] if "CANN" in f["title"])
    assert f["status"] == "warn"


def test_torch_that_torch_npu_was_not_built_for_fails(tmp_path):
    stack = dict(SEED_STACK, torch="2.8.0+cpu")
    python, _, _, env = _image(tmp_path, stack=stack, driver=None)
    rc, doc, found = _versions(python, env, tmp_path)
    assert rc == 1
    f = found["versions.torch_npu"][0]
    assert f["status"] == "fail" and "torch 2.8.0+cpu" in f["title"] and "pip install torch==2.7.1" in f["fix"]


def test_cuda_torch_beside_torch_npu_fails(tmp_path):
    stack = dict(SEED_STACK, torch="2.7.1+cu121")
    python, _, _, env = _image(tmp_path, stack=stack, torch_cuda="12.1", driver=None)
    rc, doc, found = _versions(python, env, tmp_path)
    (f,) = found["versions.builds"]
    assert f["status"] == "fail" and "cuda" in f["title"]
    assert "download.pytorch.org/whl/cpu" in f["fix"]


def test_cann_installed_but_set_env_not_sourced(tmp_path):
    python, site = make_venv(tmp_path / "env")
    lay_stack(site, SEED_STACK)
    root = tmp_path / "ascend"
    lay_cann(root, "8.3.RC1")
    env = clean_env(DOCTOR_ASCEND_ROOT=str(root))  # installed at the default place, not sourced
    rc, doc, found = _versions(python, env, tmp_path)
    assert rc == 1
    (f,) = found["versions.cann_env"]
    assert f["status"] == "fail" and "ASCEND_HOME_PATH" in f["message"] and "ASCEND_OPP_PATH" in f["message"]
    assert f["fix"] == f"source {root}/ascend-toolkit/set_env.sh"


def test_verl_too_old_for_the_vllm_it_finds(tmp_path):
    python, site = make_venv(tmp_path / "env")
    for dist, v in (("verl", "0.6.1"), ("vllm", "0.12.0"), ("torch", "2.9.0")):
        lay_dist(site, dist, v)
    rc, doc, found = _versions(python, clean_env(DOCTOR_ASCEND_ROOT=str(tmp_path)), tmp_path)
    assert rc == 1
    (f,) = found["versions.verl"]
    assert f["status"] == "fail" and "too old" in f["title"] and "pip install verl==0.8.0" in f["fix"]


def test_firmware_outside_the_drivers_range_fails(tmp_path):
    python, _, root, env = _image(tmp_path, firmware="7.8.0.1.100", fw_range="[7.0.0,7.7.99]")
    rc, doc, found = _versions(python, env, tmp_path)
    f = next(f for f in found["versions.driver"] if f["status"] != "pass")
    assert f["status"] == "fail" and "7.8.0.1.100" in f["title"]


def test_every_matrix_row_has_a_source_and_parses():
    from knowledge import load_toml

    m = load_toml("versions.toml")
    for table in ("torch_npu", "vllm_ascend", "verl", "cann", "unsupported"):
        assert m[table], table
        for row in m[table]:
            assert row.get("source"), row
            if "version" in row and table != "cann":
                Version(row["version"])
            for key in ("python", "transformers"):
                if key in row:
                    SpecifierSet(row[key])
            if table == "verl":
                SpecifierSet(row["vllm"])
            if table == "vllm_ascend":
                for v in row["vllm"] + row["torch_npu"] + [row["torch"]]:
                    Version(v)


@pytest.mark.parametrize("row_index", [0, -1])
def test_documented_vllm_ascend_sets_pass_their_own_judgement(tmp_path, row_index):
    """Data and code agree: the newest and the oldest documented vllm-ascend sets (for this
    Python) laid out for real pass."""
    from knowledge import load_toml

    row = [r for r in load_toml("versions.toml")["vllm_ascend"]
           if SpecifierSet(r["python"]).contains("3.11")][row_index]
    stack = {"torch": f"{row['torch']}+cpu", "torch_npu": row["torch_npu"][0], "vllm": row["vllm"][0],
             "vllm-ascend": row["version"]}
    python, _, _, env = _image(tmp_path, stack=stack, cann=row["cann"][0], driver=None)
    rc, doc, found = _versions(python, env, tmp_path)
    assert not [f for f in problems(doc) if f["id"] in ("versions.vllm_ascend", "versions.torch_npu")], row


def test_nearest_set_keeps_cann_when_packages_are_what_is_off():
    from checks.matrix import install_command, nearest_set

    have = {"cann": "8.3.RC1", "torch": "2.5.1+cpu", "torch_npu": "2.5.1", "vllm": "0.11.0",
            "vllm_ascend": "0.11.0rc1"}
    target = nearest_set(have)
    assert (target["cann"], target["torch_npu"], target["vllm_ascend"]) == ("8.3.RC1", "2.7.1", "0.11.0rc1")
    assert install_command(have, target) == "pip install torch==2.7.1 torch-npu==2.7.1"


def test_deep_imports_the_stack_and_names_what_breaks(tmp_path):
    """--deep really imports: a torch_npu whose compiled extension is missing fails to import."""
    python, site = make_venv(tmp_path / "env")
    lay_dist(site, "torch", "2.7.1+cpu")
    lay_dist(site, "torch_npu", "2.7.1", files={"__init__.py": "from torch_npu import _C\n"})
    rc, doc, found = check_inproc(python=python, cwd=tmp_path, only="versions.deep", env=clean_env())
    assert found["versions.deep"][0]["status"] == "skip"  # not asked for
    rc, doc, found = check_inproc(python=python, cwd=tmp_path, only="versions.deep", env=clean_env(), deep=True)
    npu = next(f for f in found["versions.deep"] if "torch_npu" in f["title"])
    assert rc == 1 and npu["status"] == "fail" and "_C" in npu["message"]
    assert "pip install --force-reinstall --no-deps torch-npu==2.7.1" in npu["fix"]


def test_flash_attn_on_ascend_and_a_stale_ascend_home_path(tmp_path):
    python, site, root, env = _image(tmp_path, driver=None)
    lay_dist(site, "flash-attn", "2.8.3", import_name="flash_attn")
    env["ASCEND_HOME_PATH"] = str(tmp_path / "old-toolkit")  # a set_env.sh from an uninstalled CANN
    rc, doc, found = _versions(python, env, tmp_path)
    (fa,) = found["versions.builds"]
    assert fa["status"] == "warn" and "flash-attn 2.8.3" in fa["title"] and "pip uninstall" in fa["fix"]
    stale = next(f for f in found["versions.cann_env"] if "does not exist" in f["title"])
    assert stale["status"] == "fail" and "old-toolkit" in stale["title"]


def test_a_package_whose_own_pin_is_not_met(tmp_path):
    """vllm's wheel pins the torch it was built with; a different torch breaks its kernels."""
    python, site = make_venv(tmp_path / "env")
    lay_dist(site, "torch", "2.7.1")
    lay_dist(site, "vllm", "0.11.0", requires=["torch==2.8.0", "transformers>=4.56.0",
                                              "xformers==0.0.32; platform_system == 'Windows'"])
    lay_dist(site, "transformers", "4.57.1")
    rc, doc, found = _versions(python, clean_env(DOCTOR_ASCEND_ROOT=str(tmp_path)), tmp_path)
    (f,) = found["versions.requires"]
    assert rc == 1 and f["status"] == "fail" and "vllm 0.11.0 requires torch==2.8.0" in f["title"]
    assert f["fix"].startswith("pip install 'torch==2.8.0'")


def test_every_versions_check_has_its_page():
    """Each check's docstring is its page (doctor rules ID): four sections, and the explain rules
    it names after the fact exist in the catalog."""
    from checks.registry import all_checks
    from matching.catalog import rule_by_id

    checks = [c for c in all_checks() if c.category == "versions"]
    assert len(checks) >= 10
    for c in checks:
        doc = c.fn.__doc__ or ""
        heads = [h for h in ("What it checks:", "How the job fails without it:", "Fix:", "After the fact:")
                 if h in doc]
        assert len(heads) == 4, (c.id, heads)
        after = doc.split("After the fact:", 1)[1].split()
        ids = [w.strip(",") for w in after if w.strip(",") != "-"]
        assert all(rule_by_id(i) is not None for i in ids), (c.id, ids)


@pytest.mark.parametrize("table,version,sits,suggested", [
    ("torch_npu", "2.13.0", "newer", "2.12.0"),           # the newest documented release, not the nearest by cost
    ("torch_npu", "2.7.1.post11", "unlisted", "2.7.1.post8"),  # the newest documented one of its 2.7 line
    ("torch_npu", "2.7.1", "listed", "2.7.1"),
    ("vllm_ascend", "0.30.0", "newer", "0.25.1rc1"),
])
def test_where_a_version_sits_in_the_matrix(table, version, sits, suggested):
    from checks.matrix import placed

    row, how = placed(table, version)
    assert (how, row["version"]) == (sits, suggested)


def test_a_vllm_ascend_newer_than_the_matrix_is_said_to_be_newer(tmp_path):
    stack = dict(SEED_STACK, **{"vllm-ascend": "0.30.0"})
    python, _, _, env = _image(tmp_path, stack=stack, driver=None)
    rc, doc, found = _versions(python, env, tmp_path)
    (f,) = found["versions.vllm_ascend"]
    assert f["status"] == "warn" and f["title"] == "vllm-ascend 0.30.0 is newer than the matrix"
    assert "vllm_ascend 0.25.1rc1" in f["fix"] and "vllm, torch_npu and CANN" in f["message"]
