"""The version matrix (`knowledge/versions.toml`, `knowledge/stack.toml`): where a version sits
in it, the known-good sets, and the install line that gets from what is installed to one of them.
No checks here: checks/versions*.py judge the stack with these."""
from __future__ import annotations

import re
from fnmatch import fnmatch

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from probes.facts import installed_dist, package, probe_of
from checks.model import Problem

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


def row_of(rows: list[dict], version: str | None, key="version") -> dict | None:
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
    row = row_of(rows, public(version))
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


def unlisted(table: str, have: dict, label: str, row: dict | None, how: str) -> list[Problem]:
    """A warning for a version the matrix does not list (`row`, `how`: where `placed` put it), with
    the documented set of its line."""
    version = have[table]
    if how == "listed":
        return []
    title = f"{label} {version} is {SITS[how]}"
    cannot = f"doctor cannot judge {label} {version} against {JUDGED_AGAINST[table]}"
    if row is None:
        return [Problem("warn", cannot, "", {"installed": have}, title)]
    target = row_set(table, row)
    which = "newest documented" if how in ("newer", "older") else "documented"
    names = _set_keys(target)
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


def _set_keys(target: dict) -> str:
    return ", ".join(f"{k} {target[k]}" for k in SET_KEYS if target.get(k))


def set_names(target: dict) -> str:
    return f"nearest known-good set ({target['source'].split(':')[0]}): {_set_keys(target)}"


def nearest_fix(have: dict) -> tuple[str, dict]:
    target = nearest_set(have)
    if target is None:
        return "", {}
    cmd = install_command(have, target)
    return set_names(target) + (f"\n{cmd}" if cmd else ""), target


def pairings(key: str, version: str) -> set[str]:
    """CANN versions that other documented sets pair with this package version."""
    return {s["cann"] for s in known_good_sets() if same_version(s.get(key), version)}


def set_env_path(cann: dict | None) -> str:
    return (cann or {}).get("set_env") or DEFAULT_SET_ENV
