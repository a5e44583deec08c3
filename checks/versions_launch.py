"""What the launch needs of the stack (`knowledge/stack.toml` [[need]]): the device's packages, the
rollout engine, verl, Ray and the logger's package; each missing part fails, with the install line
of the nearest known-good set.
"""
from __future__ import annotations

import re
from pathlib import Path

from probes.facts import package, probe_of, winner_path
from checks.matrix import (row_of, cite, in_spec, installed, matrix, nearest_set, parse, placed, release, row_set, set_names,
    verl_row)
from checks.model import Problem
from checks.registry import check
from checks.verl_config import launch_config


# --- what the launch needs of the stack (knowledge/stack.toml [[need]]) -------------------------

def _verl_launch(launch) -> bool:
    return launch.is_verl or bool(launch.entry and Path(launch.entry).name == "main_ppo.py")


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
        cfg = launch_config(launch) if verl else {}
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
        row = row_of(matrix()["cann"], t.get("cann")) or {"driver": ["*"]}
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
