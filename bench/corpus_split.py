"""Add real logs from public threads to the explain corpus, split once by thread.

    python bench/corpus_split.py add DIR...     # logs with the header below; each lands in its part
    python bench/corpus_split.py verify         # every recorded log is where the split rule puts it

A log's header (one `# key: value` per line, then the machine-printed lines verbatim):
    # source: URL            the thread (or PR, or documentation page at a commit)
    # thread: OWNER/REPO#N   what the split is keyed on: one thread is one log, in one part
    # category: ...          the root cause's category, as the thread established it (failures)
    # kind: clean            instead of category, for a run that worked
    # platform: npu|gpu|cpu, # multinode: yes|no, # cause: one line (failures)

The split: a thread is held out when sha256(thread) mod 100 < HELDOUT_PERCENT. It depends on the
thread alone, so it is fixed before anything is read, and a log added later goes where the same
rule sends it. `bench/corpus/split.toml` records every thread's part; tests/test_corpus.py holds
the held-out part out of the fixtures.
"""
from __future__ import annotations

import functools
import hashlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from knowledge.vocabulary import CATEGORIES  # noqa: E402  (a failure's category is one of the vocabulary)

CORPUS = ROOT / "bench" / "corpus"
SPLIT = CORPUS / "split.toml"
FIXTURES = ROOT / "tests" / "fixtures" / "explain"
HELDOUT_PERCENT = 50
HEADER = re.compile(r"^# (\w[\w-]*): ?(.*)$")


def part_of(thread: str) -> str:
    h = int(hashlib.sha256(thread.strip().lower().encode()).hexdigest(), 16)
    return "heldout" if h % 100 < HELDOUT_PERCENT else "tuning"


def _split(data: bytes) -> tuple[dict[str, str], int]:
    """The header's fields (its leading `# key: value` lines) and where the log after it starts."""
    head: dict[str, str] = {}
    at = 0
    while at < len(data):
        end = data.find(b"\n", at)
        end = len(data) if end < 0 else end + 1
        m = HEADER.match(data[at:end].rstrip(b"\r\n").decode("utf-8", "replace"))
        if not m:
            break
        head[m.group(1)] = m.group(2).strip()
        at = end
    return head, at


def read_header(path: Path) -> tuple[dict[str, str], list[str]]:
    data = path.read_bytes()
    head, at = _split(data)
    return head, data[at:].decode("utf-8", "replace").splitlines()


def body_bytes(path: Path) -> bytes:
    """The log as the thread printed it: the file's bytes after its header lines. The header is
    ours (the cause in our words, the source URL): doctor explain must not read it."""
    data = path.read_bytes()
    return data[_split(data)[1]:]


def kind_of(head: dict) -> str:
    return "clean" if head.get("kind") == "clean" else "failures"


def slug(thread: str) -> str:
    base = re.sub(r"[^A-Za-z0-9]+", "_", thread).strip("_").lower()[:120]
    if thread.isascii():
        return base
    # Two documentation sections whose names differ only in CJK words would share a slug.
    return f"{base}_{hashlib.sha256(thread.encode()).hexdigest()[:8]}"


def recorded() -> dict[str, dict]:
    import tomllib

    if not SPLIT.exists():
        return {}
    return {row["thread"]: row for row in tomllib.loads(SPLIT.read_text()).get("log", [])}


def fixture_sources() -> set[str]:
    out = set()
    for f in FIXTURES.rglob("*.log"):
        first = f.read_text(errors="replace").split("\n", 1)[0]
        if first.startswith("# source:"):
            out.add(first.split(":", 1)[1].strip().rstrip("/"))
    return out


@functools.lru_cache(maxsize=None)  # each fixture is compared with every corpus log: read it once
def distinct_lines(path: Path) -> frozenset[str]:
    """Long machine-printed lines that name this failure: not a stack frame, nor the source line
    a traceback prints under it (library code that many failures pass through), nor a banner."""
    _, body = read_header(path)
    out, after_frame = set(), False
    for line in body:
        s = line.strip()
        frame = s.startswith(("File ", "at "))
        words = sum(c.isalpha() for c in s) >= 20  # not a caret underline or a row of digits
        if len(s) >= 40 and words and not frame and not after_frame and not s.startswith(
                ("Traceback", "During handling", "The above")):
            out.add(s)
        after_frame = frame
    return frozenset(out)


def boilerplate(paths) -> set[str]:
    """Lines that two or more threads' logs print (torch's "CUDA kernel errors might be
    asynchronously reported..."): a library says them on every failure of a kind, so they tell
    no one log apart."""
    seen: dict[str, int] = {}
    for path in paths:
        for line in distinct_lines(path):
            seen[line] = seen.get(line, 0) + 1
    return {line for line, n in seen.items() if n > 1}


def fixture_sharing(lines: frozenset[str], common: set[str]) -> Path | None:
    """The fixture that carries two or more of a log's distinct lines (its source spelled another way:
    a documentation page with and without a section's anchor): then the log is that fixture's failure."""
    for fixture in sorted(FIXTURES.rglob("*.log")):
        if len((lines - common) & distinct_lines(fixture)) >= 2:
            return fixture
    return None


def problems_of(head: dict, body: list[str]) -> str | None:
    if not head.get("source") or not head.get("thread"):
        return "no # source or # thread line"
    if kind_of(head) == "failures" and head.get("category") not in CATEGORIES:
        return f"category {head.get('category')!r} is not one of the vocabulary"
    if sum(1 for ln in body if ln.strip()) < 3:
        return "fewer than 3 machine-printed lines"
    return None


def add(dirs: list[str]) -> int:
    rows = recorded()
    fixtures = fixture_sources()
    common = boilerplate([CORPUS / r["file"] for r in rows.values()])
    added = skipped = 0
    for d in dirs:
        for path in sorted(Path(d).glob("*.log")):
            head, body = read_header(path)
            why = problems_of(head, body)
            thread = head.get("thread", "")
            if not why and thread in rows:
                why = f"thread {thread} is already recorded"
            if not why and head["source"].rstrip("/") in fixtures:
                why = "its source is already a fixture"
            shared = None if why else fixture_sharing(distinct_lines(path), common)
            if shared:
                why = f"it carries lines of the fixture {shared.name}"
            if why:
                print(f"skip {path}: {why}", file=sys.stderr)
                skipped += 1
                continue
            kind, part = kind_of(head), part_of(thread)
            name = f"{slug(thread)}.log"
            dest = CORPUS / kind / part / name
            if dest.exists():  # another thread's log under the same name: never overwrite it
                print(f"skip {path}: {dest.name} already holds another thread", file=sys.stderr)
                skipped += 1
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text("\n".join([f"# {k}: {v}" for k, v in head.items()] + body) + "\n")
            rows[thread] = {"thread": thread, "kind": kind, "part": part, "file": f"{kind}/{part}/{name}",
                            "category": head.get("category", ""), "platform": head.get("platform", ""),
                            "multinode": head.get("multinode", ""), "source": head["source"]}
            added += 1
    write_split(rows)
    print(f"added {added}, skipped {skipped}; recorded {len(rows)} threads")
    return 0


def write_split(rows: dict[str, dict]) -> None:
    out = ["# The explain corpus's split, by thread (bench/corpus_split.py). Written once per thread.\n"]
    for row in sorted(rows.values(), key=lambda r: (r["kind"], r["part"], r["file"])):
        out.append("[[log]]\n" + "".join(f'{k} = "{_q(v)}"\n' for k, v in row.items()) + "\n")
    tmp = SPLIT.with_suffix(".tmp")
    tmp.write_text("".join(out))
    tmp.replace(SPLIT)


def _q(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"')


def verify() -> int:
    bad = [r["thread"] for r in recorded().values()
           if r["part"] != part_of(r["thread"]) or not (CORPUS / r["file"]).is_file()]
    for t in bad:
        print(f"misplaced or missing: {t}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "verify":
        sys.exit(verify())
    if len(sys.argv) >= 3 and sys.argv[1] == "add":
        sys.exit(add(sys.argv[2:]))
    print(__doc__.strip().splitlines()[2], file=sys.stderr)
    sys.exit(2)
