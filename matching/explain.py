"""`doctor explain`: name the root cause of a failed run from its log.

How a log is read (constant memory, any size):
  1. The log is streamed in large blocks (plain, gzip or stdin). One multi-pattern automaton of
     every catalog pattern (Hyperscan; RE2's alternation without it, see matching/prefilter.py)
     scans each whole block in linear time, so the many thousands of ordinary lines cost one pass
     and no Python per line. A large regular file has a forked helper running that scan for the
     blocks it claims, on another core, while the reader counts lines (matching/ahead.py).
  2. Only a line where that prefilter matched is decoded and cleaned (ANSI colours, Ray's
     `(WorkerDict pid=..., ip=...)` prefix, CR, invalid UTF-8), then an `re2.Set` of the original
     patterns says exactly which patterns hit. Each pattern keeps its first and last hits only.
  3. At the end each rule's `near` / `requires` conditions are checked and the hits are ranked:
     real causes before consequences, the earliest incident first, the most specific rule first
     within an incident (see knowledge/rules/README.md).
  4. Under the rules, the generic layer (matching/terminal.py) classifies the run's terminal
     failure that no rule names, from the error-like lines the prefilter flagged (bounded).
"""
from __future__ import annotations

import io
import os
import re
import stat
import sys
import zlib
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterable

import re2

from matching import lines as block_lines, terminal
from matching.catalog import Rule, catalog
from matching.ahead import Ahead, start_ahead
from matching.prefilter import make_prefilter

SCHEMA = "doctor.explain/v1"
BLOCK_BYTES = 4 << 20          # read size: per-block overhead vanishes; with the block the reader scans
                               # ahead of the helper (matching/ahead.py) it holds 8 MB
MAX_LINE_BYTES = 64 << 10      # a longer line is matched in a window around the hit
MAX_CARRY_BYTES = 16 << 20     # a "line" longer than this (binary junk) is split, not buffered
KEEP_HITS = 64                 # first and last hits kept per pattern: bounded memory
SHOW_LINES = 4                 # evidence lines per finding
MAX_TEXT = 400                 # characters of an evidence line we print
INCIDENT_GAP = 50              # hits closer than this many lines belong to one incident
FALLBACK_KEEP = 12             # unexplained error lines kept (the last ones)
STRIDE = 32 << 10              # _Numbers.totals: newlines counted per this many bytes

# Lines shown when no rule matched: where a human would look first.
FALLBACK_PATTERNS = (
    r"Traceback \(most recent call last\)",
    r"\b[A-Z]\w*(?:Error|Exception)\b: ",
    r"\b(?:FATAL|Fatal Python error|Segmentation fault|core dumped)\b",
    r"\bERROR\b",
)

# Colour codes, raw or as rsyslog stores them (control characters escaped as "#" and three octal digits,
# its default EscapeControlCharactersOnReceive): "#033[2m#033[33m(raylet)#033[0m ..."
_ANSI = re.compile(r"(?:\x1b|#033)\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# The same colour codes with their escape character lost, as a paste into a web page shows them: Ray's
# "[36m(TaskRunner pid=1)[0m ..." (SGR only; read where the line also holds a reset, "[0m")
_BARE_SGR = re.compile(r"\[[0-9;]{0,8}m")
# Ray prefixes: "(WorkerDict pid=123, ip=10.0.0.1)", "(pid=15052)", "(raylet, ip=...)",
# "(TaskRunner pid=1)", "(autoscaler +3s)"; possibly repeated when lines are nested. And SkyPilot's, which
# has the same shape (sky/skylet/log_lib.py, the job's run script): "(setup pid=N, ip=...)", "(task, pid=N)",
# a multi-node job's "(head, rank=0, pid=N)" and "(worker1, rank=1, pid=N, ip=...)".
_RAY_PREFIX = re.compile(
    r"^\((?:(?P<name>[A-Za-z_][\w.:\-]*)(?:,? pid=(?P<pid>\d+)|, rank=\d+, pid=(?P<pid3>\d+)| \+[\d.]+[smh])?"
    r"|pid=(?P<pid2>\d+))"
    r"(?:, ip=(?P<ip>[0-9A-Fa-f.:]+))?\) ?")
# What a log collector puts before each line, stripped like Ray's prefix (before or after it):
# `docker compose logs` "name  | " (padded to the longest service name; --timestamps adds an RFC 3339 time after it:
# not a log level, and no table row - its cells hold more " | "); `kubectl logs --prefix` "[pod/NAME/CONTAINER] " and
# --timestamps "2024-07-27T12:34:56.123Z " (a node's own container log files, /var/log/pods/..., in the CRI format:
# "<RFC 3339 time> stdout|stderr F|P "); GitHub Actions' downloaded logs, the same RFC 3339 time; syslog/journald
# "Dec  1 12:00:00 host unit[pid]: " (the pid makes it one), and Jenkins' timestamper, the bare "Nov 20 16:03:25 ".
_CAPTURE = re.compile(
    r"^(?:(?!(?i:info|warn|warning|error|debug|critical|fatal|trace|notice)\b)[A-Za-z][\w.-]{0,63} +\| (?!.*\s\|\s)|"
    r"\[pod/[^\]\s]+\] |\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) (?:std(?:out|err) [FP] )?|"
    r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d (?:[\w.-]+ [\w.@/-]+\[\d+\]: )?)")
# What a multi-node launcher puts before each line of a node's or a task's output, stripped like Ray's prefix.
# pdsh (DeepSpeed's multi-node runner) labels each line "host: ": an IPv4 address, or a lower-case host name
# with a digit, either hyphenated ("worker-1", "ip-10-0-0-1", "gpu-node-3.cluster") or letters then digits
# ("node01"); not a word that reports under its own name like one: a compiler, an interpreter, a network
# device ("eth0: link is down", "mlx5_0"), a setting ("fp16: True", "step100"), a CANN error code ("EL0004: ",
# upper case), an exception's type ("cv2.error"). The host names the node, and the process too (so that two
# hosts' interleaved tracebacks stay apart). Slurm's `srun --label` "N: " (the task, padded to the widest id);
# Open MPI's `mpirun --tag-output` "[jobid,rank]<stdout>:".
_NOT_HOSTS = (r"(?:gcc|g\+\+|clang|nvcc|ld|python|pip|collect|cv|eth|ens|enp|eno|bond|ib|mlx|nvme|sha|md|cuda|"
              r"step|epoch|layer|block|rank|lib)(?=[\d.\-_])")
_LAUNCHER = re.compile(
    r"^(?:\[\d+,(?P<mpi>\d+)\]<std(?:out|err|diag)>: ?| *(?P<task>\d{1,5}): |"
    r"(?P<host>(?:\d{1,3}\.){3}\d{1,3}|(?!" + _NOT_HOSTS + r")(?:(?=[a-z0-9-]*\d)[a-z][a-z0-9]*(?:-[a-z0-9]+)+|"
    r"[a-z]{3,}\d+)(?:\.[a-z][a-z0-9-]*)*): )")
# A rank's own prefix: torchrun's tee'd output (torch/distributed/elastic/multiprocessing/api.py: "[default0]:",
# role and local rank; "[rank0]:" from 2.3's log_line_prefix_template default). It names the process, so that
# the tracebacks of interleaved ranks stay apart.
_RANK = re.compile(r"^\[(?:rank|default)(\d+)\]: ?")
# A reply's quote markers: ">" and one space each, so that a quoted traceback keeps its own indentation.
_QUOTE = re.compile(r"^(?:> ?)+")
_RAY_REPEAT = re.compile(terminal.RAY_REPEAT_SUFFIX + r"\s*$")
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class LogReadError(OSError):
    """The log could not be read at all (missing, a directory, unreadable)."""


@dataclass
class Line:
    n: int                     # 1-based line number in its file
    text: str                  # the cleaned message (prefix stripped, capped)
    node: str | None = None    # Ray node ip, when the prefix names one
    process: str | None = None # the process a prefix names: Ray's "WorkerDict pid=123", a rank, CANN's pid
    file: str | None = None
    fallback: bool = False     # matched one of FALLBACK_PATTERNS (an error-looking line)

    def to_dict(self) -> dict:
        out = {"n": self.n, "text": _redact(self.text), "node": self.node}
        if self.process:
            out["process"] = self.process
        if self.file:
            out["file"] = self.file
        return out

    # The explain API promises lines as {"n", "text", "node"} mappings: dict(line) works too.
    def keys(self):
        return self.to_dict().keys()

    def __getitem__(self, key: str):
        return self.to_dict()[key]


@dataclass
class Explanation:
    rule: str
    category: str
    title: str
    cause: str
    fix: str
    confidence: float
    phase: str | None
    lines: list[Line]
    references: list[str] = field(default_factory=list)
    hits: int = 0               # how many lines matched in all
    consequence: bool = False
    specificity: int = 1
    subsumed_by: str | None = None  # a higher-ranked finding that claims the same line
    generic: bool = False           # from the generic layer (matching/terminal.py), not a rule

    def to_dict(self) -> dict:
        return {"rule": self.rule, "category": self.category, "title": self.title,
                "cause": self.cause, "fix": self.fix, "confidence": self.confidence,
                "phase": self.phase, "consequence": self.consequence, "hits": self.hits,
                "references": list(self.references),
                "lines": [ln.to_dict() for ln in self.lines]}


@dataclass
class Report:
    """The verdict on one or more logs: ranked findings, or the lines to look at first."""
    sources: list[str]
    findings: list[Explanation]
    fallback: list[Line]
    bytes_read: int = 0
    lines_read: int = 0
    truncated: bool = False    # a gzip stream ended early: we explained what was there
    gzip_error: str | None = None  # why it ended early (corrupt data, a missing end)

    def to_dict(self) -> dict:
        out = {"schema": SCHEMA, "source": ", ".join(self.sources),
               "findings": [f.to_dict() for f in self.findings]}
        if not self.findings:
            out["look_at"] = [ln.to_dict() for ln in self.fallback]
        out["stats"] = {"bytes": self.bytes_read, "lines": self.lines_read,
                        "truncated": self.truncated}
        return out


def _redact(text: str) -> str:
    """Redact secrets once matching.redact exists (another module; tolerate its absence)."""
    try:
        from matching.redact import redact_text
    except ImportError:
        return text
    return redact_text(text)


# --------------------------------------------------------------------------------------------
# The compiled catalog


def _block_form(pattern: str) -> str:
    """The pattern as the block prefilter runs it: without its leading ^ / trailing $."""
    if pattern.startswith("^"):
        pattern = pattern[1:]
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1]
    return pattern


class Matcher:
    """The catalog compiled once: a block prefilter and an exact per-line RE2 set."""

    def __init__(self, rules: Iterable[Rule], layer: terminal.Generic | None = None):
        self.rules = list(rules)
        self.layer = layer          # the generic layer under the rules (None: rules only)
        self.exprs: list[str] = []              # unique patterns; index = Set index
        index: dict[str, int] = {}

        def add(p: str) -> int:
            if p not in index:
                index[p] = len(self.exprs)
                self.exprs.append(p)
            return index[p]

        self.rule_patterns = [[add(p) for p in r.patterns] for r in self.rules]
        self.rule_near = [add(r.near.pattern) if r.near else None for r in self.rules]
        self.rule_requires = [add(r.requires) if r.requires else None for r in self.rules]
        self.fallback = {add(p) for p in FALLBACK_PATTERNS}
        # the generic layer's lines: like the fallback ones, they cost no rule evaluation
        # what the rules (and the fallback) look for: bench/explain_speed.py gives grep these; the
        # generic layer's own lines are extra work of doctor's, not part of the comparison
        self.patterns = list(self.exprs)
        layer_ids = {add(p) for p in (layer.line_patterns() if layer else ())}
        # error-like lines; those no rule matches or looks near are cheap (no rule evaluation), and
        # a rule's own pattern stays the rule's even when it is also an error-like one
        self.error_like = self.fallback | layer_ids
        used = {i for ids in self.rule_patterns for i in ids} | {i for i in self.rule_near if i is not None}
        # a rule that only requires an error-like line somewhere (a traceback) keeps it cheap: the
        # scan looks for it among the error-like lines until it is first seen (Scan._satisfy)
        required = {i for i in self.rule_requires if i is not None}
        self.cheap_required = (required & self.error_like) - used
        self.cheap = self.error_like - used - (required - self.cheap_required)

        opts = re2.Options()
        opts.max_mem = 64 << 20  # room for the whole catalog's DFA, so RE2 never drops to its NFA
        self.line_set = re2.Set.SearchSet(opts)
        for p in self.exprs:
            self.line_set.Add(p)
        self.line_set.Compile()
        self.prefilter = make_prefilter([_block_form(p) for p in self.exprs], frozenset(self.cheap))


_MATCHER: Matcher | None = None


def default_matcher() -> Matcher:
    global _MATCHER
    if _MATCHER is None:
        _MATCHER = Matcher(catalog(), terminal.generic())
    return _MATCHER


# --------------------------------------------------------------------------------------------
# Reading


def _ahead(stream: BinaryIO, prefilter) -> Ahead | None:
    """A helper scanning ahead, for a large regular file read from its start; None otherwise."""
    raw = getattr(stream, "raw", None)
    if not isinstance(stream, io.BufferedReader) or not isinstance(raw, io.FileIO):
        return None  # gzip, a BytesIO: read here
    try:
        st = os.fstat(raw.fileno())
        if stream.tell() != 0 or not stat.S_ISREG(st.st_mode):
            return None
        return start_ahead(prefilter, raw.fileno(), st.st_size, BLOCK_BYTES)
    except OSError:  # a pipe cannot tell; a helper that cannot start leaves the reader alone
        return None


_MONTHS = frozenset("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split())


def _may_capture(text: str) -> bool:
    """Whether a collector's prefix can start the text: a cheap test first, most lines have none."""
    first = text[0]
    if first.isdigit():
        return text[4:5] == "-"                       # an RFC 3339 time
    if first == "[":
        return text.startswith("[pod/")
    return " | " in text[:72] or (text[3:4] == " " and text[:3] in _MONTHS)


# A no-break space (U+00A0, UTF-8 C2 A0) where the program printed a space: what a log copied out of a
# web page holds (an issue thread, a chat, a wiki), often in place of every space. A block holding one is
# read with spaces, so that every pattern's spaces, `\s` and classes take it. Finding one costs a memchr
# of C2 (rare in logs: Latin-1 signs; CJK text's UTF-8 has none), and a check of the byte after each.
NBSP = "\u00a0".encode()
_NBSP_LOOKS = 64   # C2 bytes checked one by one; after that, one search of the rest


def has_nbsp(buf, end: int) -> bool:
    at = buf.find(b"\xc2", 0, end)
    for _ in range(_NBSP_LOOKS):
        if at < 0:
            return False
        if at + 1 < end and buf[at + 1] == 0xA0:
            return True
        at = buf.find(b"\xc2", at + 1, end)
    return at >= 0 and buf.find(NBSP, at, end) >= 0


def clean_line(raw: bytes) -> Line:
    """Decode a raw log line and split off what the machinery around the program added."""
    text = raw.decode("utf-8", "replace").rstrip("\r\n")
    if "\x1b" in text or "#033[" in text:
        text = _ANSI.sub("", text)
    elif "[0m" in text:
        text = _BARE_SGR.sub("", text)
    if text[:1] == ">":  # quoted in a reply (Markdown, e-mail): "> " before each line, "> > " nested
        text = _QUOTE.sub("", text, 1)
    node = process = None
    while text and (text[0].isalnum() or text[0] in "([ "):  # nested prefixes: the innermost Ray process, the first ip
        first = text[0]
        if first == "(" and (m := _RAY_PREFIX.match(text)):
            name, pid = m.group("name"), m.group("pid") or m.group("pid2") or m.group("pid3")
            process = f"{name} pid={pid}" if name and pid else (name or f"pid={pid}")
            node = node or m.group("ip")
        elif first == "[" and (m := _RANK.match(text)):
            process = process or f"rank {m.group(1)}"  # the rank, unless a Ray prefix named the process
        elif (first == "[" or ": " in text[:72]) and (m := _LAUNCHER.match(text)):
            host, rank, task = m.group("host"), m.group("mpi"), m.group("task")
            node = node or host
            process = process or (f"rank {rank}" if rank else f"task {task}" if task else f"host {host}")
        elif first in "( " or not _may_capture(text) or not (m := _CAPTURE.match(text)):
            if first == "[" and process is None and (c := terminal.CANN_PREFIX.match(text)):  # kept in the text
                process = f"{c.group('name')} pid={c.group('pid')}" if c.group("name") else f"pid={c.group('pid')}"
            break
        text = text[m.end():]
    if "across cluster]" in text[-terminal.RAY_REPEAT_TAIL:]:  # string ops first: linear on any line
        cut = text.rfind("[repeated ")
        if cut >= 0 and _RAY_REPEAT.match(text, cut):
            text = text[:cut].rstrip()
    text = _UNPRINTABLE.sub("?", text)
    return Line(0, text, node, process)


# What a directory of logs holds that is worth reading: Ray's session logs/ (worker-*.out/.err, raylet.out,
# gcs_server.err, python-core-*.log), a node's collected logs, rotated (raylet.out.1) and compressed ones.
LOG_SUFFIXES = (".log", ".out", ".err", ".txt", ".gz")
_LOG_NAME = re.compile(r"\.(?:log|out|err|txt)(?:\.\d+)?(?:\.gz)?$|\.gz$")


def log_paths(paths: list[str]) -> list[str]:
    """The logs to read: a directory stands for the non-empty log files under it, in path order
    (one node's Ray session logs/, or a folder per node)."""
    out = []
    for path in paths:
        if path == "-" or not os.path.isdir(path):
            out.append(path)
            continue
        try:  # (rglob passes over a folder it may not enter: another user's under /tmp/ray)
            found = sorted(str(f) for f in Path(path).rglob("*")
                           if _LOG_NAME.search(f.name) and f.is_file() and f.stat().st_size)
        except OSError as exc:  # the folder went away while it was listed
            raise LogReadError(f"{path}: {exc.strerror or exc}") from None
        if not found:
            raise LogReadError(f"{path}: a directory with no log files ({' '.join(LOG_SUFFIXES)}) under it")
        out.extend(found)
    return out


def open_log(path: str) -> tuple[BinaryIO, str]:
    """A binary stream of the log (gzip detected by its magic bytes), and its display name."""
    if path == "-":
        raw = sys.stdin.buffer
        name = "<stdin>"
        head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    else:
        name = path
        try:
            # buffered, so the gzip magic can be peeked at: a pipe or `<(cmd)` cannot seek back
            raw = io.BufferedReader(open(path, "rb", buffering=0))
        except IsADirectoryError:
            raise LogReadError(f"{path}: is a directory") from None
        except FileNotFoundError:
            raise LogReadError(f"{path}: no such file") from None
        except OSError as exc:
            raise LogReadError(f"{path}: {exc.strerror or exc}") from None
        head = raw.peek(2)[:2]
    if head == b"\x1f\x8b":
        return GzipStream(raw), name
    return raw, name


class GzipStream(io.RawIOBase):
    """A streaming gzip reader that keeps what it decoded when the file ends early (a crashed job's
    half-written log.gz): `truncated` says so instead of losing the last block to an exception."""

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.z = zlib.decompressobj(wbits=31)
        self.pending = b""
        self.truncated = False
        self.started = False

    def readable(self) -> bool:
        return True

    def readinto(self, view) -> int:
        while not self.pending:
            data = self.raw.read(1 << 20)
            if not data:
                if not self.z.eof and self.started:
                    self.truncated = True
                self.pending = self.z.flush() if not self.z.eof else b""
                if not self.pending:
                    return 0
                break
            while data:
                self.pending += self.z.decompress(data, 1 << 24)
                self.started = True
                if self.z.eof:  # a next gzip member may follow (concatenated .gz files)
                    data = self.z.unused_data
                    self.z = zlib.decompressobj(wbits=31)
                    if not data:
                        self.started = False
                else:
                    data = self.z.unconsumed_tail
        n = min(len(view), len(self.pending))
        view[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


def clip_line(buf, ls: int, le: int, hit: int) -> bytes:
    """A line's bytes; a very long one keeps its head (the prefixes), the hit and its tail (where
    a message printed after a long dump ends), so it still matches."""
    if le - ls <= MAX_LINE_BYTES:
        return bytes(buf[ls:le])
    head, tail = ls + 4096, le - 16384
    parts = [bytes(buf[ls:head])]
    if head < hit - 4096 and hit + 4096 < tail:
        parts.append(bytes(buf[hit - 4096:hit + 4096]))
    parts.append(bytes(buf[tail:le]))
    return b" ... ".join(parts)


def _placed(line: Line, n: int, name: str | None) -> Line:
    """A matched line, given its number and file and cut to what we print."""
    line.n, line.file, line.text = n, name, shorten(line.text)
    return line


def shorten(text: str) -> str:
    """The text we print: a long line shows its start and its end."""
    if len(text) <= MAX_TEXT:
        return text
    return text[:MAX_TEXT // 2] + " ... " + text[-MAX_TEXT // 2:]


class _Hits:
    """First and last hits of one pattern, and how many there were."""
    __slots__ = ("first", "last", "count")

    def __init__(self) -> None:
        self.first: list[Line] = []
        self.last: deque[Line] = deque(maxlen=KEEP_HITS)
        self.count = 0

    def add(self, line: Line) -> None:
        self.count += 1
        if len(self.first) < KEEP_HITS:
            self.first.append(line)
        else:
            self.last.append(line)

    def all(self) -> list[Line]:
        return self.first + list(self.last)


class _Numbers:
    """Line numbers in one block: number(pos) is the number of the line holding buf[pos], counted
    from the nearest position numbered before (the ascending ones are kept; the last one asked is
    too), so a block's newlines are counted about once however its lines are asked for."""
    __slots__ = ("buf", "at", "n", "cur", "cur_n")

    def __init__(self, buf, first: int, known: tuple[list[int], list[int]] | None = None):
        self.buf = buf
        # ascending (position, number); `known`: positions from 0 up and the newlines before each
        at, before = known or ([0], [0])
        self.at, self.n = at, [first + c for c in before]
        self.cur, self.cur_n = 0, first     # the last one asked

    @staticmethod
    def totals(buf, end: int) -> tuple[list[int], list[int]]:
        """Newlines before every STRIDE-th byte of buf[:end] and before end: then a number costs
        a count of STRIDE / 2 bytes at most."""
        at = [*range(0, end, STRIDE), end]
        count, n, total = block_lines.count, [0], 0
        for a, b in zip(at, at[1:]):
            total += count(buf, a, b)
            n.append(total)
        return at, n

    def __call__(self, pos: int) -> int:
        at, n, buf, cur = self.at, self.n, self.buf, self.cur
        count = block_lines.count
        i = bisect_right(at, pos) - 1       # at[i] <= pos
        base, num = (cur, self.cur_n) if at[i] < cur <= pos else (at[i], n[i])
        above = at[i + 1] if i + 1 < len(at) else None
        if cur > pos and cur - pos < pos - base and (above is None or cur < above):
            num = self.cur_n - count(buf, pos, cur)
        elif above is not None and above - pos < pos - base:
            num = n[i + 1] - count(buf, pos, above)
        else:
            num += count(buf, base, pos)
        if pos > at[-1]:
            at.append(pos)
            n.append(num)
        self.cur, self.cur_n = pos, num
        return num


class Scan:
    """Hits of every pattern over one or more streams."""

    def __init__(self, matcher: Matcher):
        self.m = matcher
        self.hits: dict[int, _Hits] = {}
        self.fallback_raw: deque[tuple] = deque(maxlen=FALLBACK_KEEP * 4)  # (n, file, raw bytes)
        self.bytes_read = 0
        self.lines_read = 0
        self.truncated = False
        self.gzip_error: str | None = None
        self.display: str | None = None
        self.collector = terminal.Collector(clean_line, matcher.layer) if matcher.layer else None
        self.pending = {i: re2.compile(matcher.exprs[i]) for i in matcher.cheap_required}

    def feed_stream(self, stream: BinaryIO, name: str | None = None, display: str | None = None) -> None:
        """Scan a binary stream in blocks; only prefilter candidates cost Python work. A large
        regular file has a helper on another core scanning blocks ahead (matching/ahead.py)."""
        self.display = display or name
        ahead = _ahead(stream, self.m.prefilter)  # before the buffer: the helper needs its own only
        try:
            self._blocks(stream, name, ahead)
        finally:
            if ahead is not None:
                ahead.close()

    def _blocks(self, stream: BinaryIO, name: str | None, ahead: Ahead | None) -> None:
        buf = bytearray(BLOCK_BYTES)
        view = memoryview(buf)
        filled = 0      # bytes of buf holding data: a carried partial line, then the new read
        line_base = 0   # newlines before buf[0]
        offset = 0      # where buf[0] is in the stream
        k = 0           # blocks cut so far
        eof = False
        while not eof:
            if filled == len(buf):  # one line fills the whole buffer: grow, up to the cap
                if len(buf) >= MAX_CARRY_BYTES:  # binary junk: scan it, keep the line number
                    self._scan(view, buf, filled, line_base, name)
                    offset, filled = offset + filled, 0
                else:
                    view.release()
                    buf.extend(bytes(len(buf)))
                    view = memoryview(buf)
            got = self._fill(stream, view, filled, name)
            eof = got == 0
            filled += got
            if eof:
                end = filled
            else:
                end = buf.rfind(b"\n", 0, filled) + 1
                if end == 0:
                    continue  # no complete line yet: read more
            known = pre = None
            if ahead is not None:  # count while the helper scans, then take what it found
                known = _Numbers.totals(buf, end)
                pre = ahead.take(k, offset, offset + end)
            line_base += self._scan(view, buf, end, line_base, name, pre, known)
            if eof and end and buf[end - 1] != 0x0A:
                line_base += 1  # a last line without a newline still counts
            rest = filled - end
            buf[:rest] = buf[end:filled]
            filled, offset, k = rest, offset + end, k + 1
        view.release()
        self.lines_read += line_base

    def _fill(self, stream: BinaryIO, view: memoryview, at: int, name: str | None) -> int:
        try:
            got = stream.readinto(view[at:]) or 0
        except (EOFError, zlib.error) as exc:
            if not self.bytes_read:
                raise LogReadError(f"{self.display or 'log'}: not a readable gzip file ({exc})") from None
            self.truncated, self.gzip_error = True, f"corrupt data ({exc})"
            return 0
        if not got and getattr(stream, "truncated", False):
            self.truncated = True
            self.gzip_error = self.gzip_error or "the compressed stream ends before its end marker"
        self.bytes_read += got
        return got

    def _scan(self, view: memoryview, buf, end: int, line_base: int, name: str | None,
              pre: tuple | None = None, known: tuple | None = None) -> int:
        """Check the candidate lines of buf[:end]; return how many newlines it holds. Most are hit
        by cheap patterns only (error-like words): they cost no exact match, and no line count
        until the generic layer keeps one. `pre`: the helper's hits; `known`: _Numbers.totals."""
        if has_nbsp(buf, end):  # read as spaces from here on; the helper's hits were for the raw bytes
            buf = bytes(buf[:end]).replace(NBSP, b" ")
            view, end, pre, known = memoryview(buf), len(buf), None, None
        cheap, other = pre or self.m.prefilter.candidates(view[:end])
        number = _Numbers(buf, line_base + 1, known)
        # the error-like lines: where they start, their bytes
        starts, lines, special = block_lines.hit_lines(buf, end, cheap, other, MAX_LINE_BYTES)
        dropped = set()
        for i, line_end, pos, has_other in special:
            if lines[i] is None:
                lines[i] = clip_line(buf, starts[i], line_end, pos)
            if has_other and not self._line(lines[i], number(starts[i]), name):  # match exactly
                dropped.add(i)
        if dropped:
            starts = [ls for i, ls in enumerate(starts) if i not in dropped]
            lines = [raw for i, raw in enumerate(lines) if i not in dropped]
        if self.pending and lines:
            self._satisfy(starts, lines, number, name)
        if self.collector is not None:
            self.collector.block(buf, starts, lines, name, number)
        # the last error-like lines: needed only if no rule matches (verified then)
        keep = -self.fallback_raw.maxlen
        self.fallback_raw.extend((number(ls), name, raw) for ls, raw in zip(starts[keep:], lines[keep:]))
        newlines = number(end) - line_base - 1
        if self.collector is not None:
            self._progress(buf, end, line_base + newlines, name)
            self._tail(buf, end, number, name)
        return newlines

    def _progress(self, buf, end: int, lines_at_end: int, name: str | None) -> None:
        """The block's last line that shows the run went on (a logged training step): one reverse
        literal search per block, not per line."""
        for literal, pattern in self.m.layer.progress:
            lit, stop = literal.encode(), end
            for _ in range(4):
                pos = buf.rfind(lit, 0, stop)
                if pos < 0:
                    break
                ls = buf.rfind(b"\n", 0, pos) + 1
                le = buf.find(b"\n", pos, end)
                if terminal._rx(pattern).search(clean_line(bytes(buf[ls:le if le >= 0 else end][:4096])).text):
                    self.collector.note_progress(name, lines_at_end - buf.count(b"\n", ls, end) + 1)
                    break
                stop = pos

    def _tail(self, buf, end: int, number, name: str | None) -> None:
        """The block's last whole lines, for a traceback the log ends inside (its frames follow
        the header the layer keeps); a last line longer than the tail leaves none. An empty block
        (the final read) changes nothing."""
        if end == 0:
            return
        ts = 0
        if end > terminal.TAIL_BYTES:
            ts = buf.find(b"\n", end - terminal.TAIL_BYTES, end) + 1 or end
        self.collector.note_tail(name, number(ts), bytes(buf[ts:end]))

    def _satisfy(self, starts: list[int], lines: list[bytes], number, name: str | None) -> None:
        """Record the first error-like line that each cheap `requires` pattern matches exactly."""
        for ls, raw in zip(starts, lines):
            line = clean_line(raw)  # once a line, however many patterns are still pending
            for idx in [i for i, rx in self.pending.items() if rx.search(line.text)]:
                self.hits.setdefault(idx, _Hits()).add(_placed(line, number(ls), name))
                del self.pending[idx]
            if not self.pending:
                return

    def _line(self, raw: bytes, n: int, name: str | None) -> bool:
        """Match a candidate line exactly; true when it is error-like (for the generic layer)."""
        line = self._match(raw, n, name)
        return line is not None and line.fallback

    def _match(self, raw: bytes, n: int, name: str | None) -> Line | None:
        """Record which patterns the cleaned line matches; None when it matches none."""
        line = clean_line(raw)
        matched = self.m.line_set.Match(line.text)
        if not matched:
            return None
        _placed(line, n, name)
        for idx in matched:
            if idx in self.m.error_like:
                line.fallback = True
            if idx in self.m.cheap:
                continue
            hits = self.hits.get(idx)
            if hits is None:
                hits = self.hits[idx] = _Hits()
            hits.add(line)
        return line

    def fallback_lines(self) -> list[Line]:
        """The last error-looking lines, verified exactly now (the prefilter over-reports)."""
        out = []
        for n, name, raw in self.fallback_raw:
            line = clean_line(raw)
            if self.m.line_set.Match(line.text):
                out.append(_placed(line, n, name))
        return out

    # ----------------------------------------------------------------------------------------
    # Verdict

    def findings(self) -> list[Explanation]:
        found, explained, weak = [], set(), set()
        for i, rule in enumerate(self.m.rules):
            exp = self._evaluate(i, rule)
            if exp is not None:
                found.append(exp)
                (weak if rule.consequence else explained).update(self._lines_of_rule(i))
        if self.collector is None:
            return rank(found)
        _demote(found, self.m.layer)
        if any(not e.consequence for e in found):  # a rule names a cause: it ranks above the layer anyway
            return rank(self._yielded(found, explained, weak), self.m.layer)
        verdicts = terminal.analyse(self.collector, explained, self.m.layer, frozenset(weak - explained))
        generic = [_generic_explanation(v, hits) for v, hits in verdicts]
        return rank(found + generic, self.m.layer)

    def _yielded(self, found: list[Explanation], explained: set, weak: set) -> list[Explanation]:
        """A rule's finding that the generic class it yields to reads more precisely (from the frames a
        rule does not see: a missing module raised inside a source tree of its package) gives way."""
        by_id = {rule.id: (i, rule) for i, rule in enumerate(self.m.rules)}
        yielding = {e.rule: (by_id[e.rule][1].yields_to, self._lines_of_rule(by_id[e.rule][0])) for e in found
                    if not e.generic and by_id[e.rule][1].yields_to}
        if not yielding:
            return found
        # the layer reads the yielding rules' lines as if no rule had claimed them or the lines beside them
        # (another rule's line printed next to one would otherwise make it that rule's report)
        near = {(f, n + d) for lines in (ls for _, ls in yielding.values()) for f, n in lines
                for d in range(-terminal.NEAR_RULE, terminal.NEAR_RULE + 1)}
        rest = explained - near
        verdicts = terminal.analyse(self.collector, rest, self.m.layer, frozenset(weak - rest), limit=None)
        out = []
        for e in found:
            wanted, lines = yielding.get(e.rule, ((), set()))
            v = next((v for v, _ in verdicts if v.cls.id in wanted
                      and {(ln.file or "", ln.n) for ln in terminal.evidence(v)} & lines), None)
            if v is None:
                out.append(e)
                continue
            x = _generic_explanation(v, e.hits)
            x.generic, x.specificity = False, e.specificity  # it keeps the rule's place among the causes
            out.append(x)
        return out

    def _lines_of_rule(self, i: int) -> set[tuple[str, int]]:
        """Every kept line a rule's patterns hit: the generic layer leaves them to the rule."""
        out = set()
        for idx in self.m.rule_patterns[i]:
            h = self.hits.get(idx)
            if h:
                out.update((ln.file or "", ln.n) for ln in h.all())
        return out

    def _evaluate(self, i: int, rule: Rule) -> Explanation | None:
        req = self.m.rule_requires[i]
        if req is not None and req not in self.hits:
            return None
        primary: dict[tuple, Line] = {}
        total = 0
        for idx in self.m.rule_patterns[i]:
            h = self.hits.get(idx)
            if h:
                total += h.count
                for ln in h.all():
                    primary[(ln.file, ln.n)] = ln
        if not primary:
            return None
        lines = sorted(primary.values(), key=lambda ln: (ln.file or "", ln.n))
        context: list[Line] = []
        near_idx = self.m.rule_near[i]
        if near_idx is not None:
            near_hits = self.hits.get(near_idx)
            if not near_hits:
                return None
            within = rule.near.within
            near_lines = near_hits.all()
            kept = []
            for ln in lines:
                close = [c for c in near_lines
                         if c.file == ln.file and abs(c.n - ln.n) <= within]
                if close:
                    kept.append(ln)
                    best = min(close, key=lambda c: abs(c.n - ln.n))
                    if best not in context:
                        context.append(best)
            if not kept:
                return None
            lines = kept
        shown = lines[:SHOW_LINES - min(len(context), 2)] + context[:2]
        shown = sorted({(ln.file, ln.n): ln for ln in shown}.values(),
                       key=lambda ln: (ln.file or "", ln.n))
        return Explanation(
            rule=rule.id, category=rule.category, title=rule.title, cause=rule.cause, fix=rule.fix,
            confidence=_confidence(rule), phase=rule.phase, lines=shown,
            references=list(rule.references), hits=total, consequence=rule.consequence,
            specificity=rule.specificity)

    def report(self, sources: list[str], all: bool = False) -> Report:
        ranked = self.findings()
        shown = ranked if all else [f for f in ranked if f.subsumed_by is None]
        look_at = [] if shown else self.fallback_lines()[-FALLBACK_KEEP:]
        return Report(sources, shown, look_at, self.bytes_read,
                      self.lines_read, self.truncated, self.gzip_error)


def _generic_explanation(v: terminal.Verdict, hits: int) -> Explanation:
    """A finding of the generic layer: its class's id, cause and fix, the family member's meaning."""
    c = v.cls
    title, cause = c.title, c.cause
    if v.member:
        code = _redact(v.code.strip())   # a cut traceback's phase has none; a line's words may hold a secret
        title = f"{c.title}: {code} ({v.member.meaning})" if code else f"{c.title} ({v.member.meaning})"
        cause = f"{v.member.meaning}.\n{c.cause}"
    lines = terminal.evidence(v)
    for ln in lines:
        ln.text = shorten(ln.text)
    return Explanation(rule=c.id, category=v.category, title=title, cause=cause, fix=c.fix,
                       confidence=c.confidence, phase=None, lines=lines,
                       references=list(c.references), hits=hits, specificity=0, generic=True)


def _confidence(rule: Rule) -> float:
    """How sure a match makes us: consequences say little; context (near/requires) adds."""
    if rule.consequence:
        return 0.3
    score = 0.6 + 0.1 * min(rule.specificity, 3)
    if rule.near or rule.requires:
        score += 0.05
    return round(min(score, 0.95), 2)


def _anchor(e: Explanation) -> tuple[str, int]:
    first = e.lines[0]
    return first.file or "", first.n


def _demote(found: list[Explanation], layer: terminal.Generic | None) -> None:
    """A rule finding whose evidence is only after-effects (a dead peer, a store waiting for
    clients) is a consequence too, whatever its rule says."""
    if layer is None:
        return
    for e in found:
        if not e.generic and not e.consequence and e.lines and all(
                terminal.is_consequence_line(ln.text, layer) for ln in e.lines):
            e.consequence = True


def _seen_from_peer(e: Explanation, incident: list[Explanation], layer: terminal.Generic | None) -> bool:
    """A communication failure of one process while another process of the same incident failed of its
    own: what it saw of that peer's end (generic.toml [peers]), so it ranks after that cause."""
    if layer is None or e.category not in layer.peer_effects:
        return False
    mine = e.lines[0].process if e.lines else None
    return mine is not None and any(
        x.category in layer.peer_causes and x.lines and x.lines[0].process not in (None, mine) for x in incident)


def rank(found: list[Explanation], layer: terminal.Generic | None = None) -> list[Explanation]:
    """Real causes first (rules by incident, then the generic layer's), then the consequences:
    the earliest incident first, the most specific rule first within it."""
    _demote(found, layer)
    real = sorted((e for e in found if not e.consequence and not e.generic), key=_anchor)
    generic = [e for e in found if e.generic]   # already in the layer's order
    after = sorted((e for e in found if e.consequence), key=lambda e: (-e.specificity, _anchor(e)))
    incidents: list[list[Explanation]] = []
    for e in real:
        last = incidents[-1][-1] if incidents else None
        if last and _anchor(last)[0] == _anchor(e)[0] and _anchor(e)[1] - _anchor(last)[1] <= INCIDENT_GAP:
            incidents[-1].append(e)
        else:
            incidents.append([e])
    ordered = [e for inc in incidents
               for e in sorted(inc, key=lambda e: (_seen_from_peer(e, inc, layer), -e.specificity, _anchor(e)))]
    ordered += generic + after
    claimed: dict[tuple, str] = {}
    for e in ordered:  # a lower-ranked rule whose evidence a higher one already explains
        keys = {(ln.file or "", ln.n) for ln in e.lines}
        owner = next((claimed[k] for k in keys if k in claimed), None)
        if owner:
            e.subsumed_by = owner
        elif not e.generic:  # a generic finding may read its cause out of a consequence's own line
            for k in keys:
                claimed[k] = e.rule
    return ordered


# --------------------------------------------------------------------------------------------
# The API


def explain_report(paths: list[str], all: bool = False, matcher: Matcher | None = None) -> Report:
    """Scan every log in `paths` ("-" is stdin, a directory its log files) and rank what they show.
    Raises LogReadError."""
    scan = Scan(matcher or default_matcher())
    names, files = [], log_paths(paths)
    expanded = files != paths  # a directory stood for its files: name them, report the directory
    for path in files:
        stream, name = open_log(path)
        names.append(name)
        try:
            scan.feed_stream(stream, name if len(files) > 1 or expanded else None, display=name)
        except OSError as exc:
            if isinstance(exc, LogReadError):
                raise
            raise LogReadError(f"{name}: {exc.strerror or exc}") from None
        finally:
            if path != "-":
                stream.close()
    return scan.report(list(paths) if expanded else names, all=all)


def explain_paths(paths: list[str], all: bool = False) -> list[Explanation]:
    """Ranked explanations of the logs; the first is the root cause. Empty: nothing known."""
    return explain_report(paths, all=all).findings


def explain_text_report(text: str | bytes, all: bool = False, matcher: Matcher | None = None) -> Report:
    """The report for a log held in memory (tests, the supervisor's captured output)."""
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    scan = Scan(matcher or default_matcher())
    scan.feed_stream(io.BytesIO(data), display="<text>")
    return scan.report(["<text>"], all=all)


def explain_text(text: str | bytes, all: bool = False, matcher: Matcher | None = None) -> list[Explanation]:
    return explain_text_report(text, all=all, matcher=matcher).findings
