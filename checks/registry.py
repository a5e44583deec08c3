"""Check registration and the concurrent runner.

A check is a small function `fn(ctx) -> Iterable[Finding]`, registered with `@check(...)`. A check
that returns nothing has passed: the runner records one `pass` finding for it, so JUnit gets one
testcase per check. A check that raises becomes a finding, never a crash of doctor.
"""
from __future__ import annotations

import importlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable

from checks.model import CATEGORIES, Finding

CheckFn = Callable[["object"], Iterable[Finding] | None]

# Modules that hold checks; importing them registers their checks.
CHECK_MODULES = (
    "checks.imports",
    "checks.versions",
    "checks.network",
    "checks.workdir",
    "checks.config",
    "checks.data",
    "checks.memory",
)


@dataclass(frozen=True)
class Check:
    id: str
    category: str
    title: str
    fn: CheckFn
    # Skip unless the context says so (e.g. multi-node only): a predicate on the context.
    applies: Callable[["object"], bool] | None = None


_REGISTRY: dict[str, Check] = {}


def check(id: str, category: str, title: str, applies=None):
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}")

    def deco(fn: CheckFn) -> CheckFn:
        _REGISTRY[id] = Check(id, category, title, fn, applies)
        return fn

    return deco


def all_checks() -> list[Check]:
    for mod in CHECK_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:  # a concern not built yet is not an error
            if exc.name != mod:
                raise
    return list(_REGISTRY.values())


def select(checks: list[Check], only: set[str] | None, skip: set[str] | None) -> list[Check]:
    def wanted(c: Check) -> bool:
        keys = {c.category, c.id}
        if only and not keys & only:
            return False
        return not (skip and keys & skip)

    return [c for c in checks if wanted(c)]


def _run_one(c: Check, ctx) -> tuple[list[Finding], float]:
    t0 = time.perf_counter()
    try:
        if c.applies is not None and not c.applies(ctx):
            out = [Finding(c.id, c.category, "skip", c.title, "not applicable to this launch")]
        else:
            out = list(c.fn(ctx) or [])
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
    """Run checks concurrently (they mostly wait on the shared probe); keep registration order."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda c: _run_one(c, ctx), checks))
    return [CheckResult(c, out, secs) for c, (out, secs) in zip(checks, results)]


def flatten(results: list[CheckResult]) -> list[Finding]:
    return [f for r in results for f in r.findings]
