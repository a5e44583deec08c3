"""How `doctor explain` reads a log as users paste it: each fixture changed the way a copy does.

    .venv/bin/python bench/explain_pasted.py [FORM...]

For each form below, every fixture of tests/fixtures/explain (the lines a rule or a generic class was
written from) is changed that way, and the line says how many keep the first finding (rule and
evidence line numbers; only the rule where the form splits lines) they give as they are. The forms are what real logs brought here show: a copy
out of a web page (no-break spaces), a reply's quote, log collectors' and launchers' prefixes, CRLF,
and ones doctor does not undo yet (a whole log indented, typographic quotes, HTML escapes, a terminal
that wrapped long lines): their figures say how far from robust it is there, not a goal met.
tests/test_explain_pasted.py holds the forms doctor undoes to every fixture.
"""
from __future__ import annotations

import html
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from matching.explain import explain_text  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "explain"


def _each_line(change):
    return lambda data: b"\n".join(change(ln) if ln else ln for ln in data.split(b"\n"))


def _text(change):
    return lambda data: change(data.decode("utf-8", "replace")).encode()


FORMS = {
    "nbsp": lambda data: data.replace(b" ", "\u00a0".encode()),       # a web page's &nbsp; for each space
    "quoted": lambda data: b"\n".join(b"> " + ln for ln in data.split(b"\n")),   # a Markdown / e-mail reply
    "crlf": lambda data: data.replace(b"\n", b"\r\n"),
    "kubectl": _each_line(lambda ln: b"2024-05-01T10:00:00.123456789Z " + ln),  # kubectl logs --timestamps
    "journald": _each_line(lambda ln: b"May 01 10:00:00 node1 python3[1234]: " + ln),
    "ray": _each_line(lambda ln: b"(TaskRunner pid=1234, ip=10.0.0.2) " + ln),
    "pod": _each_line(lambda ln: b"[pod/worker-0/main] " + ln),                 # kubectl logs --prefix
    "indented": _each_line(lambda ln: b"    " + ln),                            # not undone
    "typographic": _text(lambda t: t.replace("'", "\u2019").replace('"', "\u201d")),  # not undone
    "html": _text(html.escape),                                                # not undone
    "wrapped": _each_line(lambda ln: b"\n".join(ln[i:i + 120] for i in range(0, len(ln), 120))),  # not undone
}


def first(data: bytes):
    found = explain_text(data)
    return (found[0].rule, [ln.n for ln in found[0].lines]) if found else None


def main(argv: list[str]) -> int:
    forms = argv or list(FORMS)
    unknown = [f for f in forms if f not in FORMS]
    if unknown:
        print(f"explain_pasted: unknown form {unknown[0]!r}; forms: {', '.join(FORMS)}", file=sys.stderr)
        return 2
    paths = sorted(FIXTURES.glob("*.log"))
    plain = {p: first(p.read_bytes()) for p in paths}
    for name in forms:
        kept = 0
        for p in paths:
            data = p.read_bytes()
            pasted = FORMS[name](data)
            got, want = first(pasted), plain[p]
            if pasted.count(b"\n") != data.count(b"\n"):  # lines split: the same rule is all one can ask
                got, want = got and got[0], want and want[0]
            kept += got == want
        print(f"{name:12s} {kept}/{len(paths)} fixtures keep their first finding")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
