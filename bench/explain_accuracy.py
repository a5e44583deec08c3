"""Accuracy of `doctor explain` over every fixture of the catalog and the clean logs.

    .venv/bin/python bench/explain_accuracy.py [--clean DIR] [--json]

A fixture `tests/fixtures/explain/<rule-id>[--N].log` is labelled with its rule (and that rule's
category). Prints top-1 rule accuracy, top-1 category accuracy, the share with the right rule
anywhere in the ranking, and the false-finding rate on clean logs (runs that did not fail:
../shared/research/clean-logs by default, plus tests/fixtures/explain/clean). Misses are listed so they can be fixed.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from matching.catalog import catalog  # noqa: E402
from matching.explain import explain_paths  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "explain"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clean", type=Path, default=ROOT.parent / "shared" / "research" / "clean-logs")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    rules = {r.id: r for r in catalog()}
    rows = []
    for path in sorted(FIXTURES.glob("*.log")):
        expected = path.stem.split("--")[0]
        if expected not in rules:
            continue
        found = explain_paths([str(path)])
        got = found[0] if found else None
        rows.append({"fixture": path.name, "expected": expected,
                     "category": rules[expected].category,
                     "got": got.rule if got else None, "got_category": got.category if got else None,
                     "anywhere": any(f.rule == expected for f in found)})
    clean = sorted(args.clean.glob("*.log")) if args.clean.is_dir() else []
    clean += sorted((FIXTURES / "clean").glob("*.log"))  # runs captured here that succeeded
    false_findings = []
    for path in clean:
        found = explain_paths([str(path)])
        if found:
            false_findings.append({"log": path.name, "rule": found[0].rule,
                                   "line": found[0].lines[0].n})
    n = len(rows)
    summary = {
        "fixtures": n,
        "rules_with_fixture": len({r["expected"] for r in rows}),
        "rules": len(rules),
        "top1_rule_accuracy": sum(r["got"] == r["expected"] for r in rows) / n if n else 0.0,
        "top1_category_accuracy": sum(r["got_category"] == r["category"] for r in rows) / n if n else 0.0,
        "rule_found_anywhere": sum(r["anywhere"] for r in rows) / n if n else 0.0,
        "clean_logs": len(clean),
        "false_finding_rate": len(false_findings) / len(clean) if clean else None,
        "misses": [r for r in rows if r["got"] != r["expected"]],
        "false_findings": false_findings,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"fixtures: {n} ({summary['rules_with_fixture']} of {len(rules)} rules have one)")
        print(f"top-1 rule accuracy:      {summary['top1_rule_accuracy']:.3f}")
        print(f"top-1 category accuracy:  {summary['top1_category_accuracy']:.3f}")
        print(f"rule anywhere in ranking: {summary['rule_found_anywhere']:.3f}")
        if clean:
            print(f"false-finding rate on {len(clean)} clean logs: {summary['false_finding_rate']:.3f}")
        for m in summary["misses"]:
            print(f"  miss: {m['fixture']}: expected {m['expected']}, got {m['got']}")
        for f in false_findings:
            print(f"  false finding: {f['log']}:{f['line']}: {f['rule']}")
    return 0 if not summary["misses"] and not false_findings else 1


if __name__ == "__main__":
    sys.exit(main())
