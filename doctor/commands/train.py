"""`doctor train`: run a GRPO job; with --auto-tune, diagnose failures, downshift, resume, go on."""
from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

import click

from launch.script import LaunchError
from doctor.cli import DoctorError


def _default_run_dir() -> Path:
    return Path.cwd() / "doctor-runs" / datetime.now().strftime("train-%Y%m%d-%H%M%S")


def _engine(engine: str, script: str | None, overrides: list[str], python: str | None):
    from supervisor.engine import ReferenceEngine
    from supervisor.verl_engine import VerlEngine

    if script:
        if not Path(script).is_file():
            raise DoctorError(f"--script {script}: no such file")
        return VerlEngine.from_script(script, overrides)
    if engine == "verl":
        return VerlEngine.from_overrides(overrides, python=python)
    from trainer.defaults import layered

    return ReferenceEngine(layered(overrides), python=python)


@click.command("train", context_settings={"ignore_unknown_options": True})
@click.option("--auto-tune", is_flag=True, help="Retry after a failure: downshift memory knobs, wait "
              "for lost nodes, resume from the last checkpoint.")
@click.option("--engine", type=click.Choice(["reference", "verl"]), default=None,
              help="reference: the built-in trainer (runs on CPU); verl: verl.trainer.main_ppo "
                   "(default: verl with --script, else reference).")
@click.option("--max-retries", type=click.IntRange(min=0), default=3, show_default=True)
@click.option("--run-dir", type=click.Path(file_okay=False), default=None,
              help="Where the attempt logs and the ledger go (default: ./doctor-runs/train-<time>).")
@click.option("--script", type=click.Path(dir_okay=False), default=None,
              help="A launch script running verl (exports, cd and overrides are honoured).")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False), default=None,
              help="Continue a supervisor that was stopped, from its run directory.")
@click.option("--no-preflight", is_flag=True, help="Launch without running doctor check first.")
@click.option("--node-wait", type=float, default=300.0, show_default=True,
              help="Seconds to wait for lost Ray nodes before giving up.")
@click.option("--device-memory", default=None, metavar="SIZE",
              help="Memory per device (e.g. 64GiB): lets the memory estimate skip ladder steps "
                   "that cannot fit.")
@click.option("--python", "python", default=None, help="Interpreter for the job (default: this one).")
@click.option("--json", "as_json", is_flag=True, help="JSON summary on stdout (schema doctor.train/v1); "
              "the job's output goes to stderr.")
@click.argument("overrides", nargs=-1, type=click.UNPROCESSED)
def command(auto_tune, engine, max_retries, run_dir, script, resume_dir, no_preflight, node_wait,
            device_memory, python, as_json, overrides):
    """Run a GRPO job (OVERRIDES in verl's key=value syntax), and with --auto-tune keep it going.

    With no script: the embedded default task (a tiny model and task, two local Ray nodes, CPU) on
    the reference engine, with OVERRIDES on top of it as verl puts its command line on top of its
    yaml (e.g. `doctor train trainer.total_training_steps=5`). OVERRIDES that name data or a model
    (data.train_files, data.val_files, actor_rollout_ref.model.path) are a task of their own."""
    from supervisor.summary_table import render_table
    from supervisor.supervise import Options, Supervisor, SupervisorError

    from trainer.config import parse_bytes

    echo = sys.stderr if as_json else sys.stdout
    try:
        memory = parse_bytes(device_memory) if device_memory else None
    except Exception:
        memory = None
    if device_memory and not memory:
        raise DoctorError(f"--device-memory {device_memory}: not a size (e.g. 64GiB)")
    options = Options(max_retries=max_retries, auto_tune=auto_tune, node_wait_s=node_wait,
                      preflight=not no_preflight, echo=echo, device_memory=memory)
    overrides = [o for o in overrides if o != "--"]
    try:
        if resume_dir:
            if script or overrides:
                raise DoctorError("--resume takes the run directory only (its launch is recorded there)")
            options.node_wait_s, options.device_memory = node_wait, memory
            sup = Supervisor.resume(Path(resume_dir), options)
            if sup.status == "succeeded":
                echo.write(f"doctor: {resume_dir} already finished\n")
        else:
            if script and engine == "reference":
                raise DoctorError("--script launches verl; it cannot run on --engine reference")
            eng = _engine(engine or ("verl" if script else "reference"), script, overrides, python)
            sup = Supervisor(Path(run_dir) if run_dir else _default_run_dir(), eng, options)
        doc = sup.run() if sup.status == "running" else sup.summary()
    except (LaunchError, SupervisorError) as exc:
        raise DoctorError(str(exc)) from None
    if as_json:
        click.echo(json.dumps(doc, indent=2, default=str))
    else:
        render_table(doc)
    if doc.get("interrupted"):
        return 130
    return 0 if doc["status"] == "succeeded" else 1
