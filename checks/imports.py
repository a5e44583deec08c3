"""Where `import X` resolves for the target interpreter, launched from the launch directory, versus
where the installed distribution of X keeps its files.

A directory earlier on sys.path (the launch directory that `python -m` puts first, a PYTHONPATH
entry, a mounted source tree, a `.pth` line) silently wins over the installed wheel: the seed
article's "installed, yet import fails / symbols missing" (its section 5.2).
"""
from __future__ import annotations

import os

from probes.facts import installed_dist, probe_of, winner_path
from checks.model import Finding
from checks.registry import check


def _finding(ctx, id, status, title, message="", fix="", evidence=None) -> Finding:
    return Finding(id, "imports", status, title, message, fix, evidence or {}, ctx.node)


def _stack(probe: dict) -> list[tuple[str, dict]]:
    return [(name, pkg) for name, pkg in (probe.get("packages") or {}).items()]


def _how_to_remove(copy: dict, name: str, cwd) -> str:
    """The concrete way to take a winning copy off the path, by why it is on the path."""
    path, why = copy["path"], copy.get("why", "")
    parent = os.path.dirname(path)
    if why.startswith("PYTHONPATH"):
        return (f"drop {parent} from PYTHONPATH (export PYTHONPATH=...without it), or rename "
                f"{path}: mv {path} {path}.src")
    if why.startswith("added by "):
        pth = why[len("added by "):]
        return f"remove the line that adds {parent} from {pth}, or rename {path}: mv {path} {path}.src"
    if why.startswith(("launch directory", "directory of the script")):
        return (f"rename the source tree so it cannot shadow the package: mv {path} {path}.src "
                f"(or launch from another directory than {parent})")
    return f"rename it: mv {path} {path}.src"


@check("imports.probe", "imports", "The target interpreter answers", scope="node")
def probe_runs(ctx):
    """What it checks: that the interpreter which will run training (--python, else the one the launch
    names, else python3 on PATH) starts from the launch directory with the launch's environment, and
    answers doctor's probe (probes/target.py, one subprocess, bounded by --timeout): its executable,
    version and sys.path. Every imports and versions check reads this answer.

    How the job fails without it: the launch dies before verl runs a line: `python: command not
    found`, a venv whose base interpreter was removed, a sitecustomize or .pth that raises, or the
    wrong interpreter, which then says `No module named verl` (or `No module named 'vllm'`).

    Fix: make it start where the job starts: `cd <launch dir> && <python> -c 'import sys; print(sys.path)'`;
    point the launch (or --python) at the environment that has verl installed.

    After the fact: python-entry-module-missing, python-module-not-found"""
    probe = probe_of(ctx)
    if not probe.get("ok"):
        return [_finding(
            ctx, "imports.probe", "fail", "The target interpreter could not be probed",
            f"{ctx.python} (from {ctx.cwd}): {probe.get('error')}",
            f"check that it starts: cd {ctx.cwd} && {ctx.python} -c 'import sys; print(sys.path)'",
            {"python": ctx.python, "cwd": str(ctx.cwd)})]
    py = probe["python"]
    return [_finding(ctx, "imports.probe", "pass", "The target interpreter answers",
                     f"{py['executable']} (Python {py['version']}) from {probe.get('cwd')}",
                     evidence={"sys_path": probe.get("sys_path"), "seconds": probe.get("seconds")})]


@check("imports.shadowed", "imports", "Packages import from their installed copy", needs=("probe",), scope="node")
def shadowed(ctx):
    """What it checks: for each package of the stack (knowledge/stack.toml: torch, torch_npu, vllm,
    vllm_ascend, verl, transformers, ray, flash_attn), where `import X` resolves for the target
    interpreter started from the launch directory, against where the installed distribution keeps
    its files (its dist-info). A winner that is not the installed copy is the finding, with the
    sys.path entry that put it first (the launch directory, PYTHONPATH, a .pth line or an import hook).

    How the job fails without it: `python -m` puts the current directory first on sys.path
    (https://docs.python.org/3/using/cmdline.html#cmdoption-m), so a vllm/ or torch_npu/ source tree
    there is imported instead of the wheel, without its compiled parts: `ImportError: cannot import
    name ... from 'vllm' (.../vllm/__init__.py)`, `No module named 'vllm._C'` or `No module named
    'torch_npu._C'`: "installed, yet import fails", the seed article's section 5.2.

    Fix: take the copy off the path as the finding says: `mv vllm vllm.src`, drop the directory from
    PYTHONPATH or the .pth file that adds it, or launch from another directory. A source tree nobody
    installed: `pip install -e <checkout>` or `pip install <package>`.

    After the fact: python-shadowed-package-source-tree, python-shadowed-package-unknown-location,
    npu-torch-npu-source-shadow, python-installed-package-lacks-name"""
    out = []
    for name, pkg in _stack(probe_of(ctx)):
        spec = pkg.get("spec")
        win = winner_path(spec)
        dists = [d for d in pkg.get("dists") or [] if d.get("files_at")]
        if not win:
            continue
        if any(d["files_at"] == win for d in dists):
            continue
        entry = (spec.get("entry") or {})
        copy = next((c for c in pkg.get("copies") or [] if c["path"] == win),
                    {"path": win, "why": entry.get("why", "")})
        where = (f"sys.path[{entry['index']}] = {entry['path']} ({entry['why']})" if entry else
                 "an import hook (an editable install's finder, or code in sitecustomize / a .pth)")
        evidence = {"resolves_to": win, "sys_path_entry": entry, "copies": pkg.get("copies"),
                    "installed": pkg.get("dists")}
        if dists:
            inst = dists[0]
            out.append(_finding(
                ctx, "imports.shadowed", "fail", f"`import {name}` is shadowed by {win}",
                f"`import {name}` loads {win}, found first via {where}; the installed "
                f"{inst.get('name')} {inst.get('version')} at {inst['files_at']} is shadowed.",
                _how_to_remove(copy, name, ctx.cwd), evidence))
        else:
            out.append(_finding(
                ctx, "imports.shadowed", "warn", f"`import {name}` loads an uninstalled source tree",
                f"`import {name}` loads {win} via {where}, and no installed distribution owns it "
                "(no dist-info on the path): compiled parts and entry points may be missing.",
                f"install it (pip install -e {os.path.dirname(win)} for a checkout, or pip install "
                f"{name}) or rename the tree: mv {win} {win}.src", evidence))
    return out


@check("imports.namespace", "imports", "No package resolves to a bare directory", needs=("probe",), scope="node")
def namespace(ctx):
    """What it checks: that no package of the stack resolves to a bare directory, a namespace package
    with no __init__.py (PEP 420, https://peps.python.org/pep-0420/), and that resolving it does not
    raise (a broken .pth line or finder).

    How the job fails without it: an empty or half-copied vllm/ (or verl/) directory on the path
    makes `import vllm` succeed with `vllm.__file__` None, and the first `from vllm import LLM` fails
    with `ImportError: cannot import name 'LLM' from 'vllm' (unknown location)`.

    Fix: rename the directory so the installed copy is found (`mv vllm vllm.src`); where nothing is
    installed, `pip install <package>` first.

    After the fact: python-shadowed-package-unknown-location"""
    out = []
    for name, pkg in _stack(probe_of(ctx)):
        spec = pkg.get("spec") or {}
        if spec.get("error"):
            out.append(_finding(ctx, "imports.namespace", "fail", f"`import {name}` cannot be resolved",
                                spec["error"], "fix or remove the .pth / finder named in the error"))
            continue
        if not spec.get("namespace"):
            continue
        portions = spec.get("locations") or []
        dist = installed_dist(pkg)
        fix = (f"rename the directory so the installed copy is found: mv {portions[0]} {portions[0]}.src"
               if dist else f"install {name} (pip install {name}), and rename {portions[0]} if it is a checkout")
        out.append(_finding(
            ctx, "imports.namespace", "fail",
            f"`import {name}` resolves to a namespace package with no __init__.py",
            f"`import {name}` finds only directories without __init__.py: {', '.join(portions)}; "
            f"{name}.__file__ is None (\"unknown location\"), so `from {name} import ...` fails.",
            fix, {"portions": portions, "copies": pkg.get("copies"), "installed": pkg.get("dists")}))
    return out


@check("imports.duplicates", "imports", "One copy of each package on the path", needs=("probe",), scope="node")
def duplicates(ctx):
    """What it checks: that each package of the stack has one copy on the target interpreter's path:
    when the installed copy wins, no other directory of the same name further down sys.path, and
    no second set of distribution metadata (two dist-info of one package, e.g. from a `pip install
    --user` over a venv, or two versions in one site-packages).

    How the job fails without it: the job works from this directory and breaks from another, or on
    a node with another PYTHONPATH: Ray workers start with the environment of each node's `ray
    start`, so the driver and its workers can load different copies (a version mismatch inside one
    job: undefined symbols, `cannot import name`); pip reports the wrong version.

    Fix: keep one: `pip uninstall <package>` until none is left, then `pip install` it once; rename
    stray source trees (`mv DIR DIR.src`).

    After the fact: python-installed-package-lacks-name, npu-torch-npu-symbol-mismatch"""
    out = []
    for name, pkg in _stack(probe_of(ctx)):
        win = winner_path(pkg.get("spec"))
        dists = pkg.get("dists") or []
        if not win or not any(d.get("files_at") == win for d in dists):
            continue  # a shadowing copy is imports.shadowed's finding
        others = [c for c in pkg.get("copies") or []
                  if c["kind"] != "namespace portion" and c["path"] != win]
        versions = sorted({d.get("version") for d in dists if d.get("version")})
        if not others and len(dists) < 2:
            continue
        lines = [f"{c['path']} (sys.path[{c['index']}], {c['why']})" for c in others]
        if len(dists) > 1:
            lines += [f"{d.get('name')} {d.get('version')} metadata at {d.get('metadata')}" for d in dists]
        out.append(_finding(
            ctx, "imports.duplicates", "fail", f"More than one copy of {name} on the path",
            f"`import {name}` loads the installed {win}; also on the path: " + "; ".join(lines)
            + (f" (versions {', '.join(versions)})" if len(versions) > 1 else "")
            + ". A launch from another directory or with another PYTHONPATH can pick the other one.",
            f"keep one: pip uninstall {name} until one copy remains, then pip install it once; "
            "rename stray source trees (mv DIR DIR.src)",
            {"wins": win, "others": others, "installed": dists}))
    return out
