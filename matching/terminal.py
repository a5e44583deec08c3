"""The generic layer of `doctor explain`: the terminal failure that no rule names.

The rules (knowledge/rules/) know particular failures by their words. Under them, this layer finds
how the run ended - the last Python exception with its `During handling` / `direct cause` chain, an
error line of pip, CANN, NCCL or CUDA, a non-zero exit or a kill by signal - and classifies it by the
exception's type, the module that raised it (the innermost frames) and its words, with the classes
of knowledge/generic.toml. Its findings carry a lower confidence than a rule's.

It stays off the hot path: the scanner (matching/explain.py) hands it only the lines its prefilter
flagged as error-like, with the raw bytes before each (the traceback), and only a bounded number of
them: the first ones of the log, the first ones of each exception type, and the last ones.
"""
from __future__ import annotations

import sys
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain, compress, islice, repeat, takewhile
from operator import not_
from pathlib import Path

import re2

from knowledge.vocabulary import CATEGORIES
from matching.catalog import CatalogError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

GENERIC_FILE = Path(__file__).resolve().parents[1] / "knowledge" / "generic.toml"

CONTEXT_BYTES = 12 << 10   # raw bytes kept before an event's line: its traceback
FIRST_EVENTS = 64          # the first events of the log, kept whole
PER_TYPE = 2               # and the first events of each exception type / line class
MAX_TYPES = 64
LAST_EVENTS = 16           # and the last ones
TAIL_PER_BLOCK = 32        # after the first ones, a block's last candidates only
KEY_CACHE = 4096           # distinct flagged lines whose key is remembered
FRAMES_SHOWN = 1           # innermost frames shown as evidence
DETAIL_LINES = 2           # lines right under a tool's closing error line read as its detail
PHASE_FRAMES = 6           # innermost frames of a cut traceback read for the phase it stopped in
TAIL_BYTES = 16 << 10      # each file's last bytes: the frames of a traceback the log ends inside
MAX_FINDINGS = 3
NEAR_RULE = 5              # a flagged line this close to a rule's line is part of that report
LAST_LINES = 8             # a log's last (non-empty) lines where its closing error line is looked for
TITLE_WORDS = 80           # characters of that line's words a finding's title shows

# An exception line: the type (dotted, ending like an exception), an optional wrapped type, the message.
# vLLM prefixes every line of a logged traceback with "ERROR <date> [file:line] "; torchrun with "[rankN]: "
# (twice when a rank's tee'd output is logged again); docker build's plain progress with "#N SECONDS ".
# Indented: pip and uv print a failed build's own output indented under their report; Python prints
# an ExceptionGroup's members behind "  | " (traceback.TracebackException.format).
# pytest (src/_pytest/_code/code.py, FormattedExcinfo.get_exconly) prints the exception behind its fail
# marker "E" and the indent ("E   ", deeper under indented source), and its short summary
# (src/_pytest/terminal.py, _get_line_with_reprcrash_message) "FAILED|ERROR <node id> - <exception line>".
_LEVEL = r"(?:(?P<lvl>ERROR|CRITICAL)\s[^\]]{0,80}\]\s*)?"
# torchelastic's error record (torch/distributed/elastic/multiprocessing/errors/error_handler.py: {"message":
# f"{type(e).__name__}: {e}", ...}) as it is logged, indented JSON: '  "message": "RendezvousConnectionError: ...'.
# torch's own log lines (torch/_logging/_internal.py TorchLogsFormatter, glog's layout) begin
# "E1201 11:45:54.718000 26561 path/file.py:11] " (level letter, MMDD, time, pid, where).
# A paste copied with its line numbers ("517 [rank0]: KeyError: ...", GitHub's log viewer; `cat -n`'s "   517<TAB>"): a
# number first (the type must still follow: a count opening a log line is no exception line).
_PREFIX = (r"^(?: {0,6}\d{1,6}(?: {1,3}|\t))?(?:\[(?:rank|default)\d+\]:\s*){0,2}(?:#\d+ \d+\.\d+ )?(?:[EFC]\d{4} [\d:.]+ \d+ [^\]\s]*:\d+\] ?)?"
           r"(?:E\s+|(?:FAILED|ERROR) \S+ - |\s*\"message\": \")?[ \t]*(?:\| )?")
# A bare `raise Exception(...)` prints the type alone ("Exception: Version mismatch: ..."); a type of a module
# named for its errors may end otherwise (omegaconf.errors.MissingMandatoryValue, aiohttp.web_exceptions.HTTPNotFound,
# torch._dynamo.exc.Unsupported), and pyarrow's all begin with Arrow (pyarrow/error.pxi: ArrowInvalid, ArrowCapacityError).
# The exceptions Python's own library (and grpc, under Ray and vLLM) names otherwise than "...Error": the builtin
# ExceptionGroup and StopAsyncIteration, concurrent.futures' broken pool, subprocess's timeout, http.client's
# dropped connection, zipfile's and queue's, socket.timeout (before 3.10), grpc's failed call. Unqualified where
# the CamelCase name is distinctive; qualified by its module where it is a common word (timeout, Empty, Full), and
# then only with the message Python gives it (ODD_WORDS), so that a setting "socket.timeout: 60" stays a setting.
_ODD_TYPES = (r"Broken(?:Process|Thread)Pool|BrokenExecutor|TimeoutExpired|RemoteDisconnected|IncompleteRead|"
              r"BadStatusLine|BadZipFile|StopAsyncIteration|(?:Base)?ExceptionGroup|_MultiThreadedRendezvous|"
              r"socket\.timeout|_?queue\.(?:Empty|Full)")
ODD_WORDS = {"timeout": ("", "timed out"), "Empty": ("",), "Full": ("",)}
_ERRORS_MODULE = r"(?:[A-Za-z_]\w*\.){0,5}(?:[A-Za-z_]*(?:exceptions?|errors?|exc)\.[A-Z]\w*|Arrow[A-Z]\w*)"
EXC_LINE = re2.compile(
    _PREFIX + _LEVEL +
    r"(?P<type>(?:[A-Za-z_]\w*\.){0,6}(?:_?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Timeout)|Exception|"
    r"StopIteration|gaierror|herror|" + _ODD_TYPES + ")|" + _ERRORS_MODULE + r")(?:\((?P<inner>[\w.]*)\))?(?::\s?(?P<msg>.*))?$")
# Prefilter forms: which lines are worth a look (exception lines; the rest come from the classes).
# matching/explain.py's fallback lines flag "SomeError: message"; these add the exceptions Python
# prints without a message (a bare `assert`), other endings, private types, Ray's wrapped ones.
EXCEPTION_PATTERNS = (r"^\s*(?:[\w.]+\.)?(?:AssertionError|KeyboardInterrupt|MemoryError|StopIteration|"
                      r"NotImplementedError|RecursionError|SystemExit)\s*$",
                      r"\b[A-Z]\w*(?:Exit|Interrupt|Failure|Timeout)(?:\([\w.]*\))?: |\._[A-Z]\w*Error: |"
                      r"\b[A-Z]\w*(?:Error|Exception)\([\w.]*\): |\bsocket\.(?:gaierror|herror): ",
                      r"(?:^|[\s.:\]])(?:" + _ODD_TYPES + r")(?::\s|\s*$)",
                      r"(?:^|[\s:\]])Exception: |\b[a-z_]*(?:exceptions?|errors?|exc)\.[A-Z]\w*: |\bArrow[A-Z]\w*: ")
# Python's header, and Ray's: RayTaskError.__str__ (ray/exceptions.py) prints the remote traceback with
# its "Traceback ..." line replaced by "ray::<proctitle>() (pid=N, ip=...)", often on the wrapper's line
# ("ray.exceptions.RayTaskError(KeyError): ray::WorkerDict.f() (pid=...)").
# pytest heads each failed test's report with "____ test_name ____" (src/_pytest/terminal.py, summary_failures:
# write_sep("_", ...)): the frames above it belong to another test.
# IPython's (core/ultratb.py, the notebook's and the console's) names the type first, right-justifies the rest, no colon:
# "PermissionError                           Traceback (most recent call last)".
HEADER = re2.compile(r"Traceback \(most recent call last\):|\bray::[\w.<>]+\(\)(?: \(pid=\d+|\s*$)|^_{3,} \S.* _{3,}$|"
                     r"^[A-Za-z_][\w.]*\s{2,}Traceback \(most recent call last\)\s*$")
PY_HEADER = "Traceback (most recent call last)"
# sys.unraisablehook's default output: an exception in __del__ or a callback, printed and ignored
IGNORED = re2.compile(r"^Exception ignored (?:in|on|while)\b")
# Searched, not anchored: torchrun's "[rank0]: " and vLLM's "ERROR <date> [file:line] " may precede.
# And pytest's frame line (src/_pytest/_code/code.py, ReprFileLocation): "path:N: in func" (--tb=short);
# --tb=long (the default) prints "path:N: " under each entry's source, the last one's with the type.
# IPython's frames: "File /path/x.py:12, in f(a)" (8.x, core/tbtools.py) and "/path/x.py in f(a, b)" (up to 7.x).
FRAME = re2.compile(r'(?:^|\s)File "(?P<path>[^"]+)", line \d+, in (?P<func>\S+)|'
                    r'^(?P<tpath>[^\s:"]+\.py):\d+: ?(?:in (?P<tfunc>\S+)|[A-Z]\w*)?$|'
                    r'^(?:File )?(?P<ipath>[~/][^\s:,]*\.py)(?::\d+,)? in (?P<ifunc><?\w+>?)\(')
# A frame line a hard-wrapped paste broke at the spaces CPython prints (traceback.py): `File` and its quoted
# path, then `line N, in f`, on lines of their own. Read where a traceback's frames are gathered above its
# exception line (_traceback_above); a log that ends inside such frames is still read by FRAME alone.
WRAPPED_AT = re2.compile(r"^\s*line \d+, in (?P<func>\S+)\s*$")
WRAPPED_PATH = re2.compile(r'^\s*(?P<file>File\s+)?"(?P<path>[^"]+\.py)",\s*$')
WRAPPED_FILE = re2.compile(r"(?:^|\s)File\s*$")
# The other lines of a traceback IPython prints between its frames: a cell's own ("<ipython-input-2-ab> in <module>",
# 8.x "Cell In[1], line 1") and the source lines around the current one, marked "----> 12" (core/ultratb.py).
IPY_CONTEXT = re2.compile(r"^(?:<ipython-input-[\w-]+> in |Cell In\[\d+\], line \d+|-*> ?\d+ )")
CHAIN = re2.compile(r"(?:During handling of the above exception, another exception occurred|"
                    r"The above exception was the direct cause of the following exception):")
LOGGED = re2.compile(r"\b(?:ERROR|WARNING|WARN|INFO|DEBUG|CRITICAL)\b")
WARNING_LINE = re2.compile(r"^\s*(?:\[?\w+\s?\d*\]?\s)?(?:WARNING|WARN|INFO|DEBUG)\b|^\[?[WI]\d{4}\b|"
                           r"^\S+:\d+: \w*Warning: |\b(?:User|Future|Deprecation|Runtime|Resource)Warning\b|"
                           r"\bNCCL (?:INFO|WARN)\b|^.{0,80}?\[(?:INFO|WARNING|WARN|DEBUG|EVENT|TRACE)\]")
# Ray's log deduplicator: a line other workers printed too (ray/_private/ray_logging/__init__.py LogDeduplicator),
# shown once more with its count; the only copy of a failure when the first is not in the log (a later paste).
# The first repeat of a session carries a hint after the count (_warn_once), and both are coloured (_color:
# green, then a reset), so the count is not always where the line ends.
RAY_REPEAT_SUFFIX = r"\[repeated \d+x across cluster\](?: \(Ray deduplicates logs by default\.[^()]*\))?"
RAY_REPEAT = re2.compile(RAY_REPEAT_SUFFIX.encode())
RAY_REPEAT_END = re2.compile(RAY_REPEAT_SUFFIX.encode() + rb"(?:\x1b?\[0m)?\s*$")
RAY_REPEAT_TAIL = 320  # bytes: the count, the hint and the colour codes fit in them
# CANN's own log prefix (the slog format of every CANN module): "[ERROR] HCCL(128258,python):2026-02-27-...",
# "[ERROR] RUNTIME(27271,ker_DP7_EP7) :...": the level, the module, the process's pid and name. It stays in the
# line's text (rules read it) and names the process; the same process prints its error manager's detail lines
# ("EZ9999: Inner Error!", a reason) without it.
CANN_PREFIX = re2.compile(r"^\[(?:ERROR|WARNING|INFO|EVENT|DEBUG|TRACE)\] [A-Z][A-Z_]*\((?P<pid>\d+),(?P<name>[^)\s]*)\) ?:")


def is_ray_repeat(raw_line: bytes) -> bool:
    """Whether a raw line is Ray's repeat of a line (a substring test first: most lines are not)."""
    tail = raw_line[-RAY_REPEAT_TAIL:]
    return b"across cluster]" in tail and RAY_REPEAT_END.search(tail) is not None
# py-spy --native's frame with no symbol: "    0x7f3a2b (libc.so.6)", no help as evidence
NATIVE_ONLY = re2.compile(r"^\s+0x[0-9a-f]+ \(")
# The headers of a stack printed on purpose, which a log may end in without failing: logging's stack_info
# (Lib/logging/__init__.py Formatter.formatStack: "Stack (most recent call last):"), torch dynamo's graph-break
# report ("User code traceback:"), faulthandler's dump of a thread ("Thread 0x... (most recent call first):").
STACK_DUMP = re2.compile(r"^Stack \(most recent call last\):|User code traceback:|\(most recent call first\):")
# ... except NCCL's trace of an error result (src/include/checks.h: INFO "file:line [(function)] -> N"), which is
# printed at INFO level but only when a call failed (N: an ncclResult_t error, 1-6)
# The exception type of a raw line, found cheaply (no decoding, no prefix stripping)
KEY_RX = re2.compile(rb"(?:^|[\s)\]:\"])((?:[A-Za-z_]\w*\.){0,6}(?:_?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Timeout)|Exception|StopIteration|gaierror|herror|" + _ODD_TYPES.encode() + rb")|"
                     rb"(?:[A-Za-z_]\w*\.){0,5}(?:[A-Za-z_]*(?:exceptions?|errors?|exc)\.[A-Z]\w*|Arrow[A-Z]\w*))"
                     rb"(?:\([\w.]*\))?(?::|\s*$)")
MSG_PATH = re2.compile(r"""['"(](?P<path>(?:/|\.\.?/)[^'")\s]+)""")
# The module an import failed in: "No module named 'a.b'" (Python/import.c), "cannot import name 'x' from
# 'a.b' (path)" (Python/ceval.c, import_from); its top-level package is group 1.
IMPORTED = re2.compile(r"^No module named '([\w]+)[\w.]*'|^cannot import name '\w+' from (?:partially initialized module )?'(\w+)")
# A module without the attribute code asked for (CPython's "module 'a.b' has no attribute 'x'", Objects/moduleobject.c).
LACKING = re2.compile(r"^module '(\w+)[\w.]*' has no attribute ")
# An install location, a frozen module, or a path elided in the paste (".../pkg/mod.py"): no tree shown.
INSTALLED = re2.compile(r"(?:site|dist)-packages|/lib/python\d|^<|^\.\.\.")
# The standard library's own files (lib/python3.X/, not site-/dist-packages under it).
STDLIB = re2.compile(r"(?:[/\\]lib(?:64)?[/\\]python\d(?:\.\d+)?|[/\\]Lib)[/\\](?:[\w-]+[/\\])?[\w-]+\.py$")
# The installed package a frame's file belongs to: the first path part under site-/dist-packages.
PACKAGE = re2.compile(r"(?:site|dist)-packages[/\\](\w+)")


class GenericError(CatalogError):
    """knowledge/generic.toml cannot be used; the message names the class."""


# ------------------------------------------------------------------------------------------------
# The classes


@dataclass(frozen=True)
class Member:
    match: str
    meaning: str
    category: str


@dataclass(frozen=True)
class Alt:
    """Another way an exception belongs to a class (its `also` tables): the same conditions."""
    exceptions: tuple[str, ...]
    words: str | None = None
    raised_in: str | None = None
    not_in: str | None = None


@dataclass(frozen=True)
class GClass:
    id: str
    category: str
    title: str
    cause: str
    fix: str
    confidence: float
    references: tuple[str, ...]
    exceptions: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()
    words: str | None = None
    raised_in: str | None = None
    not_in: str | None = None
    terminal: bool = False
    alone: bool = False                   # only when the log shows nothing but consequences
    after: bool = False                   # ranks after the other classes' findings (an exit status)
    cut: bool = False                     # only a plain line the log ends on: what it opened was cut off
    last: bool = False                    # a family read from the log's last lines alone (no line flagged)
    trailing: str | None = None           # a `last` family: lines its tool prints after it (not counted)
    cleared_by: str | None = None         # a `last` family: a later line that says the failure was survived
    dump: str | None = None               # a stack dump's thread header (or a frame only a dump prints): a hang
    dump_frames: str | None = None        # a dump class: its frame lines
    dump_lines: str | None = None         # a dump class: the other lines a dump prints
    unless: str | None = None             # a dump class: a line that says the dump was a crash's, not a hang's
    pattern: str | None = None            # a family: the code's pattern, with a `code` group
    at_info: tuple[str, ...] = ()         # lines that report a failure though printed at INFO/WARN level
    phases: tuple[Member, ...] = ()       # a cut class: what the innermost frames it stopped in point to
    members: tuple[Member, ...] = ()
    also: tuple[Alt, ...] = ()            # other (exceptions, words, raised_in, not_in) that match

    @property
    def flagged(self) -> tuple[str, ...]:
        """Every line pattern of the class: its lines, and those that count at INFO level."""
        return self.lines + self.at_info

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("id", "category", "title", "cause", "fix", "confidence",
                                             "words", "raised_in", "not_in", "terminal", "after", "cut", "last", "trailing",
                                             "cleared_by", "pattern", "dump", "dump_frames", "dump_lines", "unless")}
        out.update(exceptions=list(self.exceptions), lines=list(self.lines), at_info=list(self.at_info),
                   references=list(self.references), layer="generic",
                   members=[vars(m) for m in self.members], phases=[vars(m) for m in self.phases],
                   also=[dict(vars(a), exceptions=list(a.exceptions)) for a in self.also])
        return out


@dataclass(frozen=True)
class Generic:
    classes: tuple[GClass, ...]
    consequences: tuple[str, ...]
    progress: tuple[tuple[str, str], ...]   # (literal, pattern)
    points_back: str = ""                   # a consequence's words that send the reader to an earlier error
    peer_effects: tuple[str, ...] = ()      # categories of what a process sees of a peer's failure ([peers])
    peer_causes: tuple[str, ...] = ()       # categories of a failure of its own, which its peers then see

    def __hash__(self) -> int:
        """Hashed once: the layer's helpers are cached on it, per flagged line (a deep hash costs ~25 us)."""
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.classes, self.consequences, self.progress, self.points_back, self.peer_effects,
                      self.peer_causes))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict:
        """Pickled (matching/cache.py) without the hash: str hashes differ from process to process."""
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def by_id(self, cid: str) -> GClass | None:
        return next((c for c in self.classes if c.id == cid), None)

    def line_patterns(self) -> list[str]:
        """What the scanner's prefilter must flag for this layer."""
        return list(EXCEPTION_PATTERNS) + [p for c in self.classes for p in c.flagged]

    def at_info(self) -> tuple[str, ...]:
        return tuple(p for c in self.classes for p in c.at_info)


_CLASS_KEYS = {"id", "category", "title", "cause", "fix", "confidence", "references", "exceptions",
               "lines", "at_info", "words", "raised_in", "not_in", "terminal", "alone", "after", "cut", "also",
               "phases", "dump", "dump_frames", "dump_lines", "unless"}
_ALT_KEYS = {"exceptions", "words", "raised_in", "not_in"}
_FAMILY_KEYS = {"id", "title", "cause", "fix", "confidence", "references", "lines", "at_info", "pattern", "members",
                "last", "trailing", "cleared_by"}


def _regex(value, where: str) -> str:
    try:
        re2.compile(value)
    except (re2.error, TypeError) as exc:
        raise GenericError(f"{where}: {value!r} is not valid RE2: {exc}") from None
    return value


def _make_class(t: dict, family: bool) -> GClass:
    where = f"generic.toml: {t.get('id', '?')!r}"
    allowed = _FAMILY_KEYS if family else _CLASS_KEYS
    if set(t) - allowed:
        raise GenericError(f"{where}: unknown field {sorted(set(t) - allowed)[0]!r}")
    for key in ("id", "title", "cause", "fix", "references", "confidence") + (() if family else ("category",)):
        if key not in t:
            raise GenericError(f"{where}: missing field {key!r}")
    if not family and t["category"] not in CATEGORIES:
        raise GenericError(f"{where}: unknown category {t['category']!r}")
    if not 0 < t["confidence"] < 0.6:
        raise GenericError(f"{where}: confidence must be below a rule's (0 < c < 0.6)")
    members = tuple(Member(_regex(m["match"], where), m["meaning"], m["category"])
                    for m in t.get("members", ()))
    phases = tuple(Member(_regex(m["frames"], where), m["meaning"], m["category"]) for m in t.get("phases", ()))
    if any(m.category not in CATEGORIES for m in members + phases):
        raise GenericError(f"{where}: a member has an unknown category")
    if phases and not t.get("cut"):
        raise GenericError(f"{where}: phases belong to a cut class (cut = true)")
    for key in ("words", "raised_in", "not_in", "pattern", "trailing", "cleared_by", "dump", "dump_frames", "dump_lines", "unless"):
        if t.get(key) is not None:
            _regex(t[key], where)
    lines = tuple(_regex(p, where) for p in t.get("lines", ()))
    at_info = tuple(_regex(p, where) for p in t.get("at_info", ()))
    also = tuple(_make_alt(a, where) for a in t.get("also", ()))
    if t.get("last") and (lines or at_info or not family):
        raise GenericError(f"{where}: a `last` family has a pattern and members, no lines (it flags none)")
    if not (lines or at_info or t.get("exceptions") or t.get("last") or t.get("dump")):
        raise GenericError(f"{where}: give exceptions or lines")
    if t.get("dump") and (lines or at_info or t.get("exceptions") or t.get("also") or t.get("words")
                          or t.get("cut") or t.get("terminal") or not t.get("dump_frames")):
        raise GenericError(f"{where}: a `dump` class is read from the log's last lines: dump_frames, no lines or exceptions")
    return GClass(id=t["id"], category=t.get("category", "other"), title=t["title"].strip(),
                  cause=t["cause"].strip(), fix=t["fix"].strip(), confidence=float(t["confidence"]),
                  references=tuple(t["references"]), exceptions=tuple(t.get("exceptions", ())),
                  lines=lines, at_info=at_info, words=t.get("words"), raised_in=t.get("raised_in"),
                  not_in=t.get("not_in"), terminal=bool(t.get("terminal", False)),
                  alone=bool(t.get("alone", False)), after=bool(t.get("after", False)), cut=bool(t.get("cut", False)),
                  last=bool(t.get("last", False)), trailing=t.get("trailing"), cleared_by=t.get("cleared_by"),
                  pattern=t.get("pattern"), members=members, also=also, phases=phases,
                  dump=t.get("dump"), dump_frames=t.get("dump_frames"), dump_lines=t.get("dump_lines"),
                  unless=t.get("unless"))


def _make_alt(a: dict, where: str) -> Alt:
    if not isinstance(a, dict) or set(a) - _ALT_KEYS or not a.get("exceptions"):
        raise GenericError(f"{where}: an `also` entry takes exceptions (required), words, raised_in, not_in")
    for key in ("words", "raised_in", "not_in"):
        if a.get(key) is not None:
            _regex(a[key], where)
    return Alt(tuple(a["exceptions"]), a.get("words"), a.get("raised_in"), a.get("not_in"))


def load_generic(path: Path | str | None = None) -> Generic:
    try:
        with open(path or GENERIC_FILE, "rb") as fh:
            doc = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise GenericError(f"generic.toml: not valid TOML: {exc}") from None
    classes = [_make_class(t, False) for t in doc.get("class", [])]
    classes[-1:-1] = [_make_class(t, True) for t in doc.get("family", [])]  # before the catch-all
    ids = [c.id for c in classes]
    if len(set(ids)) != len(ids):
        raise GenericError("generic.toml: duplicate class id")
    if sum(bool(c.dump) for c in classes) > 1:
        raise GenericError("generic.toml: one `dump` class at most (the hang's)")
    cons_doc = doc.get("consequences", {})
    cons = tuple(_regex(p, "generic.toml: consequences") for p in cons_doc.get("patterns", ()))
    back = _regex(cons_doc["points_back"], "generic.toml: consequences") if "points_back" in cons_doc else ""
    prog = tuple((p["literal"], _regex(p["pattern"], "generic.toml: progress"))
                 for p in doc.get("progress", {}).get("markers", ()))
    peers = doc.get("peers", {})
    effects, causes = tuple(peers.get("effects", ())), tuple(peers.get("causes", ()))
    unknown = sorted(set(effects + causes) - set(CATEGORIES))
    if unknown:
        raise GenericError(f"generic.toml: peers: unknown category {unknown[0]!r}")
    return Generic(tuple(classes), cons, prog, back, effects, causes)


@lru_cache(maxsize=1)
def generic() -> Generic:
    from matching.catalog import code_files, saved

    return saved("generic", [GENERIC_FILE, Path(__file__)] + code_files(), load_generic)


@lru_cache(maxsize=256)
def _rx(pattern: str):
    return re2.compile(pattern)


@lru_cache(maxsize=4)
def _at_info_rx(g: Generic):
    """The lines that are failures though a warning's prefix says INFO or WARN (NCCL's error trace)."""
    patterns = g.at_info()
    return re2.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None


@lru_cache(maxsize=4)
def _line_set(g: Generic):
    """One RE2 set of every class's line patterns: which class a plain line may belong to."""
    patterns = [p for c in g.classes for p in c.flagged]
    if not patterns:
        return None
    s = re2.Set.SearchSet(re2.Options())
    for p in patterns:
        s.Add(p)
    s.Compile()
    return s


# ------------------------------------------------------------------------------------------------
# Events: what the scanner hands over


@dataclass
class Raw:
    """A flagged line and the raw bytes before it, as the scanner saw them."""
    n: int
    file: str | None
    context: bytes      # bytes before the line (up to CONTEXT_BYTES), then the line itself
    key: str            # the exception type or 'line'


@dataclass
class Exc:
    """One exception of a chain: its line, type, message and innermost frames."""
    line: object                 # explain.Line
    type: str
    msg: str
    frames: list = field(default_factory=list)  # [(Line, path, func)], outermost first
    inner: str | None = None     # the type a wrapper names: RayTaskError(KeyError)

    @property
    def n(self) -> int:
        return self.line.n

    @property
    def text(self) -> str:
        return self.line.text


@dataclass
class Event:
    line: object                 # explain.Line of the flagged line
    chain: list[Exc] = field(default_factory=list)   # earliest (the cause) first; empty: a plain line
    handled: bool = False
    header: bool = False         # a traceback (a header, or frames of an excerpt) was found above it

    @property
    def key(self) -> tuple[str, int]:
        return self.line.file or "", self.line.n


class Collector:
    """Bounded intake of flagged lines (first ones, first per type, last ones)."""

    def __init__(self, clean, layer: "Generic | None" = None):
        self.clean = clean                     # explain.clean_line
        self.line_set = _line_set(layer or generic())
        self.first: list[Raw] = []
        self.per_key: dict[str, list[Raw]] = {}
        self.last: deque[Raw] = deque(maxlen=LAST_EVENTS)
        self._keys: dict[bytes, str | None] = {}   # line -> key: the cache
        self._full: set[str] = set()               # keys whose first slots are taken
        self.progress: dict[str | None, int] = {}   # file -> last line showing the run went on
        self.tails: dict[str | None, tuple[int, bytes]] = {}   # file -> (first line's number, its last bytes)

    def block(self, buf, starts: list[int], lines: list[bytes], name: str | None, number) -> None:
        """A block's flagged lines (start offsets, the lines' bytes); number(offset) gives a line's
        number, counted only for the lines kept. Every one costs a cached regex on its first bytes;
        only those kept (the first ones, the first of each exception type or line class, the
        block's last ones) are copied with their context. Before the block's last lines, one whose
        cached key is None or full needs nothing (keys only become full): skipped in bulk."""
        n, keys, full = len(lines), self._keys, self._full
        tail_from = max(0, n - TAIL_PER_BLOCK)
        settled = full | {None}
        known = map(keys.get, islice(lines, tail_from), repeat(self))
        todo = compress(range(tail_from), map(not_, map(settled.__contains__, known)))
        for i in chain(todo, range(tail_from, n)):
            raw_line = lines[i]
            key = keys.get(raw_line, self) if len(raw_line) <= 2048 else self
            if key is self:
                key = self._key(raw_line)
            if key is None or (key in full and i < tail_from):
                continue
            slot = self.per_key.get(key)
            if slot is None and len(self.per_key) < MAX_TYPES:
                slot = self.per_key[key] = []
            ls = starts[i]
            raw = Raw(number(ls), name, self._context(buf, ls, name) + raw_line, key)
            if len(self.first) < FIRST_EVENTS:
                self.first.append(raw)
            elif slot is not None and len(slot) < PER_TYPE:
                slot.append(raw)
            else:
                self.last.append(raw)
                full.add(key)

    def _context(self, buf, ls: int, name: str | None) -> bytes:
        """The CONTEXT_BYTES before a line at offset ls of the block: near the block's start, the
        previous block's kept tail first (its bytes end where this block begins), so a traceback
        that a block boundary cuts keeps its frames."""
        if ls >= CONTEXT_BYTES:
            return bytes(buf[ls - CONTEXT_BYTES:ls])
        before = self.tails.get(name, (0, b""))[1][ls - CONTEXT_BYTES:]
        return before + bytes(buf[:ls])

    def _key(self, raw_line: bytes) -> str | None:
        """The exception type of a line, or the generic line pattern it matches; None: nothing. Logs repeat
        their error lines (each worker, each retry): the answer is cached per line."""
        head = raw_line if len(raw_line) <= 2048 else raw_line[:1024] + b" ... " + raw_line[-1024:]
        key = _plain_type(head)
        m = None if key else KEY_RX.search(head)
        if key:
            pass
        elif m:
            key = m.group(1).rsplit(b".", 1)[-1].decode("ascii", "replace")
        elif not is_ray_repeat(raw_line):  # Ray's repeat: only its exception line counts
            hit = self.line_set.Match(self.clean(head).text) if self.line_set else []  # past any prefix
            key = f"line:{min(hit)}" if hit else None
        if len(self._keys) >= KEY_CACHE:
            self._keys.clear()
        if len(raw_line) <= 2048:
            self._keys[raw_line] = key
        return key

    def note_tail(self, name: str | None, first: int, data: bytes) -> None:
        """A block's last whole lines, from line `first` on; a short block extends the tail before it
        (blocks end on a newline), so the file's last TAIL_BYTES are kept however its blocks fell."""
        old = self.tails.get(name)
        if not data:  # the block's last line is longer than the tail: the file ends in it, nothing before counts
            self.tails[name] = (first, b"")
            return
        if old and len(data) < TAIL_BYTES and old[0] + old[1].count(b"\n") == first:
            first, data = old[0], old[1] + data
        cut = data.find(b"\n", len(data) - TAIL_BYTES) + 1 if len(data) > TAIL_BYTES else 0
        self.tails[name] = (first + data.count(b"\n", 0, cut), data[cut:])

    def tail_lines(self, name: str | None, after: int) -> list:
        """The file's kept last lines numbered above `after`, cleaned."""
        first, data = self.tails.get(name, (0, b""))
        out = []
        for i, raw in enumerate(data.split(b"\n")):
            if first + i > after and raw:
                ln = self.clean(raw)
                ln.n, ln.file = first + i, name
                out.append(ln)
        return out

    def nonblank_tail(self, name: str | None) -> list:
        """All of the file's kept last lines that hold more than white space, cleaned."""
        return [ln for ln in self.tail_lines(name, 0) if ln.text.strip()]

    def note_progress(self, name: str | None, n: int) -> None:
        self.progress[name] = max(n, self.progress.get(name, 0))

    def raws(self) -> list[Raw]:
        allr = self.first + [r for s in self.per_key.values() for r in s] + list(self.last)
        uniq = {(r.file or "", r.n): r for r in allr}
        return [uniq[k] for k in sorted(uniq)]


# ------------------------------------------------------------------------------------------------
# Parsing a traceback out of the context


_ENDINGS = (b"Error", b"Exception", b"Exit", b"Interrupt", b"Failure", b"Timeout")


def _plain_type(head: bytes) -> str | None:
    """The common shape "pkg.TypeError: message" (after a Ray prefix) without a regex."""
    if head.startswith(b"("):
        head = head[head.find(b") ") + 2:]
    colon = head.find(b": ", 0, 160)
    if colon <= 0:
        return None
    dotted = head[:colon]
    name = dotted.rsplit(b".", 1)[-1]
    if name.endswith(_ENDINGS) and len(name) > 5 and dotted.replace(b".", b"").replace(b"_", b"").isalnum() \
            and name.lstrip(b"_")[:1].isupper():
        return name.decode("ascii", "replace")
    return None


class _Lines:
    """The context's lines, cleaned only when looked at (a traceback is read from its end)."""

    def __init__(self, raw: Raw, clean):
        parts = raw.context.split(b"\n")
        if len(parts) > 1 and len(raw.context) >= CONTEXT_BYTES:
            parts = parts[1:]          # the first piece may be a cut line
        self.parts, self.raw, self.clean = parts, raw, clean
        self.done: dict[int, object] = {}

    def __len__(self) -> int:
        return len(self.parts)

    def __getitem__(self, i: int):
        ln = self.done.get(i)
        if ln is None:
            ln = self.done[i] = self.clean(self.parts[i])
            ln.n, ln.file = self.raw.n - (len(self.parts) - 1 - i), self.raw.file
        return ln


def _lines_of(raw: Raw, clean) -> _Lines:
    """The cleaned lines of the context, the event's own line last, each with its number and file."""
    return _Lines(raw, clean)


def _frame(text: str) -> tuple[str, str] | None:
    """(path, function) of a frame line in any of FRAME's forms, or None."""
    m = FRAME.search(text)
    if m is None:
        return None
    return (m.group("path") or m.group("tpath") or m.group("ipath"),
            m.group("func") or m.group("tfunc") or m.group("ifunc") or "")


def _wrapped_frame(lines: list, i: int, process) -> tuple[tuple, int] | None:
    """A frame line that a hard-wrapped paste broke, read from its last piece lines[i]
    (`line N, in f`) back over its path's piece (`"path",`, after `File` or below it): ((line,
    path, function), index of its first piece), or None."""
    at = WRAPPED_AT.match(lines[i].text)
    if at is None or i < 1 or lines[i - 1].process != process:
        return None
    where = WRAPPED_PATH.match(lines[i - 1].text)
    if where is None:
        return None
    first = i - 1
    if not where.group("file") and i >= 2 and WRAPPED_FILE.search(lines[i - 2].text):
        first = i - 2
    return (lines[i - 1], where.group("path"), at.group("func")), first


def _odd_word(m) -> bool:
    """An exception line's match whose type is a common word (ODD_WORDS) with another message: a setting."""
    words = ODD_WORDS.get(m.group("type").rsplit(".", 1)[-1])
    return words is not None and (m.group("msg") or "").strip() not in words


def _traceback_above(lines: list, end: int, process) -> tuple[list, int]:
    """Frames above lines[end] of the same process, up to its Traceback header: (frames, header index)."""
    frames, skip = [], end
    for i in range(end - 1, max(-1, end - 400), -1):
        ln = lines[i]
        if ln.process != process or i >= skip:
            continue
        wrapped = _wrapped_frame(lines, i, process)
        if wrapped:
            frames.append(wrapped[0])
            skip = wrapped[1]
            continue
        frame = _frame(ln.text)
        if frame:
            frames.append((ln, *frame))
        elif HEADER.search(ln.text):
            return frames[::-1], i
        elif CHAIN.search(ln.text.strip()) or EXC_LINE.search(ln.text):
            break      # no header of its own (an excerpt, or a message printed without a traceback)
    return frames[::-1], -1


def _previous_in_chain(lines: list, header: int, process) -> int:
    """Index of the exception line that the chain marker above `header` points back to, or -1."""
    i = header - 1
    while i >= 0 and (lines[i].process != process or not lines[i].text.strip()):
        i -= 1
    if i < 0 or not CHAIN.search(lines[i].text.strip()):
        return -1
    for j in range(i - 1, max(-1, i - 60), -1):
        if lines[j].process == process and EXC_LINE.search(lines[j].text):
            return j
    return -1


def parse(raw: Raw, clean, g: Generic) -> Event | None:
    """The event of a flagged line: a plain line, or an exception with its traceback and chain."""
    lines = _lines_of(raw, clean)
    me = lines[len(lines) - 1]
    if WARNING_LINE.search(me.text):
        at_info = _at_info_rx(g)
        if not (at_info and at_info.search(me.text)):
            return None                              # warnings are not failures
    ev = Event(me)
    end, m = len(lines) - 1, EXC_LINE.search(me.text)
    if not m or _odd_word(m):
        return ev
    last_lvl, first_header = m.group("lvl"), None
    for _ in range(4):  # this exception, then up to 3 earlier ones of its chain
        frames, header = _traceback_above(lines, end, me.process)
        ev.chain.insert(0, Exc(lines[end], m.group("type"), m.group("msg") or "", frames, m.group("inner")))
        if header >= 0 and first_header is None:
            first_header = (header, lines[header].text)
        prev = _previous_in_chain(lines, header, me.process) if header >= 0 else -1
        if prev < 0:
            break
        end, m = prev, EXC_LINE.search(lines[prev].text)
    ev.header = first_header is not None or any(x.frames for x in ev.chain)
    ev.handled = _handled(lines, first_header, last_lvl, me.process)
    return ev


def _handled(lines: _Lines, header: tuple | None, last_lvl, process) -> bool:
    """Printed and survived: logging's prefix on Python's header only (logger.exception: logged, and
    the program went on), or sys.unraisablehook's "Exception ignored in: ..." just above it."""
    if header is None:
        return False
    i, text = header
    if PY_HEADER in text and not last_lvl and LOGGED.search(text.split("Traceback")[0]):
        return True
    i -= 1
    while i >= 0 and (lines[i].process != process or not lines[i].text.strip()):
        i -= 1
    return i >= 0 and bool(IGNORED.search(lines[i].text.lstrip()))


# ------------------------------------------------------------------------------------------------
# Classifying


# The tags `_where` puts before a location other than an innermost frame's "path:function" (what
# `doctor rules generic-*` says of them).
WHERE_TAGS = {
    "msg:PATH": "a path its message names",
    "tree:PATH": "an import failing inside the package it names, run from outside an install; or a local "
                 "directory of a module's name, beside the file that found it lacking a name",
    "same:PATH": "a package asking its own module",
    "cross:A<-B": "raised in installed package A called from installed package B",
    "stdlib:PATH": "a file named like a standard-library module, outside it, that the standard library imported",
}


def _where(exc: Exc) -> list[str]:
    """Where it was raised: the innermost frames as "path:function", then the locations WHERE_TAGS
    names (a path in the message, a source tree, the same package, one package calling another)."""
    paths = [f"{p}:{f}" for _, p, f in exc.frames[-3:]]
    mp = MSG_PATH.search(exc.msg)
    if mp:
        paths.append("msg:" + mp.group("path"))
    imp = IMPORTED.search(exc.msg) if exc.type.endswith(("ImportError", "ModuleNotFoundError")) else None
    if imp:
        top = imp.group(1) or imp.group(2)
        tree = next((p for _, p, _f in reversed(exc.frames[-3:]) if not INSTALLED.search(p) and _under(top, p)), None)
        if tree:
            paths.append("tree:" + tree)
    cross = _across(exc.frames)
    if cross:
        paths.append("cross:" + cross)
    lack = LACKING.search(exc.msg) if exc.type.endswith("AttributeError") else None
    caller = lack and next((p for _, p, f in reversed(exc.frames) if f != "__getattr__"), None)
    if caller and _under(lack.group(1), caller):
        paths.append("same:" + caller)   # the package's own code calls what the package lacks: not two versions
    tree = lack and caller and _sibling_package(lack.group(1), caller, exc.frames)
    if tree:
        paths.append("tree:" + tree)     # the module that lacks the name is a local directory of that name
    shadow = _stdlib_shadow(exc.frames)
    if shadow:
        paths.append("stdlib:" + shadow)
    return paths


def _sibling_package(package: str, caller: str, frames: list) -> str | None:
    """A frame in a local directory named `package` beside the file that asked it for a name: where
    that file's directory is on sys.path (a script's own), the local directory is what was imported."""
    here = caller.replace("\\", "/").removeprefix("./").rpartition("/")[0]
    beside = f"{here}/{package}/" if here else f"{package}/"
    for _, path, _f in frames:
        p = path.replace("\\", "/").removeprefix("./")
        if not INSTALLED.search(p) and p.startswith(beside):
            return path
    return None


def _stdlib_shadow(frames: list) -> str | None:
    """A file named like a standard-library module, outside the standard library, that the standard
    library imported at its top (inspect's `import dis` loading ./dis.py): it shadows that module.
    Not a script the standard library runs (runpy, cProfile): their frames are no module's top."""
    for (_, outer, ofunc), (_, path, func) in zip(frames, frames[1:]):
        parts = path.replace("\\", "/").rsplit("/", 2)
        name = parts[-2] if parts[-1] == "__init__.py" and len(parts) > 1 else parts[-1].removesuffix(".py")
        if (func == ofunc == "<module>" and path.endswith(".py") and name in sys.stdlib_module_names
                and STDLIB.search(outer) and not _package(outer) and not INSTALLED.search(path)):
            return path
    return None


def _under(package: str, path: str) -> bool:
    """Whether a frame's file lies in a directory named `package` (any OS's separators, relative too)."""
    return f"/{package}/" in "/" + path.replace("\\", "/").lstrip("./")


def _package(path: str) -> str | None:
    m = PACKAGE.search(path)
    return m.group(1) if m else None


def _across(frames: list) -> str | None:
    """"callee<-caller" when the innermost frame is an installed package's and the nearest frame
    outside it is another installed package's: one release calling another it was not built for."""
    inner = _package(frames[-1][1]) if frames else None
    if not inner:
        return None
    for _, path, _f in reversed(frames[:-1]):
        pkg = _package(path)
        if pkg != inner:
            return f"{inner}<-{pkg}" if pkg else None
    return None


def _class_matches(c: GClass, exc: Exc | None, text: str) -> bool:
    if any(_rx(p).search(text) for p in c.flagged):
        return True
    if exc is None or not (c.exceptions or c.also):
        return False
    return _holds(c, exc) or any(_holds(a, exc) for a in c.also)


def _holds(c: "GClass | Alt", exc: Exc) -> bool:
    """One set of conditions: the type, the words of the message, where it was raised."""
    base = exc.type.rsplit(".", 1)[-1]
    if "*" not in c.exceptions and base not in c.exceptions:
        return False
    if c.words and not _rx(c.words).search(exc.msg or exc.text):
        return False
    paths = _where(exc)
    if c.raised_in and not any(_rx(c.raised_in).search(p) for p in paths):
        return False
    return not (c.not_in and any(_rx(c.not_in).search(p) for p in paths))


def _member_of(c: GClass, text: str) -> Member | None:
    """A family: the member whose range the code in the line falls in."""
    if not any(_rx(p).search(text) for p in c.flagged):
        return None
    m = _rx(c.pattern).search(text)
    return _code_member(c, m)[0] if m else None


def _code_member(c: GClass, m) -> tuple[Member | None, str]:
    """The code a family's pattern matched (its `code` or `text` group), and the member it falls in."""
    d = m.groupdict()
    code = (d.get("code") or d.get("text") or m.group(0)).strip()
    return _first_member(c.members, code), code


def _first_member(members, text: str) -> Member | None:
    return next((mb for mb in members if _rx(mb.match).search(text)), None)


@dataclass
class Verdict:
    cls: GClass
    event: Event
    exc: Exc | None
    member: Member | None = None
    code: str = ""
    tail: list = field(default_factory=list)   # a cut traceback's innermost frame, from the log's end

    @property
    def category(self) -> str:
        return self.member.category if self.member else self.cls.category

    @property
    def kind(self) -> tuple[str, str]:
        """What a finding says: its class, and the member's or phase's meaning (one finding each)."""
        return self.cls.id, self.member.meaning if self.member else ""


def classify(ev: Event, g: Generic, final: bool, weak: frozenset = frozenset(), bare: bool = False,
             ends: bool = False) -> Verdict | None:
    """The class of an event: for a chain, its earliest member a specific class knows (the cause).
    Members a consequence rule already names (`weak`) or consequence words are skipped. The terminal
    class takes the run's last exception when a traceback shows it, or (`bare`) when it is the log's
    only failure: an exception line alone, with nothing a rule claims. A `cut` class takes only a
    plain line that `ends` its log's events (a traceback header with no exception line after it)."""
    excs = ev.chain or [None]
    final = final and (ev.header or bare)
    for exc in excs:
        text = exc.text if exc else ev.line.text
        if _consequence(g, text) or (exc and _claimed(exc, weak)):
            continue
        for c in g.classes:
            if c.alone or c.last or (c.terminal and not (final and exc is excs[-1])) or (c.cut and (exc or not ends)):
                continue
            if c.members:
                fm = _member_of(c, text)
                if fm:
                    return Verdict(c, ev, exc, fm, _rx(c.pattern).search(text).group(0))
            elif _class_matches(c, exc, text):
                return Verdict(c, ev, exc)
    return None


def _consequence(g: Generic, text: str) -> bool:
    return any(_rx(p).search(text) for p in g.consequences)


def _claimed(exc: Exc, weak: frozenset) -> bool:
    """A line only a consequence rule claims."""
    return ((exc.line.file or ""), exc.n) in weak


def _points_back(e: Event, g: Generic, weak: frozenset) -> bool:
    """Every exception of the chain reports a failure elsewhere, and one says the cause was printed
    before it (vLLM's EngineDeadError "See stack trace (above) for the root cause"): the run's
    terminal failure is then the exception before it. A consequence that does not say so (Ray's
    ActorDiedError after an exception the run survived) stays the run's end."""
    return (bool(g.points_back) and all(_consequence(g, x.text) or _claimed(x, weak) for x in e.chain)
            and any(_rx(g.points_back).search(x.text) for x in e.chain))


def is_consequence_line(text: str, g: Generic | None = None) -> bool:
    return _consequence(g or generic(), text)


# ------------------------------------------------------------------------------------------------
# The verdict of the layer


def events(col: Collector, g: Generic) -> list[Event]:
    """Every kept event, parsed; an exception that is an earlier member of a later chain is folded,
    and so is Ray's repeat of a line already kept."""
    evs, texts = [], set()
    for r in col.raws():
        e = parse(r, col.clean, g)
        if e is None or (e.line.text in texts and RAY_REPEAT.search(r.context, r.context.rfind(b"\n") + 1)):
            continue  # Ray's note that other workers printed a line this log holds: the same failure
        texts.add(e.line.text)
        evs.append(e)
    inner = {(e.line.file or "", x.n) for e in evs for x in e.chain[:-1]}
    return [e for e in evs if e.key not in inner]


def _live(e: Event, col: Collector, explained: set, weak: frozenset = frozenset()) -> bool:
    """Not explained by a rule (a line of its chain, or a line printed right beside a rule's: the
    same report; a plain line any rule claims), not handled, not followed by training progress."""
    f = e.line.file or ""
    keys = {(f, e.line.n + d) for d in range(-NEAR_RULE, NEAR_RULE + 1)} | {(f, x.n) for x in e.chain}
    if keys & (explained if e.chain else explained | weak) or e.handled:
        return False
    return col.progress.get(e.line.file, 0) < e.line.n


def analyse(col: Collector, explained: set, g: Generic | None = None, weak: frozenset = frozenset(),
            limit: int | None = MAX_FINDINGS):
    """The layer's findings, the cause first: specific classes by position, then the terminal one.
    `explained`: lines a rule that names a cause claims; `weak`: lines only a consequence rule
    claims (a chain through them may still show its cause); `limit`: how many (None: all)."""
    g = g or generic()
    evs = events(col, g)
    last, end = {}, {}
    for e in evs:
        if e.chain and not e.handled and not _points_back(e, g, weak):
            last[e.line.file] = e            # each file's last exception (not one sending to an earlier one): its terminal failure
        end[e.line.file] = max(end.get(e.line.file, 0), e.line.n)   # each file's last event
    verdicts, seen = [], {}
    for e in evs:
        if not _live(e, col, explained, weak):
            continue
        v = classify(e, g, final=last.get(e.line.file) is e, weak=weak, bare=not (explained or weak),
                     ends=end[e.line.file] == e.line.n)
        if v is None:
            continue
        if v.cls.cut:
            v.tail, v.member = _cut_frames(col, e, v.cls)
        if v.kind in seen:
            seen[v.kind][1] += 1
            continue
        seen[v.kind] = [v, 1]
        verdicts.append(v)
    if not any(not (v.cls.terminal or v.cls.after) for v in verdicts):  # nothing specific: a wrapper's type
        for v in _wrapped(evs, col, explained, g):
            if v.kind not in seen:
                seen[v.kind] = [v, 1]
                verdicts.append(v)
    if not verdicts:
        verdicts = _consequences_alone(evs, col, explained | weak, g) or (
            [] if explained or weak else _ends_in_frames(col, g) or _ends_in_error_line(col, g) or _stack_dump(col, g))
        seen = {v.kind: [v, 1] for v in verdicts}
    everyone = list(verdicts)   # the list being sorted reads empty meanwhile
    verdicts.sort(key=lambda v: (v.cls.terminal or v.cls.after, _seen_from_peer(v, everyone, g), v.event.key))
    return [(v, seen[v.kind][1]) for v in verdicts][:limit]


def _seen_from_peer(v: Verdict, verdicts: list, g: Generic) -> bool:
    """What a process saw of a peer's end (a category of [peers] effects) while another process failed of
    its own (one of [peers] causes): it ranks after that cause, as a rule's finding does."""
    mine = v.event.line.process
    return mine is not None and v.category in g.peer_effects and any(
        x.category in g.peer_causes and not (x.cls.terminal or x.cls.after)
        and x.event.line.process not in (None, mine) for x in verdicts)


def _cut_frames(col: Collector, e: Event, cut: GClass) -> tuple[list, Member | None]:
    """The innermost frames below a header the log ends on (same process), with the source line
    Python printed under the last one: where the run was when its output stopped; and the phase
    of the run those frames belong to."""
    below = [ln for ln in col.tail_lines(e.line.file, e.line.n) if ln.process == e.line.process]
    run = list(takewhile(_of_traceback, below))
    return _innermost(run), _phase(cut, run)


def _phase(cut: GClass, run: list) -> Member | None:
    """The phase the innermost frames of a cut traceback name ("path:function", innermost first)."""
    frames = [f for f in map(_frame, (ln.text for ln in run)) if f]
    keys = [path.replace("\\", "/") + ":" + func for path, func in frames[-PHASE_FRAMES:]]
    for key in reversed(keys):
        hit = next((ph for ph in cut.phases if _rx(ph.match).search(key)), None)
        if hit:
            return hit
    return None


def _innermost(run: list) -> list:
    """Of a run of traceback lines, the innermost frames and the source line under the last one."""
    at = [i for i, ln in enumerate(run) if FRAME.search(ln.text)]
    if not at:
        return []
    shown = [run[i] for i in at[-FRAMES_SHOWN:]]
    if at[-1] + 1 < len(run) and run[at[-1] + 1].text.strip():
        shown.append(run[at[-1] + 1])  # the frame's source line (indented: the run holds only those)
    return shown


def _of_traceback(ln) -> bool:
    """A line a traceback prints below its header: a frame, its (indented) source, IPython's context."""
    return bool(FRAME.search(ln.text)) or ln.text[:1].isspace() or not ln.text.strip() or bool(IPY_CONTEXT.search(ln.text))


def _ends_in_frames(col: Collector, g: Generic) -> list[Verdict]:
    """A log with nothing else that ends inside a traceback's frames, no header kept (an excerpt
    pasted from the middle, the header scrolled away): the cut class, from the frames at its end."""
    cut = next((c for c in g.classes if c.cut), None)
    for name in col.tails if cut else ():
        lines = col.nonblank_tail(name)
        last = next((i for i in range(len(lines) - 1, max(-1, len(lines) - 4), -1)
                     if FRAME.search(lines[i].text)), None)
        if last is None or not all(map(_of_traceback, lines[last + 1:])):
            continue  # not the end: an exception line (or anything not of the traceback) follows
        first = last
        while first > 0 and _of_traceback(lines[first - 1]):
            first -= 1
        if first > 0 and STACK_DUMP.search(lines[first - 1].text):
            continue  # a stack printed on purpose (logging's stack_info, a graph break's user code), not a failure
        first = next(i for i in range(first, last + 1) if FRAME.search(lines[i].text))
        inner = [ln for ln in _innermost(lines[first:]) if ln is not lines[first]]
        return [Verdict(cut, Event(lines[first]), None, _phase(cut, lines[first:]), tail=inner)]
    return []


def _ends_in_error_line(col: Collector, g: Generic) -> list[Verdict]:
    """A log with nothing else whose last lines hold a tool's error line (the `last` family's forms).
    Of several files, the one named last."""
    fam = next((c for c in g.classes if c.last), None)
    found = [v for v in (_closing_error_line(fam, g, col, name) for name in (col.tails if fam else ())) if v]
    return found[-1:]


def _stack_dump(col: Collector, g: Generic) -> list[Verdict]:
    """A log with nothing else whose file ends in a dump of a live process's stacks (py-spy,
    faulthandler): the run was stuck. Its main thread's header (py-spy names it; faulthandler lists
    it last) and the innermost frame under it. Of several files, the one named last."""
    hang = next((c for c in g.classes if c.dump), None)
    found = []
    for name in col.tails if hang else ():
        lines = col.nonblank_tail(name)
        if hang.unless and any(_rx(hang.unless).search(ln.text) for ln in lines):
            continue  # faulthandler's report of a crash: that crash's lines are the failure
        i = len(lines)
        while i > 0 and any(_rx(p).search(lines[i - 1].text) for p in (hang.dump, hang.dump_frames, hang.dump_lines) if p):
            i -= 1
        heads = [k for k in range(i, len(lines)) if _rx(hang.dump).search(lines[k].text)]
        if not heads or not any(_rx(hang.dump_frames).search(ln.text) for ln in lines[heads[0]:]):
            continue  # no dump at the file's end, or a header with no frame under it
        named = [k for k in heads if not _rx(hang.dump_frames).search(lines[k].text)] or heads[:1]  # headers, not frames
        at = next((k for k in named if '"MainThread"' in lines[k].text), named[-1])
        frame = [ln for ln in lines[at:] if _rx(hang.dump_frames).search(ln.text) and not NATIVE_ONLY.search(ln.text)]
        found.append(Verdict(hang, Event(lines[at]), None, tail=[f for f in frame[:FRAMES_SHOWN] if f is not lines[at]]))
    return found[-1:]


def _closing_error_line(fam: GClass, g: Generic, col: Collector, name: str | None) -> Verdict | None:
    """The last line of a file's last LAST_LINES (not counting what the tool prints after it, such as
    glog's stack) in one of the family's forms; none when a training step or a line that says the
    failure was survived (Ansible's "...ignoring") comes after it."""
    lines = col.nonblank_tail(name)
    counted = [ln for ln in lines if not (fam.trailing and _rx(fam.trailing).search(ln.text))]
    for ln in reversed(counted[-LAST_LINES:]):
        if col.progress.get(name, 0) >= ln.n:
            return None  # the run went on after this line, and after every earlier one
        text = ln.text
        m = _rx(fam.pattern).search(text)
        if not m or FRAME.search(text) or HEADER.search(text) or WARNING_LINE.search(text) or _consequence(g, text):
            continue
        if fam.cleared_by and any(_rx(fam.cleared_by).search(a.text) for a in lines if a.n > ln.n):
            return None
        # the same line printed before it after the last progress (Ray's repeat of it, another rank's copy):
        # the first copy is the evidence
        ln = next(a for a in counted if a.text == text and a.n > col.progress.get(name, 0))
        member, code = _code_member(fam, m)
        detail = _detail_member(fam, g, ln, counted) if member is fam.members[-1] else None
        member, tail = detail or (member, None)
        return Verdict(fam, Event(ln), None, member, _words(code, TITLE_WORDS),
                       tail=[tail] if tail else []) if member else None
    return None


def _detail_member(fam: GClass, g: Generic, err, lines: list) -> tuple[Member, object] | None:
    """The detail a tool printed right under its error line ("Detailed message: ...", a reason): the
    next DETAIL_LINES lines of the same process, not a warning, a frame or a consequence; the first
    whose words name a kind of failure the error line's own words do not: (member, line)."""
    after = [a for a in lines if a.n > err.n][:DETAIL_LINES]
    for ln in after:
        if ln.process != err.process and not (ln.process is None and CANN_PREFIX.match(err.text)):
            break
        if WARNING_LINE.search(ln.text) or FRAME.search(ln.text) or _consequence(g, ln.text):
            continue
        mb = _first_member(fam.members[:-1], ln.text)
        if mb:
            return mb, ln
    return None


def _words(text: str, limit: int) -> str:
    """The text, or its words up to about `limit` characters."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return text[:cut if cut > limit // 2 else limit] + " ..."


def _wrapped(evs: list[Event], col: Collector, claimed: set, g: Generic) -> list[Verdict]:
    """Only a wrapper shows what failed (Ray's `RayTaskError(ModuleNotFoundError): ray::f()`, the
    remote traceback not in this log): the type it names, classed as if raised (never the catch-all)."""
    for e in evs:
        exc = e.chain[-1] if e.chain else None
        if exc is None or not exc.inner or not _live(e, col, claimed):
            continue
        inner = Exc(exc.line, exc.inner, "", [])
        c = next((c for c in g.classes if not (c.alone or c.terminal or c.members)
                  and c.exceptions and _class_matches(c, inner, "")), None)
        if c:
            return [Verdict(c, e, inner)]
    return []


def _consequences_alone(evs: list[Event], col: Collector, claimed: set, g: Generic) -> list[Verdict]:
    """Nothing but consequences: the first one, so that a failed run is never "nothing matched"."""
    alone = next((c for c in g.classes if c.alone), None)
    for e in evs if alone else ():
        if _live(e, col, claimed):
            exc = next((x for x in e.chain if _consequence(g, x.text)), None)
            if exc or (not e.chain and _consequence(g, e.line.text)):
                return [Verdict(alone, e, exc)]
    return []


def evidence(v: Verdict) -> list:
    """Lines to show: the cause's line and its innermost frame, and the chain's last line."""
    ev = v.event
    if v.exc is None:
        return [ev.line] + v.tail
    out = [f[0] for f in v.exc.frames[-FRAMES_SHOWN:]] + [v.exc.line]
    if ev.chain and ev.chain[-1] is not v.exc:
        out.append(ev.chain[-1].line)
    return sorted({ln.n: ln for ln in out}.values(), key=lambda ln: ln.n)
