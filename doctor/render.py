"""Render check results: human (flutter-doctor style), JSON (doctor.check/v1), JUnit, GitHub."""
from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from collections import OrderedDict
from dataclasses import replace

from checks.model import CATEGORIES, Finding, overall_status
from checks.registry import CheckResult, flatten
from knowledge.vocabulary import MARKS

CHECK_SCHEMA = "doctor.check/v1"
ANSI = {"green": "32", "yellow": "33", "red": "31", "dim": "2", "bold": "1"}


def redacted(results: list[CheckResult]) -> list[CheckResult]:
    """The same results with secrets removed from every text a finding carries (evidence may hold
    env variables, config values and log lines). A value found under a secret key in one finding
    is hunted in all of them."""
    from matching.redact import Redactor

    redactor = Redactor()
    redactor.learn([f.to_dict() for f in flatten(results)])

    def clean(f: Finding) -> Finding:
        safe = redactor.mapping({"title": f.title, "message": f.message, "fix": f.fix,
                                 "evidence": f.evidence, "node": f.node})
        return replace(f, **safe)

    return [CheckResult(r.check, [clean(f) for f in r.findings], r.seconds) for r in results]


# What a finding of each check scope judged, in the words of the human report.
JUDGED = {"node": "this machine", "launch": "the launch", "cluster": "the cluster"}


def check_document(results: list[CheckResult], strict: bool = False) -> dict:
    """doctor.check/v1. Each finding carries its check's scope: what it judged (`node`: this machine,
    or the node named in `node`; `launch`: the launch; `cluster`: the nodes compared)."""
    results = redacted(results)
    return {
        "schema": CHECK_SCHEMA,
        "status": overall_status(flatten(results), strict),
        "findings": [{**f.to_dict(), "scope": r.check.scope} for r in results for f in r.findings],
    }


def to_json(results: list[CheckResult], strict: bool = False) -> str:
    return json.dumps(check_document(results, strict), indent=2, default=str)


def _worst(findings: list[Finding]) -> str:
    """The mark of an area: its worst problem; skips only when nothing in it ran."""
    ran = [f for f in findings if f.status != "skip"] or findings
    return max(ran, key=lambda f: f.severity).status if ran else "pass"


def to_human(results: list[CheckResult], verbose: bool = False, strict: bool = False,
             file=None, judged: str | None = None) -> None:
    file = file or sys.stdout
    paint = _painter(file)
    results = redacted(results)
    by_cat: "OrderedDict[str, list[tuple[Finding, str]]]" = OrderedDict((c, []) for c in CATEGORIES)
    for r in results:
        for f in r.findings:
            by_cat[f.category].append((f, r.check.scope))
    about = f" of {judged}" if judged else ""
    lines = [f"Doctor summary{about} (details: doctor check -v):"]
    problems = 0
    for cat, scoped in by_cat.items():
        if not scoped:
            continue
        fs = [f for f, _ in scoped]
        mark, colour = MARKS[_worst(fs)]
        bad = [f for f in fs if f.status in ("fail", "warn")]
        note = f" - {len(bad)} problem{'s' * (len(bad) != 1)}" if bad else ""
        lines.append(f"{paint(f'[{mark}]', colour)} {cat}{note}")
        problems += bool(bad)
        for f, scope in scoped:
            if f.status in ("fail", "warn") or verbose:
                lines += _finding_lines(f, verbose, paint, scope)
    status = overall_status(flatten(results), strict)
    if problems:
        lines.append("\n" + paint(f"Doctor found issues in {problems} categor{'ies' if problems != 1 else 'y'}.",
                                  "red" if status == "fail" else "yellow"))
    else:
        lines.append("\n" + paint("No issues found!", "green"))
    print("\n".join(lines), file=file)


def _finding_lines(f: Finding, verbose: bool, paint, scope: str = "node") -> list[str]:
    mark, colour = MARKS[f.status]
    node = " " + paint(f"({f.node})", "dim") if f.node else ""
    judged = f"node {f.node}" if f.node and scope == "node" else JUDGED[scope]
    lines = [f"    {paint(mark, colour)} {f.title}{node} {paint(f'{f.id} · {judged}', 'dim')}"]
    lines += [f"      {line}" for line in f.message.splitlines()]
    if f.fix and f.status in ("fail", "warn"):
        for i, line in enumerate(f.fix.splitlines()):
            lines.append(f"      {paint('fix:', 'bold') + ' ' if i == 0 else ' ' * 11}{line}")
    if verbose:
        lines += ["      " + paint(f"{k}: {json.dumps(v, default=str)}", "dim") for k, v in f.evidence.items()]
    return lines


def _painter(file):
    """`paint(text, style)`: ANSI styles on a terminal (NO_COLOR, FORCE_COLOR and TERM=dumb honoured),
    the plain text anywhere else. A few escape codes rather than rich, whose import alone was a
    fifth of `doctor check`'s time."""
    env = os.environ
    if env.get("NO_COLOR"):
        on = False
    elif env.get("FORCE_COLOR"):
        on = True
    else:
        on = env.get("TERM") != "dumb" and getattr(file, "isatty", lambda: False)()
    if not on:
        return lambda text, style: text
    return lambda text, style: f"\033[{ANSI[style]}m{text}\033[0m"


def to_junit(results: list[CheckResult]) -> str:
    """One testcase per check; fail -> <failure>, warn -> <system-out> note, skip -> <skipped>."""
    results = redacted(results)
    suite = ET.Element("testsuite", name="doctor.check")
    n_fail = n_skip = 0
    total = 0.0
    for r in results:
        total += r.seconds
        case = ET.SubElement(suite, "testcase", classname=f"doctor.{r.check.category}",
                             name=r.check.id, time=f"{r.seconds:.4f}")
        fails = [f for f in r.findings if f.status == "fail"]
        if fails:
            n_fail += 1
            el = ET.SubElement(case, "failure", message="; ".join(f.title for f in fails),
                               type=fails[0].id)
            el.text = "\n\n".join(_plain(f) for f in fails)
        elif all(f.status == "skip" for f in r.findings):
            n_skip += 1
            ET.SubElement(case, "skipped", message=r.findings[0].message if r.findings else "")
        warns = [f for f in r.findings if f.status == "warn"]
        if warns:
            ET.SubElement(case, "system-out").text = "\n\n".join(_plain(f) for f in warns)
    suite.set("tests", str(len(results)))
    suite.set("failures", str(n_fail))
    suite.set("errors", "0")
    suite.set("skipped", str(n_skip))
    suite.set("time", f"{total:.4f}")
    root = ET.Element("testsuites")
    root.append(suite)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def _plain(f: Finding) -> str:
    lines = [f"[{f.status}] {f.title} ({f.id})" + (f" on {f.node}" if f.node else "")]
    if f.message:
        lines.append(f.message)
    if f.fix:
        lines.append(f"fix: {f.fix}")
    return "\n".join(lines)


def _gh_escape(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def to_github(results: list[CheckResult]) -> str:
    """GitHub workflow commands: ::error / ::warning, one per problem."""
    out = []
    scoped = [(f, r.check.scope) for r in redacted(results) for f in r.findings]
    for f, scope in scoped:
        if f.status not in ("fail", "warn"):
            continue
        level = "error" if f.status == "fail" else "warning"
        title = _gh_escape(f"{f.id} ({JUDGED[scope]}): {f.title}").replace(",", "%2C").replace("::", "%3A%3A")
        body = f.message + (f"\nfix: {f.fix}" if f.fix else "")
        out.append(f"::{level} title={title}::{_gh_escape(body or f.title)}")
    return "\n".join(out)
