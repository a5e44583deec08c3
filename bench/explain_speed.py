"""Speed of `doctor explain` on a 1 GB log, side by side with grep running the same patterns.

    .venv/bin/python bench/explain_speed.py [--size-mb 1024] [--rounds 3] [--keep] [--no-catalog-grep]

The log is generated under /tmp from real verl log lines (the clean runs in
../shared/research/clean-logs, repeated) with a real failure near the end (the log-prob OOM and
the dead actor of tests/fixtures/explain), and deleted afterwards. Each round runs, alternating
which goes first:

  doctor:  python -m doctor explain --json LOG          (the whole CLI, start-up included)
  grep:    LC_ALL=C grep -c -E -e P1 -e P2 ... LOG       (the catalog's own patterns, as ERE)

  words:   LC_ALL=C grep -c -E 'Error|error|Traceback|FAILED|Killed|out of memory' LOG
           (a fixed anchor: the catalog's own patterns grow with every rule, which slows their grep
           and so flatters the first ratio; this one stays the same from release to release)

  python-loops: doctor with DOCTOR_NATIVE=0  (where matching/_lines.c is built: the same run with its
           line loops in Python, so what the C ones buy is measured in the same rounds)

and prints the ratio of their times (goal <= 2), doctor's throughput in MB/s and its peak RSS
(goal <= 150 MB). Times are medians over the rounds; the ratio is what to compare across
machines, not the absolute seconds. Before the rounds the project's bytecode is compiled (a user's
Python writes it on the first run; PYTHONDONTWRITEBYTECODE=1 would have every run compile again).

The peak RSS of the timed runs is at least this script's own: Linux carries a parent's high-water
mark over into the child it forks and execs (/bin/true started from here reports this process's
size). So one more, untimed, run is started from a fresh small interpreter, and its figure is
printed beside it as doctor's own.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from matching import lines as block_lines  # noqa: E402
from matching.explain import default_matcher  # noqa: E402

# ../shared beside the checkout, or beside the checkout's parent (a git worktree under wt/)
CLEAN = next((p / "shared" / "research" / "clean-logs" for p in ROOT.parents[:2]
              if (p / "shared" / "research" / "clean-logs").is_dir()),
             ROOT.parent / "shared" / "research" / "clean-logs")
FIX = ROOT / "tests" / "fixtures" / "explain"
VERL_LOGS = [f"{i:03d}.log" for i in range(1, 12)]  # 001-011 are verl training runs
ERROR_FIXTURES = ["memory-oom-log-prob.log", "ray-actor-died.log"]
PACKAGES = ["doctor", "checks", "knowledge", "launch", "matching", "probes", "supervisor", "trainer"]


def ere(pattern: str) -> str:
    """An RE2 pattern as POSIX ERE for GNU grep (\\w \\s \\b are GNU extensions it knows)."""
    out, i, in_class, fold = [], 0, False, False
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("(?:", i) and not in_class:
            out.append("(")
            i += 3
            continue
        if pattern.startswith("(?i)", i) and not in_class:
            fold, i = True, i + 4
            continue
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "d":
                out.append("0-9" if in_class else "[0-9]")
            elif in_class and nxt == "w":
                out.append("_[:alnum:]")
            elif in_class and nxt == "s":
                out.append("[:space:]")
            elif in_class:
                out.append(nxt)
            else:
                out.append(c + nxt)
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class and out and out[-1] not in ("[", "[^"):
            in_class = False
        elif c in "*+?" and i > 0 and pattern[i - 1] in "*+?}" and not in_class:
            i += 1  # a lazy quantifier: ERE has only greedy ones, same lines match
            continue
        if fold and c.isalpha() and not in_class:
            out.append(f"[{c.lower()}{c.upper()}]")
        else:
            out.append(c)
        i += 1
    return "".join(out)


def make_log(path: Path, size: int) -> tuple[int, int]:
    """Write ~size bytes of real verl lines, the failure, and a little more; return (bytes, error line)."""
    chunk = b"".join((CLEAN / name).read_bytes() for name in VERL_LOGS if (CLEAN / name).exists())
    if not chunk:
        sys.exit(f"no clean verl logs under {CLEAN}")
    error = b"".join((FIX / n).read_bytes().split(b"\n", 1)[1] for n in ERROR_FIXTURES)
    lines = 0
    with open(path, "wb", buffering=16 << 20) as fh:
        block = chunk * max(1, (8 << 20) // len(chunk))
        written = 0
        while written + len(block) < size - (1 << 20):
            fh.write(block)
            written += len(block)
            lines += block.count(b"\n")
        while written < size - (1 << 20):
            fh.write(chunk)
            written += len(chunk)
            lines += chunk.count(b"\n")
        error_line = lines + 1
        fh.write(error)
        tail = chunk[: 1 << 20]
        tail = tail[: tail.rfind(b"\n") + 1]
        fh.write(tail)
        written += len(error) + len(tail)
    return written, error_line


def sampled_run(cmd: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS in bytes (the kernel's ru_maxrss of that child alone) and stdout."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    out = proc.stdout.read().decode(errors="replace")
    err = proc.stderr.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code not in (0, 1):
        sys.exit(f"{cmd[0]} failed ({code}): {err[-500:]}")
    return seconds, usage.ru_maxrss * 1024, out


OWN_RSS = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def own_peak_rss(cmd: list[str]) -> int:
    """Peak RSS in bytes of cmd started by a fresh interpreter (its ~11 MB is the floor)."""
    out = subprocess.run([sys.executable, "-c", OWN_RSS, *cmd], capture_output=True, text=True, check=True)
    return int(out.stdout) * 1024


def start_up(tmpdir: Path) -> float:
    """Seconds doctor takes on a log of one line: what it costs before the log's size counts."""
    tiny = tmpdir / "one-line.log"
    tiny.write_bytes(b"step:1 - loss:0.1\n")
    cmd = [sys.executable, "-m", "doctor", "explain", "--json", str(tiny)]
    return statistics.median(sampled_run(cmd)[0] for _ in range(5))


def rounds(cmds: dict[str, list[str]], n: int) -> tuple[dict[str, list[float]], list[int], dict]:
    """Each command once a round, the order reversed every other round; doctor's RSS and verdict."""
    times: dict[str, list[float]] = {who: [] for who in cmds}
    rss, verdict = [], None
    for r in range(n):
        order = list(cmds) if r % 2 == 0 else list(cmds)[::-1]
        for who in order:
            s, peak, out = sampled_run(cmds[who])
            times[who].append(s)
            if who == "doctor":
                rss.append(peak)
                verdict = json.loads(out)
        d = times["doctor"][-1]
        print(f"round {r + 1}: " + "  ".join(f"{who} {t[-1]:.2f}s" for who, t in times.items())
              + "  ratio " + " / ".join(f"{d / t[-1]:.2f}" for who, t in times.items() if who != "doctor"))
    return times, rss, verdict


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the generated log")
    ap.add_argument("--no-catalog-grep", action="store_true",
                    help="skip grep with the catalog's patterns (~60 s a round): doctor and the anchor only")
    args = ap.parse_args()
    grep = shutil.which("grep")
    if not grep:
        sys.exit("grep not found")
    patterns = [ere(p) for p in default_matcher().patterns]
    grep_cmd = [grep, "-c", "-E"] + [a for p in patterns for a in ("-e", p)]
    words_cmd = [grep, "-c", "-E", "Error|error|Traceback|FAILED|Killed|out of memory"]
    tmpdir = Path(tempfile.mkdtemp(prefix="explain-speed-"))
    log = tmpdir / "verl-run.log"
    try:
        t0 = time.perf_counter()
        size, error_line = make_log(log, args.size_mb << 20)
        print(f"generated {size / 1e6:.0f} MB ({error_line - 1} lines before the failure) "
              f"in {time.perf_counter() - t0:.1f}s: {log}")
        doctor_cmd = [sys.executable, "-m", "doctor", "explain", "--json", str(log)]
        # warm both: the page cache, doctor's compiled-pattern cache, and the project's bytecode (a
        # user's Python writes it on the first run; PYTHONDONTWRITEBYTECODE=1, set on these machines,
        # would leave every timed run compiling the project's sources again)
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)
        subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(ROOT / p) for p in PACKAGES)],
                       stdout=subprocess.DEVNULL, check=True)
        subprocess.run([sys.executable, "-m", "doctor", "explain", str(FIX / ERROR_FIXTURES[0])],
                       stdout=subprocess.DEVNULL, check=False)
        os.environ["LC_ALL"] = "C"
        cmds = {"doctor": doctor_cmd}
        if not args.no_catalog_grep:
            cmds["grep"] = grep_cmd + [str(log)]
        cmds["words"] = words_cmd + [str(log)]
        if block_lines.native:  # what the C line loops buy, side by side
            cmds["python-loops"] = ["env", "DOCTOR_NATIVE=0", *doctor_cmd]
        times, rss, verdict = rounds(cmds, args.rounds)
        d_times, w_times, g_times = times["doctor"], times["words"], times.get("grep")
        top = verdict["findings"][0] if verdict and verdict["findings"] else None
        d, w = statistics.median(d_times), statistics.median(w_times)
        print(f"\ncause found: {top['rule'] if top else None} at line "
              f"{top['lines'][0]['n'] if top else '-'} (the failure starts at line {error_line})")
        if g_times:
            print(f"doctor explain / grep -c -E ({len(patterns)} patterns): "
                  f"{d / statistics.median(g_times):.2f}  (goal <= 2)")
        print(f"doctor explain / grep -c -E (error-like words, the fixed anchor): {d / w:.2f}")
        if "python-loops" in times:
            p = statistics.median(times["python-loops"])
            print(f"doctor explain with its line loops in Python (DOCTOR_NATIVE=0) / the anchor: {p / w:.2f}; "
                  f"with them in C / in Python: {d / p:.2f}")
        print(f"doctor explain throughput: {size / 1e6 / d:.0f} MB/s")
        print(f"doctor explain peak RSS: {max(rss) / 2**20:.0f} MiB  (goal <= 150)")
        print(f"doctor explain peak RSS, its own (started from a fresh interpreter): "
              f"{own_peak_rss(doctor_cmd) / 2**20:.1f} MiB")
        print(f"doctor explain start-up (a 1-line log, median of 5): {start_up(tmpdir) * 1000:.0f} ms")
        print("doctor explain's line loops: " + ("C (matching/_lines.c)" if block_lines.native else
                                                "Python (matching/_lines.c is not built here)"))
        ok = top is not None and top["rule"] == "memory-oom-log-prob"
        return 0 if ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
