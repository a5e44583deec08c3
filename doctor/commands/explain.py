"""`doctor explain LOG...|-` (why did the run fail?) and `doctor rules [ID]` (a rule's page).

Exit codes: 0 a cause was found, 1 nothing known matched (the lines to look at are shown),
2 the log or the catalog could not be read.
"""
from __future__ import annotations

import json
import textwrap

import click

from doctor.cli import DoctorError
from knowledge.vocabulary import CATEGORY_COLOURS


def _catalog():
    from matching.catalog import CatalogError, catalog

    try:
        return catalog()
    except CatalogError as exc:
        raise DoctorError(f"rule catalog: {exc}") from None


def _generic():
    """The generic layer's classes (knowledge/generic.toml)."""
    from matching.catalog import CatalogError
    from matching.terminal import generic

    try:
        return generic()
    except CatalogError as exc:
        raise DoctorError(f"generic classes: {exc}") from None


def _where(line) -> str:
    place = f"{line.file}:" if line.file else ""
    who = ", ".join(x for x in (line.node, line.process) if x)
    return f"{place}{line.n}" + (f" ({who})" if who else "")


def _echo_block(label: str, text: str) -> None:
    body = textwrap.dedent(text).strip().splitlines()
    click.echo(f"  {click.style(label, bold=True)} {body[0] if body else ''}")
    for line in body[1:]:
        click.echo(f"  {' ' * len(label)} {line}")


def _human(report, show_all: bool) -> None:
    if not report.findings:
        click.echo(f"No known failure matched in {', '.join(report.sources)} "
                   f"({report.lines_read} lines).")
        if report.fallback:
            click.echo("Lines to look at first:")
            for line in report.fallback:
                click.echo(f"  {_where(line):>12}  {line.to_dict()['text']}")
        click.echo("If this is a known failure, `doctor rules` lists what doctor recognises.")
        return
    top, rest = report.findings[0], report.findings[1:]
    colour = CATEGORY_COLOURS.get(top.category, "white")
    head = click.style(f"[{top.category}]", fg=colour, bold=True)
    phase = f" (phase: {top.phase})" if top.phase else ""
    layer = f"  (no rule names it; generic class, confidence {top.confidence})" if top.generic else ""
    click.echo(f"{head} {click.style(top.title, bold=True)}{phase}  {click.style(top.rule, dim=True)}"
               + click.style(layer, dim=True))
    for line in top.lines:
        click.echo(f"  {click.style(_where(line), dim=True)}: {line.to_dict()['text']}")
    _echo_block("cause:", top.cause)
    _echo_block("fix:  ", top.fix)
    click.echo(f"  {click.style('more:', dim=True)}  doctor rules {top.rule}")
    if rest:
        click.echo("\nAlso seen" + ("" if show_all else " (after the cause, or less specific)") + ":")
        for f in rest:
            tag = " [consequence]" if f.consequence else ""
            tag += f" [same line as {f.subsumed_by}]" if f.subsumed_by else ""
            click.echo(f"  - {f.rule}: {f.title} (line {_where(f.lines[0])}){tag}")


@click.command("explain")
@click.argument("logs", nargs=-1, metavar="LOG...|-")
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout (schema doctor.explain/v1).")
@click.option("--all", "show_all", is_flag=True,
              help="Also findings whose evidence a higher-ranked one already explains.")
@click.option("--list", "list_rules", is_flag=True, help="List every rule doctor knows, then the generic classes.")
def explain(logs, as_json, show_all, list_rules):
    """Name the root cause of a failed run from its log(s), with the evidence and the fix.

    LOG may be a file, a .gz file, a directory (its .log/.out/.err/.txt/.gz files: a Ray session's
    logs/, or a folder per node), or - for stdin. Several logs (e.g. one per node) are read as
    one incident. A large plain file is scanned with a helper process on a second core
    (DOCTOR_AHEAD=0: one process only); its line loops run in C where the install built
    matching/_lines.c (DOCTOR_NATIVE=0: their Python twins, the same findings).
    """
    if list_rules:
        _list(as_json)
        return 0
    if not logs:
        raise DoctorError("give a log file (or - for stdin); see doctor explain --help")
    _catalog()
    from matching.explain import LogReadError, explain_report

    _generic()
    try:
        report = explain_report(list(logs), all=show_all)
    except LogReadError as exc:
        raise DoctorError(str(exc)) from None
    if report.truncated:  # a half-read log would make a silent, partial answer
        raise DoctorError(f"{', '.join(report.sources)}: not a readable gzip file: {report.gzip_error} "
                          f"after {report.lines_read} lines; `gzip -dc LOG | doctor explain -` "
                          f"explains the part that is there")
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        _human(report, show_all)
    return 0 if report.findings else 1


def _list(as_json: bool) -> None:
    rules, classes = _catalog(), _generic().classes
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in rules] + [c.to_dict() for c in classes], indent=2))
        return
    width = max(len(r.id) for r in (*rules, *classes))
    for r in sorted(rules, key=lambda r: (r.category, r.id)):
        click.echo(f"{r.id:<{width}}  {r.category:<8}  {','.join(r.platforms):<7}  {r.title}")
    click.echo("\nThe generic layer (when no rule matches; lower confidence):")
    for c in classes:
        cat = "family" if c.members else c.category
        click.echo(f"{c.id:<{width}}  {cat:<8}  {'any':<7}  {c.title}")
    click.echo(f"\n{len(rules)} rules, {len(classes)} generic classes. Details: doctor rules ID")


@click.command("rules")
@click.argument("rule_id", required=False, metavar="[ID]")
@click.option("--json", "as_json", is_flag=True, help="The page as JSON (without ID: the rules and generic classes).")
def rules(rule_id, as_json):
    """Print a rule's (or generic class's) page: what it detects, why it happens, how to fix it (like
    `ruff rule`), or a check's page (ID like imports.shadowed): what it checks, how the job fails
    without it, the fix.

    Without ID, list all rules, the generic classes, then the checks.
    """
    if not rule_id:
        _list(as_json)
        if not as_json:
            _list_checks()
        return 0
    rule = next((r for r in _catalog() if r.id == rule_id), None)
    if rule is None and _generic().by_id(rule_id):
        return _generic_page(_generic().by_id(rule_id), as_json)
    if rule is None:
        check = _check(rule_id)
        if check is None:
            raise DoctorError(f"unknown rule or check {rule_id!r}; `doctor rules` lists them")
        _check_page(check, as_json)
        return 0
    if as_json:
        click.echo(json.dumps(rule.to_dict(), indent=2))
        return 0
    click.echo(f"# {rule.title} ({rule.id})\n")
    meta = f"Category: {rule.category}. Platforms: {', '.join(rule.platforms)}."
    if rule.phase:
        meta += f" Phase: {rule.phase}."
    if rule.consequence:
        meta += " A consequence: ranked below any real cause in the same log."
    click.echo(meta + "\n")
    click.echo("## What it matches\n")
    for p in rule.patterns:
        click.echo(f"    {p}")
    if rule.near:
        click.echo(f"\n  with, within {rule.near.within} lines:\n\n    {rule.near.pattern}")
    if rule.requires:
        click.echo(f"\n  and somewhere in the log:\n\n    {rule.requires}")
    if rule.yields_to:
        click.echo(f"\n  unless the generic layer reads the same line as {', '.join(rule.yields_to)} "
                   "(from the frames around it), whose finding then stands instead")
    return _cause_fix_references(rule)


def _cause_fix_references(page) -> int:
    """The closing sections every rule and generic class page shares."""
    click.echo("\n## Why it happens\n")
    click.echo(textwrap.dedent(page.cause).strip())
    click.echo("\n## How to fix it\n")
    click.echo(textwrap.dedent(page.fix).strip())
    click.echo("\n## References\n")
    for ref in page.references:
        click.echo(f"- {ref}")
    return 0


def _generic_page(c, as_json: bool) -> int:
    """The page of a generic class: what it classifies, and for a family what each code means."""
    if as_json:
        click.echo(json.dumps(c.to_dict(), indent=2))
        return 0
    click.echo(f"# {c.title} ({c.id})\n")
    cat = "per code, see below" if c.members else c.category
    click.echo(f"Category: {cat}. The generic layer: used when no rule matches the failure; "
               f"confidence {c.confidence}.\n")
    click.echo("## What it matches\n")
    from matching.terminal import WHERE_TAGS

    tags = [t.split(":")[0] + ":" for t in WHERE_TAGS]
    if any(k in (x or "") for k in tags for x in [c.raised_in, c.not_in] +
           [v for a in c.also for v in (a.raised_in, a.not_in)]):
        said = ", ".join(f"`{t}` {meaning}" for t, meaning in WHERE_TAGS.items())
        click.echo(textwrap.fill(f"(where it was raised: `path:function` of the innermost frames, {said})",
                                 width=100, initial_indent="  ", subsequent_indent="  ") + "\n")
    if c.exceptions:
        kinds = "any exception" if "*" in c.exceptions else ", ".join(c.exceptions)
        click.echo(f"  The run's {'last ' if c.terminal else ''}exception: {kinds}")
    for label, value in (("  its message matches", c.words), ("  raised in (innermost frames)", c.raised_in),
                         ("  not raised in", c.not_in)):
        if value:
            click.echo(f"{label}:\n\n    {value}\n")
    for a in c.also:  # other ways an exception belongs to the class
        click.echo(f"  Or the exception: {', '.join(a.exceptions)}" + ("" if a.words or a.raised_in or a.not_in else "\n"))
        for label, value in (("  its message matches", a.words), ("  raised in (innermost frames)", a.raised_in),
                             ("  not raised in", a.not_in)):
            if value:
                click.echo(f"{label}:\n\n    {value}\n")
    if c.last:
        from matching.terminal import LAST_LINES

        click.echo(f"  When the log holds nothing else: the last line matching the code pattern below, among the\n"
                   f"  last {LAST_LINES} lines of a file, with no training step logged after it.\n")
    if c.dump:
        click.echo("  When the log holds nothing else: a file that ends in a stack dump, a thread's header (or a frame\n"
                   f"  only a dump prints) matching\n\n    {c.dump}\n\n  with a frame under it matching\n\n"
                   f"    {c.dump_frames}\n" + (f"\n  and no line matching (a crash's dump)\n\n    {c.unless}\n" if c.unless else ""))
    if c.lines:
        click.echo("  A line matching" + (" (when the log ends on it: nothing error-like comes after)" if c.cut else "")
                   + ":\n")
        for p in c.lines:
            click.echo(f"    {p}")
    if c.members:
        click.echo(f"\n## The codes\n\n  code pattern: {c.pattern}\n")
        for m in c.members:
            click.echo(f"  {m.match:<28} {m.category:<8} {m.meaning}")
    if c.phases:
        click.echo("\n## Where it stopped\n\n  The category follows the first of the innermost frames (`path:function`, "
                   "innermost first) that one of these names; otherwise it is " + c.category + ".\n")
        for m in c.phases:
            click.echo(f"  {m.category:<8} {m.meaning}\n           frames: {m.match}")
    return _cause_fix_references(c)


def _checks():
    from checks.registry import SCOPES, all_checks

    return all_checks(SCOPES)


def _check(check_id: str):
    return next((c for c in _checks() if c.id == check_id), None)


def _list_checks() -> None:
    checks = _checks()
    width = max(len(c.id) for c in checks)
    click.echo("")
    for c in checks:
        click.echo(f"{c.id:<{width}}  {c.scope:<7}  {c.title}")
    click.echo(f"\n{len(checks)} checks (doctor check). Details: doctor rules ID")


def _check_page(check, as_json: bool) -> None:
    """A check's page, from the four sections of its docstring (checks.registry.read_page)."""
    from checks.registry import PageError

    try:
        page = check.page()
    except PageError as exc:
        raise DoctorError(str(exc)) from None
    known = {r.id: r for r in _catalog()}
    if as_json:
        click.echo(json.dumps({"id": check.id, "category": check.category, "title": check.title,
                               "scope": check.scope, "needs": list(check.needs), "what": page.what,
                               "fails": page.fails, "fix": page.fix, "rules": list(page.rules)}, indent=2))
        return
    click.echo(f"# {check.title} ({check.id})\n")
    needs = f" Needs: {', '.join(check.needs)}." if check.needs else ""
    click.echo(f"A check of `doctor check`. Category: {check.category}. Scope: {check.scope}.{needs}\n")
    for heading, text in (("What it checks", page.what), ("How the job fails without it", page.fails),
                          ("How to fix it", page.fix)):
        text = text[:1].upper() + text[1:]
        paras = [textwrap.fill(p, 100, break_long_words=False, break_on_hyphens=False) for p in text.split("\n\n")]
        click.echo(f"## {heading}\n\n" + "\n\n".join(paras) + "\n")
    click.echo("## After the fact\n")
    if not page.rules:
        click.echo("No `doctor explain` rule names this failure in a log.")
    for rid in page.rules:
        title = known[rid].title if rid in known else "(not in the catalog)"
        click.echo(f"- {rid}: {title} (doctor rules {rid})")


commands = {"explain": explain, "rules": rules}
