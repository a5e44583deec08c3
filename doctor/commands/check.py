"""`doctor check [OPTIONS] [-- LAUNCH...]`: find what will make the launch fail, before launch."""
from __future__ import annotations

import difflib
import re
from pathlib import Path

import click

from launch.script import LaunchError, parse_launch
from checks.model import CATEGORIES, exit_code
from doctor.cli import DoctorError

# --scope -> the check scopes it runs (checks.registry.SCOPES) and what the summary says it judged.
SCOPES = {
    "all": (("node", "launch"), "this machine and the launch"),
    "node": (("node",), "this machine"),
    "launch": (("launch",), "the launch, for its own cluster, not this machine"),
}


def _names(value: str | None, option: str) -> set[str] | None:
    """The categories and check ids named by --only/--skip; an unknown one is a usage error that
    lists the valid names, so a typo cannot silently run (or skip) nothing."""
    if not value:
        return None
    from checks.registry import SCOPES as CHECK_SCOPES, all_checks

    items = {v.strip() for v in value.split(",") if v.strip()}
    ids = [c.id for c in all_checks(CHECK_SCOPES)]
    unknown = sorted(items - set(CATEGORIES) - set(ids))
    if unknown:
        near = difflib.get_close_matches(unknown[0], [*CATEGORIES, *ids], n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise DoctorError(f"{option} {unknown[0]!r} is not a category or check id{hint}; categories: "
                          f"{', '.join(CATEGORIES)}; checks: {', '.join(ids)} (doctor check --list)")
    return items


def summary_line(fn_doc: str | None, title: str) -> str:
    """What a check catches, in one line: the first sentence of the "What it checks:" section of
    its page (checks.registry.read_page), else its title."""
    from checks.registry import PageError, read_page

    try:
        what = read_page(title, fn_doc).what
    except PageError:
        return title
    first = re.match(r"(.+?[.!?])(\s|$)", " ".join(what.split()))
    return first.group(1) if first else (what or title)


def list_checks(as_json: bool) -> None:
    import json

    from checks.registry import SCOPES as CHECK_SCOPES, all_checks

    rows = [{"id": c.id, "category": c.category, "scope": c.scope,
             "catches": summary_line(c.fn.__doc__, c.title)} for c in all_checks(CHECK_SCOPES)]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    width = max(len(r["id"]) for r in rows)
    for r in rows:
        click.echo(f"{r['id']:<{width}}  {r['category']:<8}  {r['scope']:<7}  {r['catches']}")
    click.echo(f"\n{len(rows)} checks (scope node: this machine; launch: the launch; cluster: every node "
               "compared, with --cluster).")


def _validate(scope, cluster, keep_agents, launch, cwd, cpus_per_node) -> None:
    if cwd and not Path(cwd).is_dir():
        raise DoctorError(f"--cwd {cwd}: not a directory")
    if not keep_agents and not cluster:
        raise DoctorError("--no-keep-agents goes with --cluster (the agents are the cluster check's)")
    if scope == "launch" and not launch:
        raise DoctorError("--scope launch judges a launch: give it after --, e.g. doctor check --scope launch "
                          "-- bash run_grpo.sh")
    if scope != "all" and cluster:
        raise DoctorError(f"--scope {scope} and --cluster do not go together (--cluster probes every node itself)")
    if cpus_per_node and scope == "node":
        raise DoctorError("--cpus-per-node describes the launch's cluster; --scope node judges this machine only")


@click.command("check", context_settings={"ignore_unknown_options": False})
@click.option("--cwd", "cwd", type=click.Path(file_okay=False), default=None,
              help="Directory training is launched from (default: current).")
@click.option("--python", "python", default=None, help="Interpreter that will run training.")
@click.option("--nodes", type=click.IntRange(min=1), default=None,
              help="Number of nodes the job spans (default: trainer.nnodes from LAUNCH).")
@click.option("--scope", type=click.Choice(list(SCOPES)), default="all", show_default=True,
              help="What to judge: this machine as a node of the job and the launch (all), this machine "
                   "only (node), or the launch only, from a machine outside its cluster, as CI pre-flight "
                   "does (launch: config, data, memory; nothing about this machine's CPUs, packages or paths).")
@click.option("--cpus-per-node", type=click.IntRange(min=1), default=None,
              help="Ray CPUs of each node of the launch's cluster; Ray's CPUs are then this times the nodes "
                   "(default: this machine's count, as for a local Ray; with --scope launch, not judged).")
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
@click.option("--only", default=None, help="Comma-separated categories or check ids to run (doctor check --list).")
@click.option("--skip", default=None, help="Comma-separated categories or check ids to skip.")
@click.option("--list", "list_only", is_flag=True, help="List every check (id, category, scope, what it catches).")
@click.option("--timeout", type=float, default=20.0, help="Seconds allowed for each probe.")
@click.option("-v", "--verbose", is_flag=True, help="Show passing checks and evidence.")
@click.argument("launch", nargs=-1, type=click.UNPROCESSED)
def command(cwd, python, nodes, scope, cpus_per_node, cluster, keep_agents, deep, device_memory, as_json, junit,
            fmt, strict, only, skip, list_only, timeout, verbose, launch):
    """Check this machine and LAUNCH before launching it (every node with --cluster; LAUNCH alone with --scope launch)."""
    if list_only:
        return list_checks(as_json)
    only_s, skip_s = _names(only, "--only"), _names(skip, "--skip")
    _validate(scope, cluster, keep_agents, launch, cwd, cpus_per_node)
    base = Path(cwd).resolve() if cwd else Path.cwd()
    try:
        parsed = parse_launch(list(launch), cwd=base) if launch else None
    except LaunchError as exc:
        raise DoctorError(str(exc)) from None
    options = {"device_memory": device_memory, "cpus_per_node": cpus_per_node}
    from checks.context import CheckContext

    ctx = CheckContext.local(cwd=base, python=python, launch=parsed, nodes=nodes, deep=deep,
                             timeout=timeout, options=options, scope=scope)
    results = _run(ctx, scope, cluster, only_s, skip_s, keep_agents)
    _emit(results, junit, as_json, fmt, verbose, strict, SCOPES[scope][1])
    from checks.registry import flatten

    return exit_code(flatten(results), strict)


def _run(ctx, scope, cluster, only_s, skip_s, keep_agents):
    from checks.registry import all_checks, run_checks, select

    if cluster:
        from doctor.cluster import run_cluster_checks

        return run_cluster_checks(ctx, None if cluster == "auto" else cluster, only_s, skip_s, keep_agents)
    ctx.prefetch()  # the target interpreter runs while the checks import
    return run_checks(select(all_checks(SCOPES[scope][0]), only_s, skip_s), ctx)


def _emit(results, junit, as_json, fmt, verbose, strict, judged: str) -> None:
    from doctor import render

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
        render.to_human(results, verbose=verbose, strict=strict, judged=judged)
