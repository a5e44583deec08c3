"""An Ascend install laid out the way the CANN and HDK installers leave it, under a temp root:

    <root>/ascend-toolkit/<ver>/{<arch>-linux/ascend_toolkit_install.info, version.cfg, opp/,
                                  runtime/, compiler/}
    <root>/ascend-toolkit/latest -> <ver>        <root>/ascend-toolkit/set_env.sh
    <root>/driver/version.info                   <root>/firmware/version.info

File contents follow the samples in research/ascend.md 4.1/4.2 (from real installs).
"""
from __future__ import annotations

import platform
from pathlib import Path


def lay_cann(root: Path, version: str = "8.3.RC1") -> Path:
    tk = root / "ascend-toolkit"
    home = tk / version
    arch = platform.machine() or "x86_64"
    info = home / f"{arch}-linux"
    for d in (info, home / "opp" / "built-in", home / "runtime", home / "compiler"):
        d.mkdir(parents=True, exist_ok=True)
    (info / "ascend_toolkit_install.info").write_text(
        "package_name=Ascend-cann-toolkit\n"
        f"version={version}\n"
        "innerversion=V100R001C23SPC001B231\n"
        f"arch={arch}\nos=linux\npath={info}\n")
    (home / "version.cfg").write_text(
        "# version: 1.0\n" + "".join(f"{c}_running_version=[7.7.0.1.231:{version}]\n"
                                     for c in ("runtime", "compiler", "hccl", "opp", "toolkit")))
    latest = tk / "latest"
    if latest.is_symlink() or latest.exists():
        latest.unlink()
    latest.symlink_to(version)
    (tk / "set_env.sh").write_text(f"export ASCEND_HOME_PATH={latest}\nexport ASCEND_OPP_PATH={latest}/opp\n")
    return latest


def lay_driver(root: Path, version: str = "25.3.rc1", firmware: str = "7.7.0.1.231",
               fw_range: str = "[7.0.0,7.7.99]") -> Path:
    drv = root / "driver"
    drv.mkdir(parents=True, exist_ok=True)
    (drv / "version.info").write_text(
        f"Version={version}\nascendhal_version=7.35.23\nInnerversion=V100R001C23SPC001B220\n"
        f"compatible_version=[V100R001C21],[V100R001C23]\ncompatible_version_fw={fw_range}\n"
        f"package_version={version}\n")
    fw = root / "firmware"
    fw.mkdir(parents=True, exist_ok=True)
    (fw / "version.info").write_text(
        f"Version={firmware}\nfirmware_version=1.0\npackage_version={version}\n"
        "compatible_version_drv=[24.1,24.1.],[25.0,25.0.],[25.3,25.3.]\n")
    return drv


def sourced_env(root: Path) -> dict[str, str]:
    """What `source <root>/ascend-toolkit/set_env.sh` exports (the parts doctor reads)."""
    latest = root / "ascend-toolkit" / "latest"
    return {"ASCEND_HOME_PATH": str(latest), "ASCEND_TOOLKIT_HOME": str(latest),
            "ASCEND_OPP_PATH": str(latest / "opp"), "DOCTOR_ASCEND_ROOT": str(root)}
