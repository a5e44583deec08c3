"""Memory (category `memory`): will the colocated GRPO job fit in device memory?

The estimate itself (formula in its docstring) is `checks.plan.memory_estimate`; this module finds
its inputs (the model's config.json, the device memory) and turns the result into a finding: fail
above capacity, warn above 90%, with the top contributors and the cheapest knobs that bring it under.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from checks.model import Problem
from checks.registry import check

WARN_RATIO = 0.9
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?i?b?)?\s*$", re.I)
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "kib": 2**10, "m": 1e6, "mb": 1e6, "mib": 2**20,
          "g": 2**30, "gb": 2**30, "gib": 2**30, "t": 2**40, "tb": 2**40, "tib": 2**40}


class SizeError(ValueError):
    pass


def parse_size(text: str | int) -> int:
    """'64GiB', '64GB', '65536MiB', '68719476736' -> bytes. Device HBM is quoted in GB = GiB."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(str(text))
    if not m or (m.group(2) or "").lower() not in _UNITS:
        raise SizeError(f"not a memory size: {text!r} (try 64GiB)")
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "").lower()])


def device_table() -> list[dict]:
    from knowledge import load_toml

    return load_toml("devices.toml")["device"]


def lookup_device(name: str) -> dict | None:
    """The device table entry whose name or alias is in `name` (longest match wins: 910B4-1 > 910B4)."""
    wanted = name.lower().replace(" ", "")
    best, best_len = None, 0
    for entry in device_table():
        for alias in [entry["name"], *entry.get("aliases", [])]:
            a = alias.lower().replace(" ", "")
            if (a == wanted or a in wanted) and len(a) > best_len:
                best, best_len = entry, len(a)
    return best


def smi_memory(timeout: float = 10.0) -> tuple[int, str] | None:
    """Per-device memory reported by nvidia-smi or npu-smi, when one is installed here."""
    if shutil.which("nvidia-smi"):
        out = _run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"], timeout)
        rows = [r.rsplit(",", 1) for r in out.splitlines() if "," in r]
        sizes = [(int(float(mb)) * 2**20, name.strip()) for name, mb in rows if mb.strip().isdigit()]
        if sizes:
            size, name = min(sizes)
            return size, f"nvidia-smi ({name})"
    if shutil.which("npu-smi"):
        out = _run(["npu-smi", "info"], timeout)
        # chip rows end with "<HBM used> / <HBM total> |"
        totals = [int(t) for t in re.findall(r"\d+\s*/\s*(\d+)\s*\|\s*$", out, re.M) if int(t) > 1024]
        if totals:
            return min(totals) * 2**20, "npu-smi info (HBM)"
    return None


def _run(argv: list[str], timeout: float) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def device_memory(option: str | None = None, device: str | None = None,
                  timeout: float = 10.0, measure: bool = True) -> tuple[int | None, str]:
    """(bytes per device, where the number came from). An explicit --device-memory wins, then a
    named device from the table, then what the smi tool on this machine reports (unless `measure`
    is off: this machine's devices are not the launch's)."""
    if option:
        found = lookup_device(option) if not _SIZE.match(option) else None
        if found:
            return found["memory_gib"] * 2**30, f"device table: {found['name']} ({found['source']})"
        return parse_size(option), "--device-memory"
    if device:
        found = lookup_device(device)
        if found:
            return found["memory_gib"] * 2**30, f"device table: {found['name']} ({found['source']})"
    measured = smi_memory(timeout) if measure else None
    if measured:
        size, source = measured
        return size, source
    if not measure:
        return None, "unknown (this machine's devices are not the launch's: pass --device-memory 64GiB or a device name such as 910B3)"
    return None, "unknown (no nvidia-smi / npu-smi here; pass --device-memory 64GiB or a device name such as 910B3)"


def model_config(path: str | None, cwd: Path, env: dict[str, str] | None = None) -> tuple[dict | None, str]:
    """The HF config.json of the actor model and where it came from: the path (a directory or the
    file itself), else the Hugging Face cache, else doctor's model table (checks.model_source)."""
    from checks.model_source import find

    found = find(path, cwd, env)
    if found.config is None:
        return None, found.where
    label = {"path": "", "hf-cache": "Hugging Face cache: ", "table": ""}[found.origin]
    return found.config, label + found.where


def estimate_for(ctx):
    """(MemoryEstimate or None, notes, where the model config came from, the model config) for a
    check context; the config is handed on so a warning's suggestions need not find it again."""
    from checks.plan import memory_estimate
    from checks.verl_config import session

    sess = session(ctx)
    composed = sess.composed
    if composed.config is None:
        return None, "the config did not compose (see config findings)", "", None
    cfg = composed.flat
    mcfg, where = model_config(cfg.get("actor_rollout_ref.model.path"), ctx.cwd, ctx.env)
    if mcfg is None:
        return None, f"model config: {where}", "", None
    try:
        capacity, cap_source = device_memory(ctx.options.get("device_memory"), ctx.options.get("device"),
                                             timeout=ctx.timeout, measure=ctx.judges_this_machine)
    except SizeError as exc:
        return None, str(exc), where, mcfg
    try:
        est = memory_estimate(cfg, mcfg, capacity)
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"{where}: cannot read the model shape ({type(exc).__name__}: {exc})", where, mcfg
    return est, cap_source, where, mcfg


def describe(est) -> str:
    from checks.plan import gib

    top = ", ".join(f"{k} {gib(v)}" for k, v in list(est.parts.items())[:4])
    head = f"peak {gib(est.total)} per device in phase `{est.peak_phase}`"
    if est.capacity:
        head += f" of {gib(est.capacity)} ({est.ratio:.0%})"
    return f"{head}; top: {top}"


def fixes(est) -> str:
    lines = []
    for s in est.suggestions:
        from checks.plan import gib

        lines.append(" ".join(s["overrides"]) + f"   # -> {gib(s['total'])}")
    return "\n".join(lines)


@check("memory.estimate", "memory", "Device memory for the GRPO job (estimate)", needs=("launch",), scope="launch")
def check_memory(ctx):
    """What it checks: the peak device memory per device of the colocated GRPO job, phase by phase
    (generate, weight_sync, log_prob, ref_log_prob, update), from the model's config.json (under its
    path, else the Hugging Face cache, else the table in knowledge/models.toml) and the composed
    config: weights, gradients and Adam states sharded by FSDP (and offloaded where set), activations of one micro batch (with or without gradient checkpointing), logits, vLLM's
    gpu_memory_utilization share, the reference model (formulas: checks/plan.py). Against the device
    memory (--device-memory, a device named in knowledge/devices.toml, else nvidia-smi / npu-smi):
    fail above it, warn above 90% (fragmentation and communication buffers are not modelled).

    How the job fails without it: out of memory minutes in, in the phase with the peak, after Ray,
    the models and vLLM have started: `NPU out of memory. Tried to allocate ...`, `CUDA out of
    memory`, vLLM's `No available memory for the cache blocks`; each retry pays the start-up again.

    Fix: the cheapest overrides that bring the peak under, each with its new peak (a smaller
    ppo_micro_batch_size_per_gpu or log_prob micro batch, a lower rollout.gpu_memory_utilization,
    param/optimizer offload, gradient checkpointing); else more devices or a smaller model.

    After the fact: npu-oom, memory-cuda-oom, npu-oom-rollout-init, memory-oom-generate,
    memory-oom-weight-sync, memory-oom-log-prob, memory-oom-ref-log-prob, memory-oom-update,
    vllm-no-cache-blocks, vllm-free-memory-below-utilization"""
    est, note, where, mcfg = estimate_for(ctx)
    if est is None:
        return [Problem("skip", note)]
    evidence = {**est.to_dict(), "capacity_source": note, "model_config": where}
    source = f"; model config from {where}"
    if est.capacity is None:
        return [Problem("pass", describe(est) + f"; device memory {note}{source}", evidence=evidence)]
    if not est.fits:
        fix = fixes(est) or "no single knob is enough: use more devices (trainer.n_gpus_per_node / nnodes) or a smaller model"
        return [Problem("fail", describe(est) + source, fix, evidence, title="Estimated peak exceeds device memory")]
    if est.ratio > WARN_RATIO:
        from checks.plan import suggestions
        from checks.verl_config import session

        cfg_fix = suggestions(session(ctx).composed.flat, mcfg, int(est.capacity * WARN_RATIO))
        fix = "\n".join(" ".join(s["overrides"]) for s in cfg_fix)
        return [Problem("warn", describe(est) + source, fix, evidence, title="Estimated peak above 90% of device memory")]
    return [Problem("pass", describe(est) + source, evidence=evidence)]
