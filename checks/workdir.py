"""The launch directory and the relative paths in the launch.

verl resolves data files, the model path, the reward file and the checkpoint directory from the
directory the job is started in, and `python -m verl...` imports from there first: the seed
article's "cd /verl before running the script" (its section 2.3).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from probes.facts import probe_of, winner_path
from checks.model import Finding
from checks.registry import check

HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def _finding(ctx, id, status, title, message="", fix="", evidence=None) -> Finding:
    return Finding(id, "workdir", status, title, message, fix, evidence or {}, ctx.node)


@check("workdir.paths", "workdir", "Paths in the launch exist from the launch directory",
       needs=("launch",), owns=("missing",), scope="node")
def paths(ctx):
    """What it checks: every path the launch names (data.train_files, data.val_files,
    actor_rollout_ref.model.path, critic.model.path, reward.custom_reward_function.path,
    custom_reward_function.path, trainer.default_local_dir), resolved from the launch directory as
    verl will resolve it: it exists (the reward file is a file), the checkpoint directory can be
    created; a relative model path shaped like a hub id (org/name) is a warning. For a missing
    relative path it names the directory the path does exist from.

    How the job fails without it: the same script started from another directory fails minutes in:
    `FileNotFoundError: Unable to find 'data/gsm8k/train.parquet'`, `... is not a local folder and
    is not a valid model identifier`; a hub-shaped path is downloaded on every node (offline nodes
    fail); an unwritable checkpoint directory fails at the first save.

    Fix: cd to the directory the finding names before launching (the seed article's "cd into verl
    first", section 2.3), or use absolute paths; a writable trainer.default_local_dir.

    After the fact: verl-data-file-not-found, verl-model-path-invalid, verl-reward-file-not-found"""
    out = []
    for item in ctx.get_facts().get("paths") or []:
        key, value, where = item["option"], item["value"], item["resolved"]
        if item["kind"] == "checkpoint":
            if not item.get("writable", True):
                out.append(_finding(ctx, "workdir.paths", "fail", f"{key} cannot be created",
                                    f"{where}: {item['writable_base']} is not writable",
                                    f"{key}=<a writable directory>", item))
            continue
        if item["exists"]:
            if item["kind"] == "reward" and item.get("is_dir"):
                out.append(_finding(ctx, "workdir.paths", "fail", f"{key} is a directory",
                                    f"{where} must be a Python file", f"{key}=<path to the .py file>", item))
            continue
        rel = f" from the launch directory {ctx.cwd}" if item["relative"] else ""
        item = {**item, "fact": f"missing:{os.path.abspath(where)}"}  # data.files sees it too
        found = item.get("found_from") or []
        if found:
            fix = f"cd {found[0]}  (where {value} exists) before launching, or use an absolute path: " \
                  f"{key}={found[0]}/{value}"
        else:
            fix = f"{key}=<absolute path>  (check the path, or copy the file to every node)"
        if item["kind"] == "model" and item["relative"] and HUB_ID.match(value):
            out.append(_finding(
                ctx, "workdir.paths", "warn", f"{key}={value} is not a local directory",
                f"{where} does not exist{rel}; verl will treat {value} as a Hugging Face hub id and "
                "download it on every node (offline nodes fail).",
                fix if found else f"{key}=<local model directory>", item))
            continue
        said = f"{value} resolves to {where}, which does not exist" if item["relative"] else \
            f"{where} does not exist on this node"
        out.append(_finding(ctx, "workdir.paths", "fail", f"{key}={value} does not exist{rel}",
                            said + (f"; it does exist from {', '.join(found)}" if found else ""), fix, item))
    return out


@check("workdir.source_trees", "workdir", "No source tree in the launch directory can shadow a package",
       needs=("launch",), scope="node")
def source_trees(ctx):
    """What it checks: package directories (with __init__.py) in the launch directory named like a
    package of the stack (verl/, vllm/, torch_npu/, ...) that do not win with this launch but would
    with `python -m ...` started there (imports.shadowed reports the ones that already win).

    How the job fails without it: the day the job is launched as `python -m verl.trainer.main_ppo`
    from this directory, `python -m` puts it first on sys.path
    (https://docs.python.org/3/using/cmdline.html#cmdoption-m) and the tree shadows the installed
    package: `ImportError: cannot import name ... (.../vllm/__init__.py)`, `No module named 'vllm._C'`.

    Fix: `mv vllm vllm.src` (rename the tree), or keep source checkouts out of the launch directory.

    After the fact: python-shadowed-package-source-tree, npu-torch-npu-source-shadow"""
    facts = ctx.get_facts()
    probe = probe_of(ctx)
    out = []
    for name, tree in (facts.get("cwd") or {}).get("package_dirs", {}).items():
        if not tree["has_init"]:
            continue  # a bare directory does not shadow an installed package (imports.namespace covers the rest)
        win = winner_path(((probe.get("packages") or {}).get(name) or {}).get("spec"))
        if win == tree["path"]:
            continue  # it already wins: imports.shadowed says so
        out.append(_finding(
            ctx, "workdir.source_trees", "warn", f"A {name}/ source tree sits in the launch directory",
            f"{tree['path']} is a package; it does not win with this launch, but `python -m ...` "
            f"from {ctx.cwd} puts it first on sys.path and shadows the installed {name}.",
            f"mv {tree['path']} {tree['path']}.src", tree))
    return out


@check("workdir.entry", "workdir", "The launch's entry point is found from the launch directory",
       needs=("launch",), scope="node")
def entry(ctx):
    """What it checks: that the launch directory exists on this node; for `python -m MODULE`, that
    the target interpreter finds the module from there; for `python script.py`, that the script
    exists from there. When it is missing it names the checkouts that have it.

    How the job fails without it: at once: `python: Error while finding module specification for
    'verl.trainer.main_ppo' (ModuleNotFoundError: No module named 'verl')`, `can't open file
    'main.py': [Errno 2] No such file or directory`, `bash: run_grpo.sh: No such file or directory`.

    Fix: cd into the checkout that contains the module (the finding names it), fix the `cd` in the
    launch script, or `pip install verl` into the interpreter that runs the job.

    After the fact: python-entry-module-missing, workdir-script-not-found, workdir-shell-script-not-found"""
    launch = ctx.launch
    facts = ctx.get_facts()
    probe = probe_of(ctx)
    if not (facts.get("cwd") or {}).get("exists", True):
        return [_finding(ctx, "workdir.entry", "fail", f"The launch directory {ctx.cwd} does not exist",
                         "the launch changes into (or is started from) a directory this node lacks",
                         "fix the `cd` in the launch script, or create/mount the directory",
                         {"cwd": str(ctx.cwd)})]
    if launch.module and probe.get("ok"):
        mod = probe.get("module") or {}
        if mod.get("file"):
            return []
        top = launch.module.split(".")[0]
        homes = [h for h in facts.get("entry_homes") or [] if h != str(ctx.cwd)]
        top_found = winner_path(((probe.get("packages") or {}).get(top) or {}).get("spec"))
        what = (f"`{top}` resolves to {top_found}, which has no {launch.module}" if top_found
                else f"`{top}` is not importable from {ctx.cwd}")
        fix = (f"cd {homes[0]}  (it has {top}/) before launching" if homes
               else f"launch from the checkout that contains {top}/, or pip install it")
        return [_finding(ctx, "workdir.entry", "fail", f"`python -m {launch.module}` will not be found",
                         f"{what}; python would exit with 'No module named {launch.module}'.", fix,
                         {"module": mod, "checkouts": homes, "cwd": str(ctx.cwd)})]
    if launch.entry:
        p = Path(launch.entry).expanduser()
        full = p if p.is_absolute() else ctx.cwd / p
        if not full.exists():
            return [_finding(ctx, "workdir.entry", "fail", f"The script {launch.entry} does not exist",
                             f"{full} is not there from {ctx.cwd}", "cd to the directory that has it",
                             {"script": str(full)})]
    return []
