"""Check registration, discovery and the concurrent runner.

A check is a small function in a module of the `checks` package, registered with `@check(...)`:
it declares its id, category, title, what it needs and its scope once, and returns `Problem`s
(or nothing: it passed, and the runner records one `pass` finding, so JUnit gets one testcase per
check). The runner fills in id, category, title and node. A check that raises becomes a finding,
never a crash of doctor. Every module of the package is imported to find the checks, so a check
cannot exist unregistered.

Scopes: `node` checks judge this machine (or each node's facts), `launch` checks judge the launch
(its config, data, memory), `cluster` checks compare the nodes of a Ray cluster (their argument is
the `checks.cluster.ClusterView`, not the context).

What a check cannot run without (a launch, a probed interpreter, a composed config...) it declares
with `needs=`; when one is missing the runner records the skip, worded once, in `NEEDS`.

The check function's docstring is its page (`doctor rules <check-id>`), in four sections, in order:
`What it checks:`, `How the job fails without it:`, `Fix:` and `After the fact:` (the explain rule
ids that name the same failure in a log, comma separated, or `-`). `Check.page()` reads them.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable

import checks
from checks.model import CATEGORIES, Finding, Problem

CheckFn = Callable[["object"], Iterable[Finding] | None]


def _no_launch(ctx) -> str | None:
    return None if ctx.launch is not None else "no launch given (doctor check -- bash run.sh)"


def _probe_failed(ctx) -> str | None:
    from probes.facts import probe_of

    return None if probe_of(ctx).get("ok") else "the target interpreter could not be probed"


def _session(ctx):
    from checks.verl_config import session

    return session(ctx)


def _config_not_composed(ctx) -> str | None:
    return "the config did not compose" if _session(ctx).composed.config is None else None


def _config_probe_failed(ctx) -> str | None:
    error = _session(ctx).probe_error
    return f"the config probe failed: {error}" if error else None


# What a check can need -> why it is skipped without it (None: the need is met), in one wording.
# A check's needs are asked in the order it lists them.
NEEDS: dict[str, Callable[["object"], str | None]] = {
    "launch": _no_launch,
    "multi_node": lambda ctx: None if ctx.multi_node else "for multi-node jobs only (trainer.nnodes or --nodes above 1)",
    "deep": lambda ctx: None if ctx.deep else "runs with --deep only",
    "probe": _probe_failed,
    "config": _config_not_composed,
    "config_probe": _config_probe_failed,
}
# Needs answered by the launch's config session: they come after "launch", and a run that has
# them starts the session before the checks.
SESSION_NEEDS = {"config", "config_probe"}

SCOPES = ("node", "launch", "cluster")


@dataclass(frozen=True)
class Check:
    id: str
    category: str
    title: str
    fn: CheckFn
    needs: tuple[str, ...] = ()  # names in NEEDS; the first one missing skips the check
    scope: str = "node"
    owns: tuple[str, ...] = ()  # kinds of fact this check reports for every check (see one_finding_per_fact)

    def page(self) -> Page:
        return read_page(self.id, self.fn.__doc__)

    def finding(self, out: Finding | Problem, node: str | None) -> Finding:
        if isinstance(out, Finding):
            return out
        return Finding(self.id, self.category, out.status, out.title or self.title, out.message, out.fix,
                       out.evidence, node)


PAGE_SECTIONS = ("What it checks", "How the job fails without it", "Fix", "After the fact")


class PageError(ValueError):
    """A check whose docstring is not a page in the four sections."""


@dataclass(frozen=True)
class Page:
    what: str
    fails: str
    fix: str
    rules: tuple[str, ...]  # explain rule ids for the same failure after the fact


def read_page(check_id: str, doc: str | None) -> Page:
    """The four sections of a check's docstring; PageError names what is missing or out of order."""
    text = inspect.cleandoc(doc or "")
    found = []
    for label in PAGE_SECTIONS:
        m = re.search(rf"^{re.escape(label)}:", text, re.M)
        if not m:
            raise PageError(f"{check_id}: its docstring has no '{label}:' section")
        found.append(m)
    if [m.start() for m in found] != sorted(m.start() for m in found) or found[0].start() != 0:
        raise PageError(f"{check_id}: the docstring must be exactly the sections {', '.join(PAGE_SECTIONS)}, in order")
    ends = [m.start() for m in found[1:]] + [len(text)]
    # each section's paragraphs as single lines: the renderer wraps them to its width
    what, fails, fix, after = ("\n\n".join(" ".join(p.split()) for p in re.split(r"\n\s*\n", text[m.end():end].strip()))
                               for m, end in zip(found, ends))
    if not all((what, fails, fix, after)):
        raise PageError(f"{check_id}: a section of its docstring is empty (write '-' for no explain rule)")
    rules = () if after == "-" else tuple(r.strip() for r in after.split(",") if r.strip())
    return Page(what, fails, fix, rules)


_REGISTRY: dict[str, Check] = {}


def check(id: str, category: str, title: str, needs: tuple[str, ...] = (), scope: str = "node",
          owns: tuple[str, ...] = ()):
    if scope not in SCOPES:
        raise ValueError(f"{id}: unknown scope {scope!r}; choose from {', '.join(SCOPES)}")
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}")
    unknown = [n for n in needs if n not in NEEDS]
    if unknown:
        raise ValueError(f"unknown need {unknown[0]!r}; choose from {', '.join(NEEDS)}")
    if SESSION_NEEDS & set(needs) and needs[0] != "launch":
        raise ValueError(f"{id}: {sorted(SESSION_NEEDS & set(needs))[0]!r} needs 'launch' first")

    def deco(fn: CheckFn) -> CheckFn:
        if fn.__module__.split(".")[0] != "checks":  # only the package's modules are discovered and run
            raise ValueError(f"{id}: defined in {fn.__module__}, outside the checks package: it would never run")
        seen = _REGISTRY.get(id)
        if seen and (seen.fn.__module__, seen.fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"check id {id!r} is registered twice ({seen.fn.__module__}, {fn.__module__})")
        _REGISTRY[id] = Check(id, category, title, fn, tuple(needs), scope, tuple(owns))
        return fn

    return deco


def check_modules() -> list[str]:
    """Every module of the `checks` package: importing one registers the checks it defines."""
    return [f"checks.{m.name}" for m in pkgutil.iter_modules(checks.__path__) if not m.ispkg]


def all_checks(scope: str | tuple[str, ...] = ("node", "launch")) -> list[Check]:
    """The registered checks of these scopes, in module order, then definition order."""
    for mod in check_modules():
        importlib.import_module(mod)
    scopes = (scope,) if isinstance(scope, str) else scope
    return [c for c in _REGISTRY.values() if c.scope in scopes]


def select(checks: list[Check], only: set[str] | None, skip: set[str] | None) -> list[Check]:
    def wanted(c: Check) -> bool:
        keys = {c.category, c.id}
        if only and not keys & only:
            return False
        return not (skip and keys & skip)

    return [c for c in checks if wanted(c)]


def missing_need(c: Check, ctx) -> str | None:
    """Why `c` cannot run in this context (its first unmet need), or None."""
    for need in c.needs:
        why = NEEDS[need](ctx)
        if why:
            return why
    return None


def _run_one(c: Check, ctx) -> tuple[list[Finding], float]:
    """`ctx` is the CheckContext, or the ClusterView for a cluster check."""
    t0 = time.perf_counter()
    node = getattr(ctx, "node", None)
    try:
        why = missing_need(c, ctx)
        if why:
            out = [Finding(c.id, c.category, "skip", c.title, why, node=node)]
        else:
            out = [c.finding(o, node) for o in (c.fn(ctx) or [])]
            if not out:
                out = [Finding(c.id, c.category, "pass", c.title)]
    except Exception as exc:  # a broken check reports itself; doctor goes on
        out = [Finding(c.id, c.category, "warn", c.title,
                       f"the check itself failed: {type(exc).__name__}: {exc}",
                       "report this as a doctor bug")]
    return out, time.perf_counter() - t0


@dataclass
class CheckResult:
    check: Check
    findings: list[Finding]
    seconds: float


def run_checks(checks: list[Check], ctx, workers: int = 8) -> list[CheckResult]:
    """Run checks concurrently (they mostly wait on the shared probes); keep registration order."""
    ctx.prefetch(config=any(SESSION_NEEDS & set(c.needs) for c in checks))
    return run_each(checks, ctx, workers)


def run_each(checks: list[Check], ctx, workers: int = 8) -> list[CheckResult]:
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda c: _run_one(c, ctx), checks))
    return one_finding_per_fact([CheckResult(c, out, secs) for c, (out, secs) in zip(checks, results)])


def one_finding_per_fact(results: list[CheckResult]) -> list[CheckResult]:
    """Two checks that see the same fact (evidence `fact`, e.g. "missing:/abs/path") report it
    once: the check that owns that kind of fact keeps its finding, the other refers to it."""
    owner: dict[str, Finding] = {}
    for r in results:
        for f in r.findings:
            fact = f.evidence.get("fact") if isinstance(f.evidence, dict) else None
            if fact and fact.split(":", 1)[0] in r.check.owns and f.status in ("fail", "warn"):
                owner.setdefault(fact, f)
    if not owner:
        return results
    for r in results:
        for i, f in enumerate(r.findings):
            kept = owner.get(f.evidence.get("fact") if isinstance(f.evidence, dict) else None)
            if kept is not None and kept is not f and kept.id != f.id:
                r.findings[i] = Finding(f.id, f.category, "skip", f.title,
                                        f"the same fact as {kept.id}: {kept.title}", "", f.evidence, f.node)
    return results


def flatten(results: list[CheckResult]) -> list[Finding]:
    return [f for r in results for f in r.findings]
