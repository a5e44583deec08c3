"""`doctor plan [--script FILE] [OVERRIDES ...] [--json]` (or `doctor plan -- LAUNCH`): the batch
arithmetic of the seed article and the per-device memory table for a config, before any node is
touched. The config is verl 0.9.1's defaults (snapshot) with the overrides applied by Hydra."""
from __future__ import annotations

import json
import os
from pathlib import Path

import click

from doctor.cli import DoctorError

def _launch(script: str | None, args: list[str], cwd: Path):
    from launch.script import LaunchError, parse_launch

    try:
        if script:
            launch = parse_launch(["bash", script, *args], cwd=cwd)
            missing = [a for a in args if a not in launch.raw_overrides]
            launch.raw_overrides += missing  # a script without "$@" still gets them: plan what was asked
            return launch
        if args and "=" not in args[0] and not args[0].startswith("~"):  # not an override: a launch
            return parse_launch(list(args), cwd=cwd)
        return parse_launch(["python3", "-m", "verl.trainer.main_ppo", *args], cwd=cwd)
    except LaunchError as exc:
        raise DoctorError(str(exc)) from None


def dataset_rows(cfg: dict, cwd: Path) -> tuple[int | None, str]:
    """Rows of data.train_files from the parquet footers (capped by data.train_max_samples)."""
    import pyarrow.parquet as pq

    files = cfg.get("data.train_files")
    files = files if isinstance(files, list) else [files] if files else []
    total = 0
    for f in files:
        p = Path(os.path.expanduser(str(f)))
        p = p if p.is_absolute() else cwd / p
        try:
            total += pq.ParquetFile(p).metadata.num_rows
        except FileNotFoundError:
            return None, f"{p} not found (pass --rows N)"
        except Exception as exc:
            return None, f"{p}: not readable as parquet ({type(exc).__name__}); pass --rows N"
    cap = cfg.get("data.train_max_samples")
    if isinstance(cap, int) and cap > 0:
        total = min(total, cap)
    return (total, "data.train_files") if files else (None, "no data.train_files")


@click.command("plan", context_settings={"ignore_unknown_options": True})
@click.option("--script", type=click.Path(dir_okay=False), default=None,
              help="A launch script (read, never run); OVERRIDES are appended like its \"$@\".")
@click.option("--rows", type=click.IntRange(min=0), default=None,
              help="Prompts in the training set (default: counted from data.train_files).")
@click.option("--device-memory", default=None, help="Memory per device (64GiB) or a device name (910B3).")
@click.option("--model-config", type=click.Path(), default=None,
              help="The model's config.json or its directory (default: actor_rollout_ref.model.path).")
@click.option("--cwd", type=click.Path(file_okay=False), default=None, help="Launch directory.")
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout (schema doctor.plan/v1).")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def command(script, rows, device_memory, model_config, cwd, as_json, args):
    """Batch arithmetic and a per-device memory estimate for a verl GRPO config."""
    from checks.config import override_problems
    from checks.memory import SizeError, device_memory as find_memory, model_config as read_model
    from checks.plan import batch_plan, memory_estimate
    from checks.verl_config import compose_snapshot, hydra_overrides

    base = Path(cwd).resolve() if cwd else Path.cwd()
    launch = _launch(script, list(args), base)
    base = launch.cwd or base
    composed = compose_snapshot(hydra_overrides(launch))
    problems = override_problems(composed)
    if composed.config is None or problems:
        first = problems[0] if problems else {"message": composed.errors[0]["message"], "fix": ""}
        raise DoctorError(f"{first['message']} {first.get('fix') or ''}".strip())
    cfg = composed.flat
    note = "--rows"
    if rows is None:
        rows, note = dataset_rows(cfg, base)
    plan = batch_plan(cfg, rows)
    plan["rows_from"] = note
    try:
        capacity, cap_note = find_memory(device_memory)
    except SizeError as exc:
        raise DoctorError(str(exc)) from None
    env = {**os.environ, **launch.env}  # HF_HOME / HF_HUB_CACHE as training will see them
    mcfg, where = read_model(model_config or cfg.get("actor_rollout_ref.model.path"), base, env)
    if model_config and mcfg is None:
        raise DoctorError(f"--model-config: {where}")
    memory = None
    if mcfg is not None:
        try:
            memory = memory_estimate(cfg, mcfg, capacity)
        except (KeyError, TypeError, ValueError) as exc:
            raise DoctorError(f"{where}: cannot read the model shape ({type(exc).__name__}: {exc})") from None
    doc = {"schema": "doctor.plan/v1", "config_source": composed.source, "batch": plan,
           "memory": memory.to_dict() if memory else None,
           "memory_note": cap_note if memory else f"model config: {where}",
           "model_config": where if memory else None}
    if as_json:
        click.echo(json.dumps(doc, indent=2, default=str))
    else:
        _human(doc)
    return 1 if memory is not None and memory.fits is False else 0


def _human(doc: dict) -> None:
    from checks.plan import gib

    b = doc["batch"]
    v = b.get("verl") or {}
    echo = click.echo
    echo(f"Config: {doc['config_source']}")
    echo(f"  N={_s(b['N'])} prompts ({b.get('rows_from')})  B={_s(b['B'])}  n={_s(b['n'])}  M={_s(b['M'])}  "
         f"m={_s(b['m'])}  W={_s(b['W'])}  epochs={_s(b['epochs'])}  ppo_epochs={_s(b['ppo_epochs'])}")
    echo("\nBatch arithmetic (the seed article's formulas)")
    rows = [("T = B*n (trajectories per iteration)", b["T"]),
            ("updates per iteration = ceil(T/M)", b["updates_per_iter"]),
            ("local mini batch = M/W", b["local_mini"]),
            ("gradient accumulation = local_mini/m", b["accum_steps"]),
            ("iterations per epoch = ceil(N/B)", b["iters_per_epoch"]),
            ("total updates", b["total_updates"])]
    for label, value in rows:
        echo(f"  {label:<42} {_s(value)}")
    if v:
        echo("\nWhat verl 0.9.1 does with it (ppo_mini_batch_size counts prompts; the last partial batch is dropped)")
        rows = [("samples per optimizer step = M*n", v.get("mini_batch_samples")),
                ("optimizer steps per iteration = ceil(B/M)", v.get("optimizer_steps_per_iter")),
                ("samples per device per step = M*n/dp", v.get("local_mini_samples")),
                ("gradient accumulation", v.get("accum_steps")),
                ("training steps per epoch = floor(N/B)", v.get("steps_per_epoch")),
                ("total training steps", v.get("total_training_steps")),
                ("total optimizer steps", v.get("total_optimizer_steps"))]
        for label, value in rows:
            echo(f"  {label:<42} {_s(value)}")
    mem = doc["memory"]
    echo("\nMemory per device (estimate)")
    if not mem:
        echo(f"  not estimated: {doc['memory_note']}")
        return
    echo(f"  model parameters {mem['params'] / 1e6:.1f} M (config: {doc['model_config']}); "
         f"device memory {gib(mem['capacity'])} ({doc['memory_note']})")
    for phase, total in mem["phases"].items():
        mark = "  <- peak" if phase == mem["peak_phase"] else ""
        echo(f"  {phase:<14} {gib(total):>10}{mark}")
    echo(f"  peak parts ({mem['peak_phase']}): " + ", ".join(f"{k} {gib(x)}" for k, x in mem["parts"].items()))
    if mem["fits"] is False:
        echo(f"  DOES NOT FIT: {gib(mem['total'])} > {gib(mem['capacity'])}")
        for s in mem["suggestions"]:
            echo(f"  try: {' '.join(s['overrides'])}   # -> {gib(s['total'])}")
    elif mem["ratio"] and mem["ratio"] > 0.9:
        echo(f"  tight: {mem['ratio']:.0%} of device memory")


def _s(value) -> str:
    return "?" if value is None else str(value)
