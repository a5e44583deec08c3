"""Versions and builds of the stack, judged against the matrix in `knowledge/versions.toml`.

Everything is read without importing the heavy packages: distribution metadata through the probe,
torch's build from torch/version.py, CANN / driver / firmware from their version files. Each
mismatch names the nearest known-good set and the install command that gets there.
"""
from __future__ import annotations

import re
from fnmatch import fnmatch
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from probes.facts import installed_dist, package, probe_of
from checks.model import Finding
from checks.registry import check

CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # where the +cpu torch builds live
STACK = ("python", "torch", "torch_npu", "vllm", "vllm_ascend", "verl", "transformers", "ray",
         "flash_attn")


def matrix() -> dict:
    from knowledge import load_toml

    return {**load_toml("versions.toml"), **load_toml("stack.toml")}


def _finding(ctx, id, status, title, message="", fix="", evidence=None) -> Finding:
    return Finding(id, "versions", status, title, message, fix, evidence or {}, ctx.node)


def parse(v: str | None) -> Version | None:
    try:
        return Version(v) if v else None
    except InvalidVersion:
        return None


def public(v: str | None) -> str | None:
    """2.7.1.post1+git4c901a4 -> 2.7.1.post1; 0.11.0+empty -> 0.11.0."""
    p = parse(v)
    return p.public if p else v


def release(v: str | None) -> str | None:
    """2.7.1+cpu -> 2.7.1; 0.7.0.dev0 -> 0.7.0."""
    p = parse(v)
    return p.base_version if p else v


def same_version(a: str | None, b: str | None) -> bool:
    pa, pb = parse(a), parse(b)
    return bool(pa and pb and pa.public == pb.public) or (a is not None and a == b)


def in_spec(v: str | None, spec: str | None) -> bool | None:
    """None when either side cannot be judged."""
    pv = parse(v)  # local labels matter only when the specifier names one (==2.7.1+cpu)
    if pv is None or not spec:
        return None
    try:
        return SpecifierSet(spec).contains(pv, prereleases=True)
    except InvalidSpecifier:
        return None


def cann_in(cann: str | None, patterns) -> bool:
    return bool(cann) and any(fnmatch(cann.upper(), p.upper()) for p in patterns)


def cann_family(cann: str | None) -> str | None:
    m = re.match(r"(\d+\.\d+)", cann or "")
    return m.group(1) if m else None


def installed(ctx) -> dict[str, str | None]:
    """name -> version of what the target interpreter has (python, packages, CANN, driver)."""
    facts = ctx.get_facts()
    probe = probe_of(ctx)
    out: dict[str, str | None] = {"python": (probe.get("python") or {}).get("version")}
    for name in STACK[1:]:
        dist = installed_dist(package(probe, name))
        out[name] = dist.get("version") if dist else None
    if out.get("verl") is None and probe.get("verl_version_file"):
        out["verl"] = probe["verl_version_file"]  # a checkout run from source
    asc = facts.get("ascend") or {}
    out["cann"] = (asc.get("cann") or {}).get("version")
    out["driver"] = (asc.get("driver") or {}).get("version")
    return out


def _row(rows: list[dict], version: str | None, key="version") -> dict | None:
    return next((r for r in rows if same_version(r[key], version)), None) if version else None


def verl_row(version: str | None) -> dict | None:
    """The matrix row of a verl release; a dev/rc build is judged by its release's row, a newer
    verl by the newest row not above it."""
    v = parse(release(version))
    if v is None:
        return None
    rows = [r for r in matrix()["verl"] if parse(r["version"]) and parse(r["version"]) <= v]
    return max(rows, key=lambda r: parse(r["version"]), default=None)


# --- known-good sets and the way there --------------------------------------------------------

def known_good_sets() -> list[dict]:
    m = matrix()
    sets = []
    for r in m["verl"]:
        if "ascend" in r:
            s = dict(r["ascend"])
            s.update(verl=r["version"], source=f"verl {r['version']}: {r['source']}")
            sets.append(s)
    for r in m["vllm_ascend"]:
        sets.append({"cann": r["cann"][0], "torch": r["torch"], "torch_npu": r["torch_npu"][0],
                     "vllm": r["vllm"][0], "vllm_ascend": r["version"], "python": r["python"],
                     "source": f"vllm-ascend {r['version']}: {r['source']}"})
    return sets


def nearest_set(have: dict) -> dict | None:
    """The known-good set that takes the fewest changes from what is installed. Changing CANN
    (root, driver pairing, every node) counts as two package changes; ties go to the newest set."""
    def cost(s):
        differs = sum(1 for k in ("torch", "torch_npu", "vllm", "vllm_ascend")
                      if have.get(k) and not same_version(have[k], s[k]))
        return 2 * (not cann_in(have.get("cann"), [s["cann"]])) + differs

    sets = known_good_sets()  # newest first, as in the matrix
    return min(sets, key=cost) if sets else None


def install_command(have: dict, target: dict) -> str:
    pip = matrix()["pip_names"]
    pkgs = [f"{pip[k]}=={target[k]}" for k in ("torch", "torch_npu", "vllm_ascend")
            if target.get(k) and not same_version(have.get(k), target[k])]
    lines = []
    if target.get("vllm") and not same_version(have.get("vllm"), target["vllm"]):
        lines.append(f"VLLM_TARGET_DEVICE=empty pip install vllm=={target['vllm']}")
    if pkgs:
        lines.append("pip install " + " ".join(pkgs))
    if have.get("cann") and not cann_in(have["cann"], [target["cann"]]):
        lines.insert(0, f"install CANN {target['cann']} (toolkit + kernels/ops), then source its set_env.sh")
    return "\n".join(lines)


def nearest_fix(have: dict) -> tuple[str, dict]:
    target = nearest_set(have)
    if target is None:
        return "", {}
    names = ", ".join(f"{k} {target[k]}" for k in ("cann", "torch", "torch_npu", "vllm", "vllm_ascend"))
    cmd = install_command(have, target)
    return f"nearest known-good set ({target['source'].split(':')[0]}): {names}" + (
        f"\n{cmd}" if cmd else ""), target


def cite(source: str) -> str:
    """The short form of a row's source for a message (the full one is in the evidence)."""
    return source.split(";")[0].split(" (")[0].strip()


def _pairings(key: str, version: str) -> set[str]:
    """CANN versions that other documented sets pair with this package version."""
    out = set()
    for s in known_good_sets():
        if same_version(s.get(key), version):
            out.add(s["cann"])
    return out


# --- checks -----------------------------------------------------------------------------------

def _summary(have: dict, build: dict | None) -> str:
    parts = []
    for k in ("python", "cann", "driver") + STACK[1:]:
        if have.get(k):
            extra = f" ({build['kind']})" if k == "torch" and build else ""
            parts.append(f"{k.replace('_', '-')} {have[k]}{extra}")
    return ", ".join(parts)


@check("versions.stack", "versions", "Versions of the stack", needs=("probe",))
def stack(ctx):
    probe = probe_of(ctx)
    have = installed(ctx)
    return [_finding(ctx, "versions.stack", "pass", "Versions of the stack",
                     _summary(have, probe.get("torch_build")),
                     evidence={"installed": have, "torch_build": probe.get("torch_build"),
                               "ascend": ctx.get_facts().get("ascend")})]


@check("versions.torch_npu", "versions", "torch_npu matches torch, CANN and Python")
def torch_npu(ctx):
    have = installed(ctx)
    if not have.get("torch_npu"):
        return [_finding(ctx, "versions.torch_npu", "skip", "torch_npu matches torch, CANN and Python",
                         "torch_npu is not installed")]
    rows = matrix()["torch_npu"]
    row = _row(rows, public(have["torch_npu"]))
    out = []
    fix, target = nearest_fix(have)
    ev = {"installed": have, "row": row, "nearest": target}
    if row is None:
        return [_finding(ctx, "versions.torch_npu", "warn", f"torch_npu {have['torch_npu']} is not in the matrix",
                         "doctor cannot judge it against torch and CANN", fix, ev)]
    if have.get("torch") and release(have["torch"]) != row["torch"]:
        out.append(_finding(
            ctx, "versions.torch_npu", "fail", f"torch {have['torch']} does not match torch_npu {have['torch_npu']}",
            f"torch_npu {have['torch_npu']} is built for torch {row['torch']} ({cite(row['source'])}).",
            f"pip install torch=={row['torch']}  (or the torch_npu built for your torch)\n{fix}", ev))
    # torch_npu's wheel pins its torch (Requires-Dist: torch==2.7.1+cpu on x86): the no-import check.
    requires = (installed_dist(package(probe_of(ctx), "torch_npu")) or {}).get("requires", [])
    pins = [m.group(1).strip() for m in (re.match(r"torch\s*\(?([<>=!~][^;)]*)", r) for r in requires) if m]
    if pins and have.get("torch") and in_spec(have["torch"], pins[0]) is False and not out:
        out.append(_finding(ctx, "versions.torch_npu", "fail", f"torch_npu's metadata requires torch{pins[0]}",
                            f"installed torch is {have['torch']}", f"pip install 'torch{pins[0]}'"
                            + (f" --index-url {CPU_INDEX}" if "+cpu" in pins[0] else ""), ev))
    cann = have.get("cann")
    if cann:
        documented = set(row["cann"]) | _pairings("torch_npu", have["torch_npu"])
        if not cann_in(cann, documented):
            family = {cann_family(c) for c in documented}
            status = "warn" if cann_family(cann) in family else "fail"
            out.append(_finding(
                ctx, "versions.torch_npu", status,
                f"CANN {cann} does not match torch_npu {have['torch_npu']}",
                f"torch_npu {have['torch_npu']} is released for CANN {', '.join(sorted(documented))} "
                f"({cite(row['source'])}); CANN {cann} is installed"
                + (" (same CANN line: usually works, not documented)." if status == "warn" else
                   ". Mismatches surface later as undefined symbols or ACL errors at set_device."),
                fix or f"pip install torch_npu built for CANN {cann}", ev))
    fits = in_spec(have.get("python"), row.get("python"))
    if fits is False:
        out.append(_finding(ctx, "versions.torch_npu", "fail",
                            f"Python {have['python']} is outside torch_npu {have['torch_npu']}'s {row['python']}",
                            cite(row["source"]), f"use a Python {row['python']} interpreter", ev))
    return out


@check("versions.vllm_ascend", "versions", "vllm-ascend matches vllm, torch_npu, CANN and Python")
def vllm_ascend(ctx):
    title = "vllm-ascend matches vllm, torch_npu, CANN and Python"
    have = installed(ctx)
    if not have.get("vllm_ascend"):
        return [_finding(ctx, "versions.vllm_ascend", "skip", title, "vllm-ascend is not installed")]
    row = _row(matrix()["vllm_ascend"], public(have["vllm_ascend"]))
    fix, target = nearest_fix(have)
    ev = {"installed": have, "row": row, "nearest": target}
    if row is None:
        return [_finding(ctx, "versions.vllm_ascend", "warn",
                         f"vllm-ascend {have['vllm_ascend']} is not in the matrix", "", fix, ev)]
    out = []
    src = cite(row["source"])
    if not have.get("vllm"):
        out.append(_finding(ctx, "versions.vllm_ascend", "fail", "vllm-ascend is installed without vllm",
                            f"vllm-ascend {row['version']} is a plugin for vllm {row['vllm'][0]}",
                            f"VLLM_TARGET_DEVICE=empty pip install vllm=={row['vllm'][0]}", ev))
    elif not any(same_version(release(have["vllm"]), v) or same_version(have["vllm"], v) for v in row["vllm"]):
        out.append(_finding(
            ctx, "versions.vllm_ascend", "fail",
            f"vllm {have['vllm']} does not match vllm-ascend {have['vllm_ascend']}",
            f"vllm-ascend {row['version']} is released for vllm {' / '.join(row['vllm'])} ({src}).",
            f"VLLM_TARGET_DEVICE=empty pip install vllm=={row['vllm'][0]}\n{fix}", ev))
    if have.get("torch_npu") and not any(same_version(have["torch_npu"], t) for t in row["torch_npu"]):
        same_line = release(have["torch_npu"]) == row["torch"]
        out.append(_finding(
            ctx, "versions.vllm_ascend", "warn" if same_line else "fail",
            f"torch_npu {have['torch_npu']} does not match vllm-ascend {have['vllm_ascend']}",
            f"vllm-ascend {row['version']} is released with torch_npu {' / '.join(row['torch_npu'])} ({src}).",
            f"pip install torch=={row['torch']} torch-npu=={row['torch_npu'][0]}", ev))
    cann = have.get("cann")
    if cann and not cann_in(cann, row["cann"]):
        same_line = cann_family(cann) in {cann_family(c) for c in row["cann"]}
        out.append(_finding(
            ctx, "versions.vllm_ascend", "warn" if same_line else "fail",
            f"CANN {cann} does not match vllm-ascend {have['vllm_ascend']}",
            f"vllm-ascend {row['version']} is built and tested on CANN {', '.join(row['cann'])} ({src}).",
            fix, ev))
    if in_spec(have.get("python"), row.get("python")) is False:
        out.append(_finding(ctx, "versions.vllm_ascend", "fail",
                            f"Python {have['python']} is outside vllm-ascend {row['version']}'s {row['python']}",
                            src, f"use a Python {row['python']} interpreter", ev))
    return out


@check("versions.verl", "versions", "verl supports the vllm and transformers it finds")
def verl(ctx):
    title = "verl supports the vllm and transformers it finds"
    have = installed(ctx)
    if not have.get("verl"):
        return [_finding(ctx, "versions.verl", "skip", title, "verl is not installed")]
    row = verl_row(have["verl"])
    if row is None:
        return [_finding(ctx, "versions.verl", "warn", f"verl {have['verl']} is older than the matrix",
                         "doctor cannot judge it", "pip install 'verl>=0.7'", {"installed": have})]
    out = []
    ev = {"installed": have, "row": row}
    if have.get("vllm") and in_spec(have["vllm"], row["vllm"]) is False:
        fits = [r for r in matrix()["verl"] if in_spec(have["vllm"], r["vllm"])]
        fix = [f"pip install verl=={fits[-1]['version']}  (supports vllm {fits[-1]['vllm']})"] if fits else []
        fix.append(f"{'or ' if fits else ''}keep verl and install a vllm it supports: "
                   f"pip install 'vllm{row['vllm']}'")
        too = "old" if fits and parse(fits[-1]["version"]) > parse(row["version"]) else "new"
        out.append(_finding(
            ctx, "versions.verl", "fail", f"verl {have['verl']} is too {too} for vllm {have['vllm']}",
            f"verl {row['version']} supports vllm {row['vllm']} ({cite(row['source'])}).", "\n".join(fix), ev))
    if have.get("transformers") and in_spec(have["transformers"], row.get("transformers")) is False:
        out.append(_finding(
            ctx, "versions.verl", "fail",
            f"transformers {have['transformers']} is outside verl {row['version']}'s {row['transformers']}",
            cite(row["source"]), f"pip install 'transformers{row['transformers']}'", ev))
    asc = row.get("ascend")
    if asc and have.get("torch_npu") and in_spec(have.get("python"), asc.get("python")) is False:
        out.append(_finding(ctx, "versions.verl", "warn",
                            f"Python {have['python']} is outside verl {row['version']}'s Ascend {asc['python']}",
                            cite(row["source"]), f"use a Python {asc['python']} interpreter", ev))
    return out


def _marker_env(probe: dict) -> dict:
    py = (probe.get("python") or {})
    ver = py.get("version") or "3"
    return {"python_version": ".".join(ver.split(".")[:2]), "python_full_version": ver,
            "platform_machine": py.get("machine") or "", "sys_platform": "linux",
            "platform_system": "Linux", "os_name": "posix", "implementation_name": "cpython",
            "platform_python_implementation": py.get("implementation") or "CPython", "extra": ""}


@check("versions.requires", "versions", "The stack's own pins on each other hold")
def requires(ctx):
    """What each installed package's metadata demands of the others (vllm pins its torch, verl
    bounds transformers): `pip check`, for the stack only, from the probe's facts."""
    from packaging.requirements import InvalidRequirement, Requirement

    probe = probe_of(ctx)
    have = installed(ctx)
    pip = matrix()["pip_names"]
    by_pip = {v.replace("_", "-"): k for k, v in pip.items()}
    out = []
    for name in STACK[1:]:
        if name == "torch_npu":  # its torch pin is versions.torch_npu's finding
            continue
        dist = installed_dist(package(probe, name))
        for text in (dist or {}).get("requires", []):
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.marker is not None and not req.marker.evaluate(_marker_env(probe)):
                continue
            dep = by_pip.get(req.name.lower().replace("_", "-"))
            if not dep or not have.get(dep) or not str(req.specifier):
                continue
            if in_spec(have[dep], str(req.specifier)) is False:
                out.append(_finding(
                    ctx, "versions.requires", "fail",
                    f"{pip[name]} {have[name]} requires {req.name}{req.specifier}; {have[dep]} is installed",
                    f"from {dist['metadata']}/METADATA (Requires-Dist: {text})",
                    f"pip install '{req.name}{req.specifier}'  (or the {pip[name]} built for {req.name} {have[dep]})",
                    {"requirement": text, "installed": have[dep]}))
    return out


@check("versions.builds", "versions", "Builds fit the accelerator")
def builds(ctx):
    probe = probe_of(ctx)
    have = installed(ctx)
    build = probe.get("torch_build") or {}
    out = []
    if have.get("torch_npu") and build.get("kind") in ("cuda", "rocm"):
        out.append(_finding(
            ctx, "versions.builds", "fail", f"A {build['kind']} torch ({build.get('version')}) beside torch_npu",
            "torch_npu needs the CPU build of torch; with a CUDA build, `import torch_npu` fails with "
            "'Two accelerators cannot be used at the same time in PyTorch: npu and cuda'.",
            f"pip install torch=={release(have['torch'])} --index-url {CPU_INDEX}",
            {"torch_build": build}))
    platform = "npu" if have.get("torch_npu") else "gpu" if build.get("kind") == "cuda" else None
    for u in matrix().get("unsupported", []):
        if platform == u["platform"] and have.get(u["package"]):
            out.append(_finding(ctx, "versions.builds", "warn",
                                f"{u['package'].replace('_', '-')} {have[u['package']]} is installed on {platform.upper()}",
                                f"{u['why']} ({cite(u['source'])})", u["fix"]))
    return out


@check("versions.cann_env", "versions", "The CANN environment is set")
def cann_env(ctx):
    facts = ctx.get_facts()
    asc = facts.get("ascend") or {}
    cann, env = asc.get("cann"), asc.get("env") or {}
    have = installed(ctx)
    needs = bool(have.get("torch_npu") or have.get("vllm_ascend"))
    out = []
    home = env.get("ASCEND_HOME_PATH")
    if home and not Path(home).is_dir():
        out.append(_finding(ctx, "versions.cann_env", "fail", f"ASCEND_HOME_PATH={home} does not exist",
                            "torch_npu raises 'ASCEND_HOME_PATH : ... does not exist' at import.",
                            "source the set_env.sh of an installed CANN, e.g. "
                            "source /usr/local/Ascend/ascend-toolkit/set_env.sh", {"env": env}))
    if cann is None:
        if needs and not out:
            out.append(_finding(
                ctx, "versions.cann_env", "fail", "torch_npu is installed but no CANN toolkit was found",
                "looked at ASCEND_HOME_PATH, ASCEND_TOOLKIT_HOME, /usr/local/Ascend/{cann,ascend-toolkit/latest}",
                "install CANN (toolkit + kernels/ops) and source /usr/local/Ascend/ascend-toolkit/set_env.sh",
                {"env": env}))
        return out
    missing = [k for k in ("ASCEND_HOME_PATH", "ASCEND_OPP_PATH") if not env.get(k)]
    if missing:
        out.append(_finding(
            ctx, "versions.cann_env", "fail" if needs else "warn",
            f"CANN {cann.get('version') or ''} is installed but set_env.sh was not sourced".replace("  ", " "),
            f"{', '.join(missing)} unset while CANN is at {cann['home']}; torch_npu cannot find its "
            "libraries (libhccl.so / libascendcl.so: cannot open shared object file).",
            f"source {cann.get('set_env') or '/usr/local/Ascend/ascend-toolkit/set_env.sh'}",
            {"cann": cann, "env": env}))
    opp = env.get("ASCEND_OPP_PATH")
    if opp and not Path(opp).is_dir():
        out.append(_finding(ctx, "versions.cann_env", "fail", f"ASCEND_OPP_PATH={opp} does not exist",
                            "the operator package is missing or the variable is stale",
                            f"source {cann.get('set_env')}", {"env": env}))
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


@check("versions.driver", "versions", "NPU driver and firmware fit CANN")
def driver(ctx):
    asc = ctx.get_facts().get("ascend") or {}
    drv, cann = asc.get("driver"), asc.get("cann")
    if not drv:
        return [_finding(ctx, "versions.driver", "skip", "NPU driver and firmware fit CANN",
                         "no NPU driver found (/usr/local/Ascend/driver/version.info)")]
    out = []
    ver = drv.get("version") or ""
    row = _row(matrix()["cann"], (cann or {}).get("version")) if cann else None
    if row is None and cann and cann.get("version"):
        row = next((r for r in matrix()["cann"] if r["version"].upper() == cann["version"].upper()), None)
    if row and ver and not any(fnmatch(ver.upper(), p.upper()) for p in row["driver"]):
        out.append(_finding(
            ctx, "versions.driver", "warn", f"NPU driver {ver} is not listed for CANN {row['version']}",
            f"CANN {row['version']} is documented with drivers {', '.join(row['driver'])} ({cite(row['source'])}).",
            f"install the Ascend HDK driver/firmware paired with CANN {row['version']} "
            f"({row['driver'][0].rstrip('*')}), or check with: ascend-dmi -c", {"driver": drv, "cann": cann}))
    fw = drv.get("firmware") or {}
    if fw.get("version") and _in_list(fw["version"], drv.get("compatible_firmware")) is False:
        out.append(_finding(
            ctx, "versions.driver", "fail",
            f"Firmware {fw['version']} is outside the driver's range {drv['compatible_firmware']}",
            f"driver {ver} at {drv['path']} declares compatible_version_fw={drv['compatible_firmware']}",
            "upgrade the NPU firmware to the one shipped with this driver (Ascend HDK), then reboot",
            {"driver": drv}))
    return out


# --- --deep: does the stack actually import, and do a device op and a collective work? -------

DEEP_SCRIPT = r"""
import json, sys, time
want = json.loads(sys.argv[1])
out = {}

def attempt(name, fn):
    t0 = time.perf_counter()
    try:
        out[name] = {"ok": True, "detail": fn()}
    except BaseException as exc:  # an import can raise anything, SystemExit included
        msg = (str(exc).strip().splitlines() or [""])[0][:400]
        out[name] = {"ok": False, "error": f"{type(exc).__name__}: {msg}"}
    out[name]["seconds"] = round(time.perf_counter() - t0, 2)

attempt("torch", lambda: __import__("torch").__version__)
for mod in want["modules"]:
    attempt(mod, lambda mod=mod: getattr(__import__(mod), "__version__", "imported"))

def device_op():
    import torch
    if "torch_npu" in want["modules"]:
        return str(torch.ones(4).npu().sum().item())
    if torch.cuda.is_available():
        return str(torch.ones(4).cuda().sum().item())
    return "no accelerator: skipped"

def gloo():
    import socket, torch, torch.distributed as dist
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    t = torch.ones(2)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return str(t.tolist())

if out["torch"]["ok"]:
    attempt("device_op", device_op)
    attempt("gloo_all_reduce", gloo)
print(json.dumps(out))
"""

# Errors whose cause is the environment of CANN, not the package (CANN's set_env.sh publishes LD_LIBRARY_PATH and ASCEND_*).
_ENV_ERRORS = ("libhccl.so", "libascendcl.so", "libatb.so", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH")


def deep_probe(ctx, modules: list[str]) -> dict:
    import json
    import subprocess

    try:
        r = subprocess.run([ctx.python, "-c", DEEP_SCRIPT, json.dumps({"modules": modules})],
                           cwd=str(ctx.cwd), env=ctx.env, capture_output=True, text=True,
                           timeout=max(ctx.timeout, 10) * 6, start_new_session=True)
    except subprocess.TimeoutExpired:
        return {"error": f"importing the stack did not finish within {max(ctx.timeout, 10) * 6:g} s"}
    except OSError as exc:
        return {"error": f"cannot run {ctx.python}: {exc.strerror or exc}"}
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
        return {"error": f"the interpreter died while importing the stack: {tail[:300]}"}


@check("versions.deep", "versions", "The stack imports and runs (--deep)", needs=("deep",))
def deep(ctx):
    have = installed(ctx)
    modules = [m for m in ("torch_npu", "vllm", "vllm_ascend") if have.get(m)]
    result = deep_probe(ctx, modules)
    if "error" in result:
        return [_finding(ctx, "versions.deep", "fail", "Importing the stack failed", result["error"],
                         f"run it by hand to see the traceback: {ctx.python} -c 'import torch'", result)]
    out = []
    cann = (ctx.get_facts().get("ascend") or {}).get("cann") or {}
    for name, r in result.items():
        if r.get("ok"):
            continue
        if any(e in r["error"] for e in _ENV_ERRORS):
            fix = f"source {cann.get('set_env') or '/usr/local/Ascend/ascend-toolkit/set_env.sh'}" \
                  " (and /usr/local/Ascend/nnal/atb/set_env.sh for libatb)"
        elif name in ("device_op", "gloo_all_reduce"):
            fix = "check the device (npu-smi info / nvidia-smi) and the loopback interface (ip link set lo up)"
        else:
            pip = matrix()["pip_names"].get(name, name)
            fix = f"pip install --force-reinstall --no-deps {pip}=={have.get(name) or '<version>'}"
        what = {"device_op": "A tiny device op failed", "gloo_all_reduce": "A one-process Gloo all-reduce failed"}
        out.append(_finding(ctx, "versions.deep", "fail", what.get(name, f"`import {name}` fails"),
                            r["error"], fix, {"results": result}))
    if not out:
        done = ", ".join(f"{k} ({v['seconds']} s)" for k, v in result.items())
        out.append(_finding(ctx, "versions.deep", "pass", "The stack imports and runs (--deep)", done,
                            evidence={"results": result}))
    return out
