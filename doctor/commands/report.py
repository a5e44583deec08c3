"""`doctor report [--cluster [ADDRESS]] [--log FILE ...] [-- LAUNCH...] [-o FILE] [--json]
[--bundle FILE.tar.gz] [--anonymize]`: one redacted diagnosis to paste into an issue."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from launch.script import LaunchError, parse_launch
from doctor.cli import DoctorError


@click.command("report")
@click.option("--log", "logs", multiple=True, metavar="FILE",
              help="A log of the failed run (plain or .gz); repeat for several.")
@click.option("--cluster", "cluster", is_flag=False, flag_value="auto", default=None, metavar="[ADDRESS]",
              help="Report every node of a running Ray cluster.")
@click.option("--cwd", "cwd", type=click.Path(file_okay=False), default=None,
              help="Directory training is launched from (default: current).")
@click.option("--python", "python", default=None, help="Interpreter that runs training.")
@click.option("--device-memory", default=None, help="Device memory per accelerator (e.g. 64GiB).")
@click.option("--timeout", type=float, default=20.0, help="Seconds allowed for each probe.")
@click.option("-o", "--output", default=None, metavar="FILE", help="Write the report here (default: stdout).")
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON document (doctor.report/v1).")
@click.option("--bundle", default=None, metavar="FILE.tar.gz",
              help="Also write a .tar.gz with the report, its JSON and the logs (redacted; large logs cut).")
@click.option("--anonymize", is_flag=True, help="Also replace host names, IPs, user names and home paths.")
@click.argument("launch", nargs=-1, type=click.UNPROCESSED)
def command(logs, cluster, cwd, python, device_memory, timeout, output, as_json, bundle, anonymize, launch):
    """Write one shareable, redacted diagnosis: verdict, evidence, versions, config, memory."""
    from doctor import report
    from doctor.report_markdown import to_markdown

    base = Path(cwd).resolve() if cwd else Path.cwd()
    if cwd and not base.is_dir():
        raise DoctorError(f"--cwd {cwd}: not a directory")
    for path in logs:
        if path == "-":
            raise DoctorError("--log needs a file (save stdin to a file first)")
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise DoctorError(f"--log {path}: not a readable file")
    for target, what in ((output, "-o"), (bundle, "--bundle")):
        if target and not os.path.isdir(os.path.dirname(os.path.abspath(target))):
            raise DoctorError(f"{what} {target}: its directory does not exist")
    try:
        parsed = parse_launch(list(launch), cwd=base) if launch else None
    except LaunchError as exc:
        raise DoctorError(str(exc)) from None
    req = report.ReportRequest(argv=sys.argv[1:] if sys.argv[1:2] == ["report"] else ["report"],
                               launch=parsed, logs=list(logs), cluster=cluster, cwd=base, python=python,
                               device_memory=device_memory, timeout=timeout, anonymize=anonymize,
                               bundle=bool(bundle))
    doc, cuts = report.build_document(req)
    plan = report.bundle_plan(doc, cuts) if bundle else {}
    text = report.to_json(doc) if as_json else to_markdown(doc)
    try:
        if bundle:
            report.write_bundle(bundle, doc, text if not as_json else to_markdown(doc), cuts, plan)
        if output:
            report.write_atomic(output, text)
    except OSError as exc:
        raise DoctorError(f"cannot write {exc.filename or output or bundle}: {exc.strerror}") from None
    if not output:
        click.echo(text, nl=False)
    elif bundle:
        click.echo(f"doctor: wrote {output} and {bundle}", err=True)
    else:
        click.echo(f"doctor: wrote {output}", err=True)
    return 1 if doc["verdict"]["status"] == "fail" else 0
