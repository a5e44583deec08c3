"""Versions and builds of the stack, judged against the matrix in `knowledge/versions.toml`.

Everything is read without importing the heavy packages: distribution metadata through the probe,
torch's build from torch/version.py, CANN / driver / firmware from their version files. Each
mismatch names the nearest known-good set and the install command that gets there. What the
launch needs of the stack is checks/versions_launch.py; `--deep` is checks/versions_deep.py.
"""
from __future__ import annotations

import re
from fnmatch import fnmatch
from pathlib import Path

from probes.facts import installed_dist, package, probe_of
from checks.matrix import (CPU_INDEX, DEFAULT_SET_ENV, pairings, row_of, set_env_path, cann_family, cann_in, cite, in_spec,
    installed, matrix, nearest_fix, parse, placed, release, same_version, stack_names, unlisted,
    verl_row)
from checks.model import Problem
from checks.registry import check
from checks.versions_launch import missing_parts


# --- the installed stack against the matrix -----------------------------------------------------

def _summary(have: dict, build: dict | None) -> str:
    parts = []
    for k in ("python", "cann", "driver") + stack_names()[1:]:
        if have.get(k):
            extra = f" ({build['kind']})" if k == "torch" and build else ""
            parts.append(f"{k.replace('_', '-')} {have[k]}{extra}")
    return ", ".join(parts)


@check("versions.stack", "versions", "Versions of the stack", needs=("probe",), scope="node")
def stack(ctx):
    """What it checks: nothing; it records what the target interpreter and node hold (Python,
    CANN, driver, torch and its build, torch_npu, vllm, vllm-ascend, verl, Ray, the loggers), read
    from distribution metadata and version files without importing anything.
    How the job fails without it: -
    Fix: -
    After the fact: -
    """
    probe = probe_of(ctx)
    have = installed(ctx)
    summary = _summary(have, probe.get("torch_build"))
    if not any(have.get(k) for k in stack_names()[1:]):
        summary = f"{summary}; none of the training stack is installed".lstrip("; ")
    return [Problem("pass", summary, evidence={"installed": have, "torch_build": probe.get("torch_build"),
                                                "ascend": ctx.get_facts().get("ascend")})]


def _torch_pin(ctx, have: dict) -> str | None:
    """torch_npu's wheel pins its torch (Requires-Dist: torch==2.7.1+cpu on x86)."""
    requires = (installed_dist(package(probe_of(ctx), "torch_npu")) or {}).get("requires", [])
    pins = [m.group(1).strip() for m in (re.match(r"torch\s*\(?([<>=!~][^;)]*)", r) for r in requires) if m]
    return pins[0] if pins else None


def _torch_npu_torch(ctx, have: dict, row: dict, fix: str, ev: dict) -> list[Problem]:
    if have.get("torch") and release(have["torch"]) != row["torch"]:
        return [Problem(
            "fail", f"torch_npu {have['torch_npu']} is built for torch {row['torch']} ({cite(row['source'])}).",
            f"pip install torch=={row['torch']}  (or the torch_npu built for your torch)\n{fix}", ev,
            f"torch {have['torch']} does not match torch_npu {have['torch_npu']}")]
    pin = _torch_pin(ctx, have)
    if pin and have.get("torch") and in_spec(have["torch"], pin) is False:
        return [Problem("fail", f"installed torch is {have['torch']}",
                        f"pip install 'torch{pin}'" + (f" --index-url {CPU_INDEX}" if "+cpu" in pin else ""), ev,
                        f"torch_npu's metadata requires torch{pin}")]
    return []


def _torch_npu_cann(have: dict, row: dict, fix: str, ev: dict) -> list[Problem]:
    cann = have.get("cann")
    documented = set(row["cann"]) | pairings("torch_npu", have["torch_npu"])
    if not cann or cann_in(cann, documented):
        return []
    status = "warn" if cann_family(cann) in {cann_family(c) for c in documented} else "fail"
    why = (" (same CANN line: usually works, not documented)." if status == "warn" else
           ". Mismatches surface later as undefined symbols or ACL errors at set_device.")
    return [Problem(status, f"torch_npu {have['torch_npu']} is released for CANN {', '.join(sorted(documented))} "
                            f"({cite(row['source'])}); CANN {cann} is installed{why}",
                    fix or f"pip install torch_npu built for CANN {cann}", ev,
                    f"CANN {cann} does not match torch_npu {have['torch_npu']}")]


def _python_fits(have: dict, row: dict, label: str, ev: dict) -> list[Problem]:
    if in_spec(have.get("python"), row.get("python")) is not False:
        return []
    return [Problem("fail", cite(row["source"]), f"use a Python {row['python']} interpreter", ev,
                    f"Python {have['python']} is outside {label}'s {row['python']}")]


def _against_row(ctx, table: str, label: str, judge) -> list[Problem]:
    """The installed `table` package judged by `judge(have, row, fix, evidence)` against its matrix
    row; not installed is a skip, a version the matrix does not list a warning (`unlisted`)."""
    have = installed(ctx)
    if not have.get(table):
        return [Problem("skip", f"{label} is not installed")]
    row, how = placed(table, have[table])
    if how != "listed":
        return unlisted(table, have, label, row, how)
    fix, target = nearest_fix(have)
    return judge(have, row, fix, {"installed": have, "row": row, "nearest": target})


@check("versions.torch_npu", "versions", "torch_npu matches torch, CANN and Python", scope="node")
def torch_npu(ctx):
    """What it checks: the installed torch_npu against its row in knowledge/versions.toml (from
    Ascend/pytorch COMPATIBILITY.en.md): the torch release it extends (and the torch pin in its own
    wheel metadata), the CANN it is built for, and its Python range. A version the matrix does not
    list is said to be newer, older or unlisted, with the documented set of its line.
    How the job fails without it: `import torch_npu` fails (undefined symbol in libtorch_npu.so),
    or it imports and the first NPU op fails with ACL errors at set_device.
    Fix: the torch / torch_npu / CANN of the nearest known-good set, as install lines.
    After the fact: npu-torch-npu-symbol-mismatch, torch-npu-autoload-failed, hccl-cann-version-mismatch,
    npu-set-precision-mode-failed
    """
    return _against_row(ctx, "torch_npu", "torch_npu", lambda have, row, fix, ev: (
        _torch_npu_torch(ctx, have, row, fix, ev) + _torch_npu_cann(have, row, fix, ev)
        + _python_fits(have, row, f"torch_npu {have['torch_npu']}", ev)))


def _va_vllm(have: dict, row: dict, fix: str, ev: dict) -> list[Problem]:
    src = cite(row["source"])
    if not have.get("vllm"):
        return [Problem("fail", f"vllm-ascend {row['version']} is a plugin for vllm {row['vllm'][0]}",
                        f"VLLM_TARGET_DEVICE=empty pip install vllm=={row['vllm'][0]}", ev,
                        "vllm-ascend is installed without vllm")]
    if any(same_version(release(have["vllm"]), v) or same_version(have["vllm"], v) for v in row["vllm"]):
        return []
    return [Problem("fail", f"vllm-ascend {row['version']} is released for vllm {' / '.join(row['vllm'])} ({src}).",
                    f"VLLM_TARGET_DEVICE=empty pip install vllm=={row['vllm'][0]}\n{fix}", ev,
                    f"vllm {have['vllm']} does not match vllm-ascend {have['vllm_ascend']}")]


def _va_torch_npu(have: dict, row: dict, ev: dict) -> list[Problem]:
    if not have.get("torch_npu") or any(same_version(have["torch_npu"], t) for t in row["torch_npu"]):
        return []
    same_line = release(have["torch_npu"]) == row["torch"]
    return [Problem("warn" if same_line else "fail",
                    f"vllm-ascend {row['version']} is released with torch_npu {' / '.join(row['torch_npu'])} "
                    f"({cite(row['source'])}).",
                    f"pip install torch=={row['torch']} torch-npu=={row['torch_npu'][0]}", ev,
                    f"torch_npu {have['torch_npu']} does not match vllm-ascend {have['vllm_ascend']}")]


def _va_cann(have: dict, row: dict, fix: str, ev: dict) -> list[Problem]:
    cann = have.get("cann")
    if not cann or cann_in(cann, row["cann"]):
        return []
    same_line = cann_family(cann) in {cann_family(c) for c in row["cann"]}
    return [Problem("warn" if same_line else "fail",
                    f"vllm-ascend {row['version']} is built and tested on CANN {', '.join(row['cann'])} "
                    f"({cite(row['source'])}).", fix, ev,
                    f"CANN {cann} does not match vllm-ascend {have['vllm_ascend']}")]


@check("versions.vllm_ascend", "versions", "vllm-ascend matches vllm, torch_npu, CANN and Python", scope="node")
def vllm_ascend(ctx):
    """What it checks: the installed vllm-ascend against its row in knowledge/versions.toml (from
    vllm-ascend's versioning policy): the vllm it plugs into, the torch_npu and CANN it is released
    with, and its Python range. An unlisted version is said to be newer, older or unlisted, with
    the documented set of its line.
    How the job fails without it: vLLM starts without the NPU platform ("Failed to infer device
    type"), or the rollout engine dies at start-up on a missing op or symbol.
    Fix: the vllm / torch_npu / CANN of the nearest known-good set, as install lines.
    After the fact: vllm-platform-not-detected, vllm-engine-core-init-failed, npu-nnal-symbol-mismatch,
    npu-libatb-missing
    """
    return _against_row(ctx, "vllm_ascend", "vllm-ascend", lambda have, row, fix, ev: (
        _va_vllm(have, row, fix, ev) + _va_torch_npu(have, row, ev) + _va_cann(have, row, fix, ev)
        + _python_fits(have, row, f"vllm-ascend {row['version']}", ev)))


def _verl_vllm(have: dict, row: dict, ev: dict) -> list[Problem]:
    if not have.get("vllm") or in_spec(have["vllm"], row["vllm"]) is not False:
        return []
    fits = [r for r in matrix()["verl"] if in_spec(have["vllm"], r["vllm"])]
    fix = [f"pip install verl=={fits[-1]['version']}  (supports vllm {fits[-1]['vllm']})"] if fits else []
    fix.append(f"{'or ' if fits else ''}keep verl and install a vllm it supports: pip install 'vllm{row['vllm']}'")
    too = "old" if fits and parse(fits[-1]["version"]) > parse(row["version"]) else "new"
    return [Problem("fail", f"verl {row['version']} supports vllm {row['vllm']} ({cite(row['source'])}).",
                    "\n".join(fix), ev, f"verl {have['verl']} is too {too} for vllm {have['vllm']}")]


@check("versions.verl", "versions", "verl supports the vllm and transformers it finds", scope="node")
def verl(ctx):
    """What it checks: the installed verl against its row in knowledge/versions.toml (its setup.py
    vllm bound, its transformers bound, the Python of its Ascend guide). A dev build is judged by
    its release's row, a newer verl by the newest row not above it.
    How the job fails without it: verl's rollout worker fails on an API vllm no longer has (or
    does not have yet), or a model class transformers moved.
    Fix: the verl release that supports the vllm found, or the vllm this verl supports.
    After the fact: verl-rollout-backend-unknown, verl-vllm-not-installed, python-installed-package-lacks-name
    """
    have = installed(ctx)
    if not have.get("verl"):
        return [Problem("skip", "verl is not installed")]
    row = verl_row(have["verl"])
    if row is None:
        return [Problem("warn", "doctor cannot judge it", "pip install 'verl>=0.7'", {"installed": have},
                        f"verl {have['verl']} is older than the matrix")]
    ev = {"installed": have, "row": row}
    out = _verl_vllm(have, row, ev)
    if have.get("transformers") and in_spec(have["transformers"], row.get("transformers")) is False:
        out.append(Problem("fail", cite(row["source"]), f"pip install 'transformers{row['transformers']}'", ev,
                           f"transformers {have['transformers']} is outside verl {row['version']}'s "
                           f"{row['transformers']}"))
    asc = row.get("ascend")
    if asc and have.get("torch_npu") and in_spec(have.get("python"), asc.get("python")) is False:
        out.append(Problem("warn", cite(row["source"]), f"use a Python {asc['python']} interpreter", ev,
                           f"Python {have['python']} is outside verl {row['version']}'s Ascend {asc['python']}"))
    return out


def _marker_env(probe: dict) -> dict:
    py = (probe.get("python") or {})
    ver = py.get("version") or "3"
    return {"python_version": ".".join(ver.split(".")[:2]), "python_full_version": ver,
            "platform_machine": py.get("machine") or "", "sys_platform": "linux",
            "platform_system": "Linux", "os_name": "posix", "implementation_name": "cpython",
            "platform_python_implementation": py.get("implementation") or "CPython", "extra": ""}


def _unmet(text: str, probe: dict, have: dict, by_pip: dict):
    """(the requirement, the stack package it names) when `text` is a pin the install breaks."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(text)
    except InvalidRequirement:
        return None
    if req.marker is not None and not req.marker.evaluate(_marker_env(probe)):
        return None
    dep = by_pip.get(req.name.lower().replace("_", "-"))
    if not dep or not have.get(dep) or not str(req.specifier):
        return None
    return (req, dep) if in_spec(have[dep], str(req.specifier)) is False else None


@check("versions.requires", "versions", "The stack's own pins on each other hold", scope="node")
def requires(ctx):
    """What it checks: what each installed package's metadata demands of the others (vllm pins its
    torch, verl bounds transformers): `pip check`, for the stack only, from the probe's facts.
    How the job fails without it: a compiled kernel built for another torch (undefined symbol at
    import), or an API the pinned version has and the installed one lacks.
    Fix: install the version the pin names, or the package built for what is installed.
    After the fact: npu-torch-npu-symbol-mismatch, python-installed-package-lacks-name
    """
    probe = probe_of(ctx)
    have = installed(ctx)
    pip = matrix()["pip_names"]
    by_pip = {v.replace("_", "-"): k for k, v in pip.items()}
    out = []
    for name in stack_names()[1:]:
        if name == "torch_npu":  # its torch pin is versions.torch_npu's finding
            continue
        dist = installed_dist(package(probe, name)) or {}
        for text in dist.get("requires", []):
            unmet = _unmet(text, probe, have, by_pip)
            if unmet:
                req, dep = unmet
                out.append(Problem(
                    "fail", f"from {dist['metadata']}/METADATA (Requires-Dist: {text})",
                    f"pip install '{req.name}{req.specifier}'  (or the {pip[name]} built for {req.name} {have[dep]})",
                    {"requirement": text, "installed": have[dep]},
                    f"{pip[name]} {have[name]} requires {req.name}{req.specifier}; {have[dep]} is installed"))
    return out


@check("versions.builds", "versions", "Builds fit the accelerator", scope="node")
def builds(ctx):
    """What it checks: torch's build (torch/version.py) fits the accelerator stack beside it (the
    CPU build with torch_npu), and no package is installed that does not work on the platform at
    all (flash-attn on Ascend; knowledge/versions.toml [[unsupported]]).
    How the job fails without it: `import torch_npu` fails with "Two accelerators cannot be used at
    the same time in PyTorch: npu and cuda"; flash-attn fails to import or shadows the NPU path.
    Fix: the CPU torch of the same release from the CPU index; uninstall what the platform lacks.
    After the fact: torch-npu-autoload-failed, verl-flash-attn-missing
    """
    probe = probe_of(ctx)
    have = installed(ctx)
    build = probe.get("torch_build") or {}
    out = []
    if have.get("torch_npu") and build.get("kind") in ("cuda", "rocm"):
        out.append(Problem(
            "fail", "torch_npu needs the CPU build of torch; with a CUDA build, `import torch_npu` fails with "
                    "'Two accelerators cannot be used at the same time in PyTorch: npu and cuda'.",
            f"pip install torch=={release(have['torch'])} --index-url {CPU_INDEX}", {"torch_build": build},
            f"A {build['kind']} torch ({build.get('version')}) beside torch_npu"))
    platform = "npu" if have.get("torch_npu") else "gpu" if build.get("kind") == "cuda" else None
    for u in matrix().get("unsupported", []):
        if platform == u["platform"] and have.get(u["package"]):
            out.append(Problem("warn", f"{u['why']} ({cite(u['source'])})", u["fix"], title=(
                f"{u['package'].replace('_', '-')} {have[u['package']]} is installed on {platform.upper()}")))
    return out


def _stale_dirs(env: dict, cann: dict | None) -> list[Problem]:
    out = []
    home, opp = env.get("ASCEND_HOME_PATH"), env.get("ASCEND_OPP_PATH")
    if home and not Path(home).is_dir():
        out.append(Problem("fail", "torch_npu raises 'ASCEND_HOME_PATH : ... does not exist' at import.",
                           f"source the set_env.sh of an installed CANN, e.g. source {DEFAULT_SET_ENV}",
                           {"env": env}, f"ASCEND_HOME_PATH={home} does not exist"))
    if cann and opp and not Path(opp).is_dir():
        out.append(Problem("fail", "the operator package is missing or the variable is stale",
                           f"source {cann.get('set_env')}", {"env": env}, f"ASCEND_OPP_PATH={opp} does not exist"))
    return out


@check("versions.cann_env", "versions", "The CANN environment is set", scope="node")
def cann_env(ctx):
    """What it checks: a CANN toolkit exists where torch_npu will look for it, and its set_env.sh
    has been sourced: ASCEND_HOME_PATH and ASCEND_OPP_PATH set, naming directories that exist.
    (CANN missing for a launch that needs it is versions.launch_stack's finding.)
    How the job fails without it: `import torch_npu` (and so `import torch`) fails with
    "libhccl.so: cannot open shared object file" or "ASCEND_HOME_PATH : ... does not exist".
    Fix: source the toolkit's set_env.sh in the launching shell and every node's `ray start`
    environment; install CANN where there is none.
    After the fact: npu-libhccl-missing, npu-libatb-missing, torch-npu-autoload-failed
    """
    asc = ctx.get_facts().get("ascend") or {}
    cann, env = asc.get("cann"), asc.get("env") or {}
    have = installed(ctx)
    needs = bool(have.get("torch_npu") or have.get("vllm_ascend"))
    out = _stale_dirs(env, cann)
    if cann is None:
        if needs and not out and "cann" not in missing_parts(ctx):
            out.append(Problem(
                "fail",
                "looked at ASCEND_HOME_PATH, ASCEND_TOOLKIT_HOME, /usr/local/Ascend/{cann,ascend-toolkit/latest}",
                f"install CANN (toolkit + kernels/ops) and source {DEFAULT_SET_ENV}", {"env": env},
                "torch_npu is installed but no CANN toolkit was found"))
        return out
    missing = [k for k in ("ASCEND_HOME_PATH", "ASCEND_OPP_PATH") if not env.get(k)]
    if missing:
        out.append(Problem(
            "fail" if needs else "warn",
            f"{', '.join(missing)} unset while CANN is at {cann['home']}; torch_npu cannot find its "
            "libraries (libhccl.so / libascendcl.so: cannot open shared object file).",
            f"source {set_env_path(cann)}", {"cann": cann, "env": env},
            f"CANN {cann.get('version') or ''} is installed but set_env.sh was not sourced".replace("  ", " ")))
    return out


def _in_list(version: str, text: str | None) -> bool | None:
    """Is `7.7.0.1.231` inside a list like `[7.0.0,7.7.99]` (a closed range)?"""
    if not text:
        return None
    m = re.fullmatch(r"\[([^,\]]+),([^\]]+)\]", text.strip())
    lo, hi, v = (parse(m.group(1)), parse(m.group(2)), parse(version)) if m else (None, None, None)
    if not (lo and hi and v):
        return None
    return lo <= v <= hi


def _cann_row(cann: dict | None) -> dict | None:
    version = (cann or {}).get("version")
    if not version:
        return None
    return row_of(matrix()["cann"], version) or next(
        (r for r in matrix()["cann"] if r["version"].upper() == version.upper()), None)


@check("versions.driver", "versions", "NPU driver and firmware fit CANN", scope="node")
def driver(ctx):
    """What it checks: the Ascend HDK driver (/usr/local/Ascend/driver/version.info) is one CANN's
    release notes list for the installed CANN (knowledge/versions.toml [[cann]]), and the firmware
    is inside the driver's compatible_version_fw range.
    How the job fails without it: device initialisation fails at set_device (ACL errors), or the
    NPUs are not visible at all.
    Fix: the HDK driver / firmware paired with the CANN in use; check with ascend-dmi -c.
    After the fact: npu-set-device-failed, npu-acl-call-failed, npu-socversion-mismatch
    """
    asc = ctx.get_facts().get("ascend") or {}
    drv, cann = asc.get("driver"), asc.get("cann")
    if not drv:
        return [Problem("skip", "no NPU driver found (/usr/local/Ascend/driver/version.info)")]
    out = []
    ver = drv.get("version") or ""
    row = _cann_row(cann)
    if row and ver and not any(fnmatch(ver.upper(), p.upper()) for p in row["driver"]):
        out.append(Problem(
            "warn",
            f"CANN {row['version']} is documented with drivers {', '.join(row['driver'])} ({cite(row['source'])}).",
            f"install the Ascend HDK driver/firmware paired with CANN {row['version']} "
            f"({row['driver'][0].rstrip('*')}), or check with: ascend-dmi -c", {"driver": drv, "cann": cann},
            f"NPU driver {ver} is not listed for CANN {row['version']}"))
    fw = drv.get("firmware") or {}
    if fw.get("version") and _in_list(fw["version"], drv.get("compatible_firmware")) is False:
        out.append(Problem(
            "fail", f"driver {ver} at {drv['path']} declares compatible_version_fw={drv['compatible_firmware']}",
            "upgrade the NPU firmware to the one shipped with this driver (Ascend HDK), then reboot",
            {"driver": drv}, f"Firmware {fw['version']} is outside the driver's range {drv['compatible_firmware']}"))
    return out
