"""How fast is `doctor check` (no LAUNCH) next to `python -m torch.utils.collect_env`?

Both run with this interpreter, interleaved, several times in one run; the result is the ratio of
the median wall times (goal: <= 0.25). Absolute times are printed for context only: they depend
on the machine and its load, the ratio much less.

    .venv/bin/python bench/check_speed.py [--repeats N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL = 0.25


def wall(argv: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter() - t0
    if r.returncode not in (0, 1):  # 1 = doctor found problems: still a full run
        raise SystemExit(f"{' '.join(argv)} exited {r.returncode}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    # As in an activated environment: `python3` (doctor's default target) is this interpreter.
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    doctor = [sys.executable, "-m", "doctor", "check"]
    anchor = [sys.executable, "-m", "torch.utils.collect_env"]
    wall(doctor, env)  # warm the file cache for both before measuring
    wall(anchor, env)
    d_times, a_times = [], []
    for _ in range(args.repeats):
        d_times.append(wall(doctor, env))
        a_times.append(wall(anchor, env))
    d, a = statistics.median(d_times), statistics.median(a_times)
    ratio = d / a
    print(f"doctor check: median {d:.2f} s over {args.repeats} runs ({', '.join(f'{t:.2f}' for t in d_times)})")
    print(f"python -m torch.utils.collect_env: median {a:.2f} s ({', '.join(f'{t:.2f}' for t in a_times)})")
    print(f"ratio doctor/collect_env = {ratio:.3f} (goal <= {GOAL}): {'OK' if ratio <= GOAL else 'MISSED'}")
    return 0 if ratio <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
