"""Is `doctor report` about as quick as what it builds on?

Two side-by-side measurements in one run, interleaved, medians compared:
  1. `doctor report --log LOG -- LAUNCH` vs `doctor check -- LAUNCH` (the issue's goal: a local
     report in about the time of `doctor check`; here <= 1.5x).
  2. `doctor report --log BIG --bundle B` vs `doctor check` followed by explaining BIG with the
     explain engine, on a large log (what the report adds: a second pass over the log, redaction,
     the bundle; goal <= 1.5x).
Absolute times are printed for context only: they depend on the machine and its load.

    .venv/bin/python bench/report_speed.py [--repeats N] [--big-mb MB]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "explain" / "verl-batch-not-divisible.log"
GOAL = 1.5


def wall(argv: list[str], env: dict, cwd: Path) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    if r.returncode not in (0, 1):  # 1 = problems found: still a full run
        raise SystemExit(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.strip()[-300:]}")
    return elapsed


def compare(name: str, ours: list[str], anchor: list[str], env: dict, cwd: Path, repeats: int) -> bool:
    wall(ours, env, cwd)  # warm caches for both
    wall(anchor, env, cwd)
    o_times, a_times = [], []
    for _ in range(repeats):
        o_times.append(wall(ours, env, cwd))
        a_times.append(wall(anchor, env, cwd))
    o, a = statistics.median(o_times), statistics.median(a_times)
    ratio = o / a
    print(f"{name}: report median {o:.2f} s ({', '.join(f'{t:.2f}' for t in o_times)}), "
          f"anchor median {a:.2f} s ({', '.join(f'{t:.2f}' for t in a_times)})")
    print(f"  ratio report/anchor = {ratio:.2f} (goal <= {GOAL}): {'OK' if ratio <= GOAL else 'MISSED'}")
    return ratio <= GOAL


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--big-mb", type=int, default=256, help="size of the large log")
    args = ap.parse_args()
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    doctor = [sys.executable, "-m", "doctor"]
    with tempfile.TemporaryDirectory(prefix="doctor-bench-") as tmp:
        work = Path(tmp)
        script = work / "run_grpo.sh"
        script.write_text(textwrap.dedent("""\
            #!/bin/bash
            export HF_TOKEN=hf_BenchPlantedToken0123456789abcdef
            python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo data.train_batch_size=6 \\
                actor_rollout_ref.rollout.n=5 trainer.n_gpus_per_node=8 trainer.nnodes=1
            """))
        small = work / "run.log"
        small.write_bytes(FIXTURE.read_bytes())
        ok = compare("local report vs doctor check",
                     [*doctor, "report", "--log", str(small), "-o", str(work / "r.md"), "--", "bash", str(script)],
                     [*doctor, "check", "--", "bash", str(script)], env, work, args.repeats)
        big = work / "big.log"
        line = b"(WorkerDict pid=7, ip=10.0.0.2) step:12 - actor/pg_loss:0.0123 - response_length/mean:128.0\n"
        block = line * ((8 << 20) // len(line))
        with big.open("wb") as fh:
            for i in range(max(1, args.big_mb // 8)):
                fh.write(block)
                if i == args.big_mb // 16:
                    fh.write(FIXTURE.read_bytes())
        print(f"large log: {big.stat().st_size / 2**20:.0f} MiB")
        explain = f"from matching.explain import explain_report; explain_report([{str(big)!r}])"
        anchor = ["sh", "-c", f'"$0" -m doctor check >/dev/null; "$0" -c "$1"', sys.executable, explain]
        ok &= compare("report --bundle on a large log vs doctor check + explain engine",
                      [*doctor, "report", "--log", str(big), "-o", str(work / "r.md"), "--bundle", str(work / "b.tgz")],
                      anchor, env, work, args.repeats)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
