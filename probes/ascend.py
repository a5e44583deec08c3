"""Find the Ascend install the way `set_env.sh` publishes it, and read its version files.

CANN: `ASCEND_HOME_PATH`, then `ASCEND_TOOLKIT_HOME`, then `<root>/cann` (CANN >= 8.5) and
`<root>/ascend-toolkit/latest` (CANN <= 8.3), where root is `/usr/local/Ascend` (`~/Ascend` for a
non-root install; `DOCTOR_ASCEND_ROOT` names another prefix). The driver lives under
`<root>/driver` unless `ASCEND_DRIVER_PATH` says otherwise; the firmware beside it.
Everything here reads small text files: no import, no subprocess.
"""
from __future__ import annotations

import glob
import os
import re
from pathlib import Path

DEFAULT_ROOTS = ("/usr/local/Ascend", "~/Ascend")


def ascend_roots(env: dict[str, str]) -> list[Path]:
    if env.get("DOCTOR_ASCEND_ROOT"):
        return [Path(env["DOCTOR_ASCEND_ROOT"]).expanduser()]
    return [Path(r).expanduser() for r in DEFAULT_ROOTS]


def read_kv(path: Path) -> dict[str, str]:
    """`key=value` lines (version.info, *_install.info, version.cfg); '#' comments skipped."""
    out: dict[str, str] = {}
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out.setdefault(k.strip(), v.strip().strip('"'))
    return out


def cann_version(home: Path) -> tuple[str | None, str | None]:
    """(version, the file it came from) for a toolkit/CANN directory."""
    for info in sorted(glob.glob(str(home / "*-linux" / "ascend_toolkit_install.info"))) + sorted(
            glob.glob(str(home / "*-linux" / "ascend_*_install.info"))):
        v = read_kv(Path(info)).get("version")
        if v:
            return v, info
    cfg = home / "version.cfg"
    for key, value in read_kv(cfg).items():
        m = re.match(r"\[[^:\]]*:([^\]]+)\]", value)
        if key.startswith(("toolkit_", "runtime_")) and m:
            return m.group(1), str(cfg)
    info = home / "toolkit" / "version.info"
    v = read_kv(info).get("version_dir")
    if v:
        return v, str(info)
    # The directory name of a versioned install: .../ascend-toolkit/8.3.RC1 or .../cann-9.1.0.
    name = Path(os.path.realpath(home)).name
    m = re.fullmatch(r"(?:cann-)?(\d+\.\d+\.(?:RC\d+|\d+)\S*)", name, re.I)
    if m:
        return m.group(1), f"directory name {os.path.realpath(home)}"
    return None, None


def _set_env_script(home: Path, root: Path | None) -> str | None:
    real = Path(os.path.realpath(home))
    cands = [home.parent / "set_env.sh", real.parent / "set_env.sh", home / "set_env.sh"]
    if root is not None:
        cands += [root / "ascend-toolkit" / "set_env.sh", root / "cann" / "set_env.sh"]
    for c in cands:
        if c.is_file():
            return str(c)
    if root is not None:  # the conventional place, to name in a fix even when absent
        return str(root / ("cann" if (root / "cann").exists() else "ascend-toolkit") / "set_env.sh")
    return None


def find_cann(env: dict[str, str]) -> dict | None:
    cands: list[tuple[Path, str, Path | None]] = []
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        if env.get(var):
            cands.append((Path(env[var]).expanduser(), var, None))
    for root in ascend_roots(env):
        cands += [(root / "cann", "default location", root),
                  (root / "ascend-toolkit" / "latest", "default location", root)]
    for home, via, root in cands:
        if not home.is_dir():
            continue
        version, source = cann_version(home)
        if root is None:
            root = next((r for r in ascend_roots(env) if str(os.path.realpath(home)).startswith(
                str(os.path.realpath(r)))), Path(os.path.realpath(home)).parent.parent)
        return {"home": str(home), "real": os.path.realpath(home), "found_via": via,
                "version": version, "version_file": source, "set_env": _set_env_script(home, root),
                "opp": str(home / "opp") if (home / "opp").is_dir() else None}
    return None


def find_driver(env: dict[str, str]) -> dict | None:
    cands = [Path(env["ASCEND_DRIVER_PATH"])] if env.get("ASCEND_DRIVER_PATH") else []
    cands += [r / "driver" for r in ascend_roots(env)]
    installed = read_kv(Path("/etc/ascend_install.info")).get("Driver_Install_Path_Param")
    if installed and not env.get("DOCTOR_ASCEND_ROOT"):
        cands.append(Path(installed) / "driver")
    for d in cands:
        info = read_kv(d / "version.info")
        if not info:
            continue
        out = {"path": str(d), "version": info.get("package_version") or info.get("Version"),
               "innerversion": info.get("Innerversion"),
               "compatible_firmware": info.get("compatible_version_fw")}
        fw = read_kv(d.parent / "firmware" / "version.info")
        out["firmware"] = ({"path": str(d.parent / "firmware"), "version": fw.get("Version"),
                            "compatible_driver": fw.get("compatible_version_drv")} if fw else None)
        return out
    return None


def ascend_env(env: dict[str, str]) -> dict[str, str | None]:
    keys = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_OPP_PATH", "ASCEND_AICPU_PATH",
            "ASCEND_RT_VISIBLE_DEVICES", "ASCEND_DRIVER_PATH")
    return {k: env.get(k) for k in keys}


def gather(env: dict[str, str]) -> dict:
    return {"cann": find_cann(env), "driver": find_driver(env), "env": ascend_env(env)}
