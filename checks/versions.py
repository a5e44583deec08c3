"""Versions and builds of the stack, judged against the matrix in `knowledge/versions.toml` and
against what the launch needs (`knowledge/stack.toml`).

Everything is read without importing the heavy packages: distribution metadata through the probe,
torch's build from torch/version.py, CANN / driver / firmware from their version files. Each
mismatch names the nearest known-good set and the install command that gets there; `--deep` alone
imports the stack, in the target interpreter, and reads its failures with the explain engine.
"""
from __future__ import annotations

import re
from fnmatch import fnmatch
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from probes.facts import installed_dist, package, probe_of, winner_path
from checks.model import Problem
from checks.registry import check

CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # where the +cpu torch builds live
SET_KEYS = ("cann", "torch", "torch_npu", "vllm", "vllm_ascend")  # what a known-good set fixes
DEFAULT_SET_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"


def matrix() -> dict:
    from knowledge import load_toml

    return {**load_toml("versions.toml"), **load_toml("stack.toml")}


def stack_names() -> tuple[str, ...]:
    """The packages doctor reads, in knowledge/stack.toml's order, after python."""
    return ("python", *matrix()["packages"])


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
    for name in stack_names()[1:]:
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


def cite(source: str) -> str:
    """The short form of a row's source for a message (the full one is in the evidence)."""
    return source.split(";")[0].split(" (")[0].strip()


# --- where a version sits in the matrix ---------------------------------------------------------

def placed(table: str, version: str | None) -> tuple[dict | None, str]:
    """(the row to judge or suggest by, how `version` sits in `table`): "listed"; "newer" than every
    row (the suggestion is the newest row of the same major line, never one picked by distance);
    "older" than every row (the newest row); "unlisted" inside the range (the newest row of its
    major.minor line, else the newest row below it). Documented rows win over uncertain ones."""
    rows = matrix()[table]
    row = _row(rows, public(version))
    v = parse(version)
    if row is not None or v is None:
        return row, "listed" if row is not None else "unknown"
    sure = [r for r in rows if parse(r["version"]) and not r.get("uncertain")] or rows
    ranked = sorted(sure, key=lambda r: parse(r["version"]))
    line = [r for r in ranked if parse(r["version"]).release[:2] == v.release[:2]]
    if v > parse(ranked[-1]["version"]):
        same_major = [r for r in ranked if parse(r["version"]).major == v.major]
        return (same_major or ranked)[-1], "newer"
    if line:
        return line[-1], "unlisted"
    if v < parse(ranked[0]["version"]):
        return ranked[-1], "older"
    return [r for r in ranked if parse(r["version"]) < v][-1], "unlisted"


SITS = {"newer": "newer than the matrix", "older": "older than the matrix", "unlisted": "not in the matrix",
        "unknown": "not a version doctor can read"}


def row_set(table: str, row: dict) -> dict:
    """The known-good set a matrix row documents (what it fixes of SET_KEYS)."""
    if table == "torch_npu":
        return {"cann": row["cann"][0], "torch": row["torch"], "torch_npu": row["version"],
                "source": f"torch_npu {row['version']}: {row['source']}"}
    return {"cann": row["cann"][0], "torch": row["torch"], "torch_npu": row["torch_npu"][0],
            "vllm": row["vllm"][0], "vllm_ascend": row["version"], "python": row.get("python"),
            "source": f"vllm-ascend {row['version']}: {row['source']}"}


JUDGED_AGAINST = {"torch_npu": "torch and CANN", "vllm_ascend": "vllm, torch_npu and CANN"}


def unlisted(table: str, have: dict, label: str) -> list[Problem]:
    """A warning for a version the matrix does not list, with the documented set of its line."""
    version = have[table]
    row, how = placed(table, version)
    if how == "listed":
        return []
    title = f"{label} {version} is {SITS[how]}"
    cannot = f"doctor cannot judge {label} {version} against {JUDGED_AGAINST[table]}"
    if row is None:
        return [Problem("warn", cannot, "", {"installed": have}, title)]
    target = row_set(table, row)
    which = "newest documented" if how in ("newer", "older") else "documented"
    names = ", ".join(f"{k} {target[k]}" for k in SET_KEYS if target.get(k))
    msg = f"{cannot}; the {which} release of its line is {label} {row['version']} ({cite(row['source'])})."
    cmd = install_command(have, target)
    fix = (f"keep {label} {version} with the versions its release notes name, or use the {which} set: "
           f"{names}" + (f"\n{cmd}" if cmd else ""))
    return [Problem("warn", msg, fix, {"installed": have, "suggested": target, "sits": how}, title)]


# --- known-good sets and the way there --------------------------------------------------------

def known_good_sets() -> list[dict]:
    m = matrix()
    sets = []
    for r in m["verl"]:
        if "ascend" in r:
            s = dict(r["ascend"])
            s.update(verl=r["version"], source=f"verl {r['version']}: {r['source']}")
            sets.append(s)
    sets += [row_set("vllm_ascend", r) for r in m["vllm_ascend"]]
    return sets


def _newness(s: dict) -> tuple:
    return tuple(parse(s.get(k)) or Version("0") for k in ("torch_npu", "vllm_ascend", "verl"))


def nearest_set(have: dict) -> dict | None:
    """The known-good set that takes the fewest changes from what is installed. Changing CANN
    (root, driver pairing, every node) counts as two package changes; an installed verl counts
    against sets of another verl; ties go to the newest set."""
    def cost(s):
        differs = sum(1 for k in ("torch", "torch_npu", "vllm", "vllm_ascend")
                      if have.get(k) and not same_version(have[k], s[k]))
        verl = bool(have.get("verl") and s.get("verl") and release(have["verl"]) != s["verl"])
        return 2 * (not cann_in(have.get("cann"), [s["cann"]])) + differs + verl

    sets = sorted(known_good_sets(), key=_newness, reverse=True)  # min() keeps the first of a tie
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
    if not cann_in(have.get("cann"), [target["cann"]]):
        lines.insert(0, f"install CANN {target['cann']} (toolkit + kernels/ops), then source its set_env.sh")
    return "\n".join(lines)


def set_names(target: dict) -> str:
    names = ", ".join(f"{k} {target[k]}" for k in SET_KEYS if target.get(k))
    return f"nearest known-good set ({target['source'].split(':')[0]}): {names}"


def nearest_fix(have: dict) -> tuple[str, dict]:
    target = nearest_set(have)
    if target is None:
        return "", {}
    cmd = install_command(have, target)
    return set_names(target) + (f"\n{cmd}" if cmd else ""), target


def _pairings(key: str, version: str) -> set[str]:
    """CANN versions that other documented sets pair with this package version."""
    return {s["cann"] for s in known_good_sets() if same_version(s.get(key), version)}


# --- what the launch needs of the stack (knowledge/stack.toml [[need]]) -------------------------

def _verl_launch(launch) -> bool:
    return launch.is_verl or bool(launch.entry and Path(launch.entry).name == "main_ppo.py")


def _launch_config(launch) -> dict:
    """verl's defaults (its config snapshot) under the launch's overrides; {} when they do not compose."""
    try:
        from checks.verl_config import effective_config

        return effective_config(launch)
    except Exception:  # an override Hydra rejects is config.*'s finding; the launch's own values still count
        return {}


def _device(launch, cfg: dict, have: dict) -> tuple[str | None, str]:
    """The device verl will use and why doctor thinks so."""
    if launch.has("trainer.device"):
        dev = str(launch.get("trainer.device"))
        return dev, f"trainer.device={dev}"
    if have.get("torch_npu"):
        return "npu", "trainer.device unset and torch_npu installed: verl picks the NPU"
    dev = cfg.get("trainer.device", "cuda")
    return dev, f"trainer.device unset: verl's default {dev}"


def _loggers(value) -> list[str]:
    if isinstance(value, str):
        value = re.findall(r"[\w-]+", value)
    return [str(v) for v in value or []]


def launch_asks(ctx) -> dict | None:
    """What the launch chooses that decides its stack (None: not a verl launch, no device named).
    Computed once per context: several checks ask."""
    if "_launch_asks" in ctx.__dict__:
        return ctx.__dict__["_launch_asks"]
    launch, asks = ctx.launch, None
    verl = _verl_launch(launch) if launch is not None else False
    if launch is not None and (verl or launch.has("trainer.device")):
        cfg = _launch_config(launch) if verl else {}
        device, said = _device(launch, cfg, installed(ctx))
        rollout = launch.get("actor_rollout_ref.rollout.name", cfg.get("actor_rollout_ref.rollout.name"))
        asks = {"verl": verl, "device": device, "device_from": said,
                "rollout": None if rollout in (None, "???") else str(rollout),
                "logger": _loggers(launch.get("trainer.logger", cfg.get("trainer.logger"))),
                "multi_node": ctx.multi_node}
    ctx.__dict__["_launch_asks"] = asks
    return asks


def _holds(when: dict, asks: dict) -> bool:
    for key, want in when.items():
        got = asks.get(key)
        if not (want in got if isinstance(got, list) else got == want):
            return False
    return True


def needed(asks: dict) -> list[dict]:
    """The [[need]] entries of stack.toml that this launch's choices call for, one per part."""
    out: dict[str, dict] = {}
    for need in matrix()["need"]:
        if _holds(need["when"], asks):
            out.setdefault(need["part"], need)
    return list(out.values())


def _present(part: str, have: dict, ctx) -> bool:
    if part in ("cann", "driver"):
        return bool(have.get(part))
    return bool(have.get(part) or winner_path(package(probe_of(ctx), part).get("spec")))


def missing_parts(ctx) -> list[str]:
    """The parts the launch needs and the interpreter (or node) lacks."""
    asks = launch_asks(ctx)
    have = installed(ctx)
    return [n["part"] for n in needed(asks) if not _present(n["part"], have, ctx)] if asks else []


def verl_for(target: dict | None) -> str:
    """The verl release that goes with a known-good set: the one documenting it, else the newest
    whose vllm bound admits the set's vllm, else the newest."""
    rows = sorted(matrix()["verl"], key=lambda r: parse(r["version"]), reverse=True)
    target = target or {}
    for r in rows:
        if r.get("ascend", {}).get("vllm_ascend") == target.get("vllm_ascend") and target.get("vllm_ascend"):
            return r["version"]
    fits = [r for r in rows if target.get("vllm") and in_spec(target["vllm"], r["vllm"])]
    return (fits or rows)[0]["version"]


def launch_target(have: dict) -> dict | None:
    """The set a missing part's install line comes from: the nearest known-good set, or, beside a
    torch_npu the matrix does not list, the documented set of that torch_npu's line."""
    if have.get("torch_npu"):
        row, how = placed("torch_npu", have["torch_npu"])
        if row is not None and how != "listed":
            return row_set("torch_npu", row)
    return nearest_set(have)


def _pattern(p: str) -> str:
    """A driver pattern as a person writes it: 25.2.* -> 25.2.x, 25.3.RC1* -> 25.3.RC1."""
    return re.sub(r"\.\*$", ".x", p).rstrip("*") or "see its release notes"


def part_install(part: str, need: dict, target: dict | None, asks: dict) -> str:
    """The install line of one missing part: from the nearest known-good set where it has one."""
    if need.get("install"):
        return need["install"]
    t, npu = target or {}, asks.get("device") == "npu"
    if part == "cann":
        return f"install CANN {t.get('cann')} (toolkit + kernels/ops), then source its set_env.sh"
    if part == "driver":
        row = _row(matrix()["cann"], t.get("cann")) or {"driver": ["*"]}
        return (f"install the Ascend HDK driver and firmware paired with CANN {t.get('cann')} "
                f"({_pattern(row['driver'][0])}), then check: npu-smi info")
    if part == "torch" and need.get("build") == "cuda":
        return "pip install torch  (a CUDA build, from the index for your CUDA: https://download.pytorch.org/whl/)"
    if part == "verl":
        return f"pip install verl=={verl_for(t if npu else None)}"
    if part == "vllm" and not npu:
        bound = (verl_row(verl_for(None)) or {}).get("vllm", "")
        return f"pip install 'vllm{bound}'"
    pip = matrix()["pip_names"].get(part, part)
    prefix = "VLLM_TARGET_DEVICE=empty " if part == "vllm" else ""  # vllm-ascend brings the NPU platform
    if t.get(part):
        return f"{prefix}pip install {pip}=={t[part]}"
    return f"{prefix}pip install {pip}  (no documented set has your torch_npu: the release made for it)"


def npu_set(part: str, asks: dict, target: dict | None) -> bool:
    """Does the part's install line come from an NPU known-good set?"""
    return bool(target) and asks.get("device") == "npu" and (part == "driver" or bool(target.get(part)))


def _cuda_build(ctx, have: dict, need: dict) -> list[Problem]:
    """torch is there, but not the build the device needs."""
    build = probe_of(ctx).get("torch_build") or {}
    if not have.get("torch") or not need.get("build") or build.get("kind") in (None, need["build"]):
        return []
    return [Problem("fail",
                    f"torch {have['torch']} is a {build['kind']} build; {need['why']} ({cite(need['source'])}).",
                    f"pip install torch=={release(have['torch'])} --index-url https://download.pytorch.org/whl/cu128  "
                    "(the cuXXX index of your CUDA)", {"torch_build": build},
                    f"The launch runs on cuda, but torch {have['torch']} is a {build['kind']} build")]


def _no_launch(ctx, have: dict) -> Problem:
    absent = [n.replace("_", "-") for n in ("torch", "torch_npu", "vllm", "vllm_ascend", "verl", "ray")
              if not have.get(n)]
    msg = ("no launch given, so doctor cannot tell which device, rollout engine, logger and node count "
           "the job needs; not judged: whether it needs CANN and the NPU driver on this node"
           + (f", or {', '.join(absent)} in {ctx.python}" if absent else ""))
    fix = "give the launch: doctor check -- bash run_grpo.sh"
    if have.get("torch"):
        return Problem("skip", msg, fix, {"installed": have})
    return Problem("warn", msg + " (it has no torch at all)", fix, {"installed": have},
                   "torch is not installed and no launch says what the job needs")


def _missing(ctx, need: dict, asks: dict, target: dict | None) -> Problem:
    part = need["part"]
    label = {"cann": "CANN", "driver": "the NPU driver"}.get(part, part.replace("_", "-"))
    on = f" (the launch runs on {asks['device']}: {asks['device_from']})" if "device" in need["when"] else ""
    where = {"cann": "this node has no CANN toolkit (ASCEND_HOME_PATH, /usr/local/Ascend)",
             "driver": "this node has no NPU driver (/usr/local/Ascend/driver/version.info)"}.get(
        part, f"{ctx.python} has no {label}")
    fix = part_install(part, need, target, asks)
    if npu_set(part, asks, target):
        fix += f"\n({set_names(target)})"
    return Problem("fail", f"{need['why']} ({cite(need['source'])}){on}; {where}.", fix,
                   {"part": part, "asks": asks, "nearest": target}, f"The launch needs {label}: not installed")


@check("versions.launch_stack", "versions", "The stack holds what the launch needs", needs=("probe",), scope="node")
def launch_stack(ctx):
    """What it checks: every part of the stack the launch's choices call for is installed: the
    device's (npu: torch, torch_npu, CANN and the driver; cuda: a CUDA build of torch), the rollout
    engine's (vllm, plus vllm-ascend on NPU; sglang), verl itself, Ray (verl and multi-node jobs)
    and each logger's package (wandb, mlflow, ...). The table is knowledge/stack.toml [[need]].
    How the job fails without it: the first import of the missing part, minutes in: ModuleNotFoundError
    in a Ray worker, libhccl.so not found, "Failed to infer device type", or wandb missing after the
    model has loaded.
    Fix: the install line of each missing part, from the nearest known-good set of
    knowledge/versions.toml where the part belongs to one.
    After the fact: python-module-not-found, python-entry-module-missing, verl-vllm-not-installed,
    npu-libhccl-missing, vllm-platform-not-detected, torch-distributed-backend-missing
    """
    have = installed(ctx)
    if ctx.launch is None:
        return [_no_launch(ctx, have)]
    asks = launch_asks(ctx)
    if asks is None:
        return [Problem("skip", "the launch is not verl's entry point and names no trainer.device")]
    target = launch_target(have)
    out = []
    for need in needed(asks):
        if _present(need["part"], have, ctx):
            out += _cuda_build(ctx, have, need)
        else:
            out.append(_missing(ctx, need, asks, target))
    return out


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
    documented = set(row["cann"]) | _pairings("torch_npu", have["torch_npu"])
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
    have = installed(ctx)
    if not have.get("torch_npu"):
        return [Problem("skip", "torch_npu is not installed")]
    row, how = placed("torch_npu", have["torch_npu"])
    if how != "listed":
        return unlisted("torch_npu", have, "torch_npu")
    fix, target = nearest_fix(have)
    ev = {"installed": have, "row": row, "nearest": target}
    return (_torch_npu_torch(ctx, have, row, fix, ev) + _torch_npu_cann(have, row, fix, ev)
            + _python_fits(have, row, f"torch_npu {have['torch_npu']}", ev))


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
    have = installed(ctx)
    if not have.get("vllm_ascend"):
        return [Problem("skip", "vllm-ascend is not installed")]
    row, how = placed("vllm_ascend", have["vllm_ascend"])
    if how != "listed":
        return unlisted("vllm_ascend", have, "vllm-ascend")
    fix, target = nearest_fix(have)
    ev = {"installed": have, "row": row, "nearest": target}
    return (_va_vllm(have, row, fix, ev) + _va_torch_npu(have, row, ev) + _va_cann(have, row, fix, ev)
            + _python_fits(have, row, f"vllm-ascend {row['version']}", ev))


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


def _set_env(cann: dict | None) -> str:
    return (cann or {}).get("set_env") or DEFAULT_SET_ENV


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
            f"source {_set_env(cann)}", {"cann": cann, "env": env},
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
    return _row(matrix()["cann"], version) or next(
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


# --- --deep: does the stack actually import, and do a device op and a collective work? -------

DEEP_SCRIPT = r"""
import json, sys, time, traceback
want = json.loads(sys.argv[1])
out = {}

def innermost(exc):
    # the first link of the chain: what `raise ... from` and "During handling" point back to
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        nxt = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if nxt is None:
            break
        exc = nxt
    return exc

def line(exc):
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:400]}"

def attempt(name, fn):
    t0 = time.perf_counter()
    try:
        out[name] = {"ok": True, "detail": fn()}
    except BaseException as exc:  # an import can raise anything, SystemExit included
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        out[name] = {"ok": False, "error": line(exc), "innermost": line(innermost(exc)),
                     "traceback": text[-20000:]}
    out[name]["seconds"] = round(time.perf_counter() - t0, 2)

attempt("torch", lambda: __import__("torch").__version__)
for mod in want["modules"] if out["torch"]["ok"] else ():  # after a failed torch, a retry fails anew
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

# Errors whose cause is the environment of CANN, not the package (Ascend/pytorch
# torch_npu/_init/core/module_loader.py _check_npu_import; its FAQ on libhccl.so).
_ENV_ERRORS = ("libhccl.so", "libascendcl.so", "libatb.so", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH")
_WHAT = {"device_op": "A tiny device op failed", "gloo_all_reduce": "A one-process Gloo all-reduce failed"}


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


def _loads_installed(ctx, name: str) -> bool:
    """`import name` resolves to the files of its installed distribution (nothing shadows it)."""
    pkg = package(probe_of(ctx), name)
    dist = installed_dist(pkg) or {}
    return bool(dist.get("files_at")) and dist["files_at"] == winner_path(pkg.get("spec"))


def explained(ctx, name: str, result: dict):
    """The explain engine's root cause of one failure, read from its whole exception chain (the
    chain's first link is printed first, so a real cause outranks the RuntimeError built on it).
    A rule about a shadowing copy is dropped when the probe saw the installed copy load: Python's
    "(most likely due to a circular import)" is then a broken install, not a shadow."""
    from matching.explain import explain_text

    text = result.get("traceback") or result.get("error") or ""
    found = [e for e in explain_text(text) if not e.subsumed_by
             and not (e.category == "imports" and _loads_installed(ctx, name))]
    found.sort(key=lambda e: e.consequence)  # a consequence only when nothing names the cause
    return found[0] if found else None


def _cann_line(ctx, have: dict) -> str:
    """The concrete CANN step: source the one installed, else install the one torch_npu's line names."""
    cann = (ctx.get_facts().get("ascend") or {}).get("cann")
    if cann:
        return f"source {_set_env(cann)}  (CANN {cann.get('version') or ''} is installed; its environment is not set)"
    row, how = placed("torch_npu", have.get("torch_npu")) if have.get("torch_npu") else (None, "")
    if row is None:
        return "install the CANN your torch_npu is built for (toolkit + kernels/ops), then source its set_env.sh"
    said = "" if how == "listed" else (f", the CANN of torch_npu {row['version']} (torch_npu {have['torch_npu']} "
                                        f"is {SITS[how]})")
    return f"install CANN {row['cann'][0]}{said} (toolkit + kernels/ops), then source its set_env.sh"


def deep_fix(ctx, name: str, result: dict, expl, have: dict) -> str:
    """A fix that follows the innermost cause: the explain rule's, with CANN made concrete."""
    cause = f"{result.get('innermost') or ''}\n{result.get('error') or ''}"
    if any(e in cause for e in _ENV_ERRORS):
        step = _cann_line(ctx, have)
        return f"{step}\n{expl.fix}" if expl else f"{step} (and /usr/local/Ascend/nnal/atb/set_env.sh for libatb)"
    if expl:
        return expl.fix
    if name in _WHAT:
        return "check the device (npu-smi info / nvidia-smi) and the loopback interface (ip link set lo up)"
    pip = matrix()["pip_names"].get(name, name)
    return f"pip install --force-reinstall --no-deps {pip}=={have.get(name) or '<version>'}"


def _deep_groups(ctx, result: dict) -> dict[str, list[tuple[str, dict, object]]]:
    """Failures grouped by cause (one finding per fact: `import torch` and `import torch_npu`
    failing on the same missing libhccl.so is one finding)."""
    groups: dict[str, list] = {}
    for name, r in result.items():
        if r.get("ok"):
            continue
        expl = explained(ctx, name, r)
        key = expl.rule if expl else (r.get("innermost") or r.get("error") or name)
        groups.setdefault(key, []).append((name, r, expl))
    return groups


def _deep_problem(ctx, group: list, have: dict) -> Problem:
    name, r, expl = group[0]
    names = [n for n, _, _ in group]
    imports = [f"`import {n}`" for n in names if n not in _WHAT]
    what = (" and ".join(imports) + (" fails" if len(imports) == 1 else " fail")) if imports else _WHAT[name]
    inner = r.get("innermost") or r.get("error")
    lines = [r["error"]] + ([f"innermost cause: {inner}"] if inner and inner != r["error"] else [])
    if expl:
        lines.append(expl.cause)
    return Problem("fail", "\n".join(lines), deep_fix(ctx, name, r, expl, have),
                   {"results": {n: res for n, res, _ in group}, "rule": expl.rule if expl else None},
                   f"{what}: {expl.title if expl else inner}")


@check("versions.deep", "versions", "The stack imports and runs (--deep)", needs=("deep",), scope="node")
def deep(ctx):
    """What it checks: the stack really imports in the target interpreter (torch, then torch_npu,
    vllm, vllm-ascend where installed), a tiny op runs on the device, and a one-process Gloo
    all-reduce works. A failure's whole exception chain goes through the explain engine, so the
    finding names the innermost cause and its fix follows that cause.
    How the job fails without it: the same import fails in every Ray worker a few minutes in.
    Fix: the explain rule's fix for the innermost cause (e.g. source or install CANN for a missing
    libhccl.so); a reinstall of the package only when nothing explains the failure.
    After the fact: npu-libhccl-missing, npu-libatb-missing, torch-npu-autoload-failed,
    npu-torch-npu-symbol-mismatch, npu-set-device-failed
    """
    have = installed(ctx)
    modules = [m for m in ("torch_npu", "vllm", "vllm_ascend") if have.get(m)]
    result = deep_probe(ctx, modules)
    if "error" in result:
        return [Problem("fail", result["error"],
                        f"run it by hand to see the traceback: {ctx.python} -c 'import torch'", result,
                        "Importing the stack failed")]
    out = [_deep_problem(ctx, g, have) for g in _deep_groups(ctx, result).values()]
    if not out:
        done = ", ".join(f"{k} ({v['seconds']} s)" for k, v in result.items())
        out.append(Problem("pass", done, evidence={"results": result}))
    return out
