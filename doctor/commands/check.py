"""`doctor check [OPTIONS] [-- LAUNCH...]`: find what will make the launch fail, before launch."""
from __future__ import annotations

from pathlib import Path

import click

from launch.script import LaunchError, parse_launch
from checks.model import CATEGORIES, exit_code
from doctor.cli import DoctorError


def _cats(value: str | None) -> set[str] | None:
    if not value:
        return None
    items = {v.strip() for v in value.split(",") if v.strip()}
    unknown = {v for v in items if "." not in v and v not in CATEGORIES}
    if unknown:
        raise DoctorError(f"unknown category {sorted(unknown)[0]!r}; choose from {', '.join(CATEGORIES)}")
    return items


@click.command("check", context_settings={"ignore_unknown_options": False})
@click.option("--cwd", "cwd", type=click.Path(file_okay=False), default=None,
              help="Directory training is launched from (default: current).")
@click.option("--python", "python", default=None, help="Interpreter that will run training.")
@click.option("--nodes", type=click.IntRange(min=1), default=None,
              help="Number of nodes the job spans (default: trainer.nnodes from LAUNCH).")
@click.option("--cluster", "cluster", is_flag=False, flag_value="auto", default=None,
              metavar="[ADDRESS]", help="Probe every node of a running Ray cluster.")
@click.option("--keep-agents/--no-keep-agents", default=True,
              help="With --cluster: leave doctor's idle agent on each node for the next check (default), "
                   "or end them after this one.")
@click.option("--deep", is_flag=True, help="Also import the accelerator stack and run a collective.")
@click.option("--device-memory", default=None, help="Device memory per accelerator (e.g. 64GiB).")
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout (schema doctor.check/v1).")
@click.option("--junit", "junit", type=click.Path(dir_okay=False), default=None, help="Write JUnit XML.")
@click.option("--format", "fmt", type=click.Choice(["human", "github"]), default="human")
@click.option("--strict", is_flag=True, help="Warnings fail too.")
@click.option("--only", default=None, help="Comma-separated categories or check ids to run.")
@click.option("--skip", default=None, help="Comma-separated categories or check ids to skip.")
@click.option("--timeout", type=float, default=20.0, help="Seconds allowed for each probe.")
@click.option("-v", "--verbose", is_flag=True, help="Show passing checks and evidence.")
@click.argument("launch", nargs=-1, type=click.UNPROCESSED)
def command(cwd, python, nodes, cluster, keep_agents, deep, device_memory, as_json, junit, fmt, strict, only,
            skip, timeout, verbose, launch):
    """Check this machine (or every node with --cluster) before launching LAUNCH."""
    from checks.context import CheckContext
    from checks.registry import all_checks, run_checks, select
    from doctor import render

    only_s, skip_s = _cats(only), _cats(skip)
    base = Path(cwd).resolve() if cwd else Path.cwd()
    if cwd and not base.is_dir():
        raise DoctorError(f"--cwd {cwd}: not a directory")
    if not keep_agents and not cluster:
        raise DoctorError("--no-keep-agents goes with --cluster (the agents are the cluster check's)")
    try:
        parsed = parse_launch(list(launch), cwd=base) if launch else None
    except LaunchError as exc:
        raise DoctorError(str(exc)) from None
    options = {"device_memory": device_memory}
    ctx = CheckContext.local(cwd=base, python=python, launch=parsed, nodes=nodes, deep=deep,
                             timeout=timeout, options=options)
    if cluster:
        from doctor.cluster import run_cluster_checks

        results = run_cluster_checks(ctx, None if cluster == "auto" else cluster, only_s, skip_s, keep_agents)
    else:
        ctx.prefetch()  # the target interpreter runs while the checks import
        results = run_checks(select(all_checks(), only_s, skip_s), ctx)
    if junit:
        try:
            Path(junit).write_text(render.to_junit(results))
        except OSError as exc:
            raise DoctorError(f"cannot write {junit}: {exc.strerror}") from None
    if as_json:
        click.echo(render.to_json(results, strict))
    elif fmt == "github":
        text = render.to_github(results)
        if text:
            click.echo(text)
    else:
        render.to_human(results, verbose=verbose, strict=strict)
    from checks.registry import flatten

    return exit_code(flatten(results), strict)
