"""Auto-tune against exhaustive search, side by side on the same task, in one run.

1. `doctor train --auto-tune` starts from a setting that runs out of memory under the worker
   memory limit and finds its own way to a setting that runs.
2. Every combination of the reference engine's memory knobs on the same task (update micro batch
   x gradient checkpointing) is run directly; those that run out of memory are dropped.
3. Printed: the retries auto-tune took, the steps/s of the setting it ended on over the best
   combination's (both measured in step 2, same conditions; goal >= 0.9), and the steps lost
   (steps a failed attempt finished that its checkpoint did not keep; goal 0).

    .venv/bin/python bench/autotune.py [--steps 4] [--limit 720MiB] [--start-micro 16]

The task: the embedded tiny model on its digits task with ~400-token prompts (so a micro batch's
activations matter), 16 samples per step on one worker, under `trainer.worker_memory_limit`.

Timing is the median `timing_s/step` of each run's steps after the first (the first pays for
start-up work), so the ratio compares steady-state step rates measured side by side.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

A = "actor_rollout_ref."
MICRO = A + "actor.ppo_micro_batch_size_per_gpu"
CKPT = A + "model.enable_gradient_checkpointing"


def long_prompts(work: Path) -> Path:
    """The embedded task's rows with ~400-token prompts: memory per sample grows, compute barely."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trainer.tiny import ensure_tiny

    rows = pq.read_table(ensure_tiny() / "data" / "train.parquet").slice(0, 64).to_pylist()
    for row in rows:
        row["prompt"] = [{"role": "user", "content": "Read all of this before you answer. " * 15
                          + row["prompt"][0]["content"]}]
    path = work / "long_prompts.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def task(args, **extra) -> list[str]:
    from trainer.defaults import embedded_default

    settings = {
        "trainer.nnodes": 1, "trainer.total_training_steps": args.steps, "data.train_batch_size": 4,
        A + "actor.ppo_mini_batch_size": 4, A + "rollout.n": 4, "data.train_files": args.data,
        "data.max_prompt_length": 512, "data.max_response_length": args.response_length,
        A + "rollout.log_prob_micro_batch_size_per_gpu": 2, A + "ref.log_prob_micro_batch_size_per_gpu": 2,
        "trainer.plot": False, "trainer.worker_memory_limit": args.limit, "trainer.save_freq": 1,
    }
    settings.update(extra)
    keep = [o for o in embedded_default(args.size) if o.split("=", 1)[0] not in settings]
    return keep + [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in settings.items()]


def env(home: Path) -> dict:
    cache = os.environ.get("VERL_DOCTOR_CACHE") or str(Path.home() / ".cache" / "verl-doctor")
    # One compute thread per worker unless the caller says otherwise: the limit is RLIMIT_DATA, and each
    # thread's stack and malloc arena count against it, so the default limit holds only at one thread.
    return dict(os.environ, HOME=str(home), RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0",
                VERL_DOCTOR_CACHE=cache, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))


def step_rate(metrics: Path, from_step: int = 0) -> float | None:
    """Steps/s: 1 / median step time of the steps after the first of a run."""
    try:
        rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
    except OSError:
        return None
    times = [r["timing_s/step"] for r in rows if r.get("training/global_step", 0) > from_step]
    times = times[1:] if len(times) > 1 else times
    return 1.0 / statistics.median(times) if times else None


def run_setting(args, work: Path, micro: int, ckpt: bool, round_: int = 0) -> float | None:
    out = work / f"grid-m{micro}-{'ckpt' if ckpt else 'nockpt'}-r{round_}"
    cmd = [sys.executable, "-m", "trainer.main_grpo",
           *task(args, **{MICRO: micro, CKPT: ckpt, "trainer.default_local_dir": str(out)})]
    r = subprocess.run(cmd, cwd=work, env=env(work / "home"), capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return step_rate(out / "metrics.jsonl")


def run_autotune(args, work: Path) -> dict:
    run_dir = work / "autotune"
    cmd = [sys.executable, "-m", "doctor", "train", "--auto-tune", "--no-preflight", "--json",
           "--run-dir", str(run_dir), *task(args, **{MICRO: args.start_micro, CKPT: False})]
    r = subprocess.run(cmd, cwd=work, env=env(work / "home"), capture_output=True, text=True)
    if not r.stdout.strip():
        raise SystemExit(f"doctor train printed nothing:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout)


def steps_lost(doc: dict) -> int:
    """Steps a failed attempt completed beyond the checkpoint the next attempt resumed from."""
    lost = 0
    attempts = doc["attempts"]
    for a, nxt in zip(attempts, attempts[1:]):
        lost += max(0, a["steps_completed"] - nxt["resumed_from_step"])
    return lost


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--size", default="tiny")
    p.add_argument("--response-length", type=int, default=8)
    p.add_argument("--limit", default="720MiB", help="trainer.worker_memory_limit")
    p.add_argument("--start-micro", type=int, default=16)
    p.add_argument("--micros", default="16,8,4,2,1", help="update micro batch sizes of the grid")
    p.add_argument("--rounds", type=int, default=2, help="grid repetitions (best rate per setting)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="vd-autotune-"))
    (work / "home").mkdir()
    args.data = long_prompts(work)

    doc = run_autotune(args, work)
    final = doc["final_overrides"]
    final_setting = (int(final[MICRO]), str(final.get(CKPT, False)).lower() == "true")
    print(f"auto-tune done: final micro={final_setting[0]} checkpointing={final_setting[1]}", flush=True)

    # Rounds in alternating order, best rate per setting: a load spike on this shared machine
    # slows one run, not a setting.
    grid: dict[tuple[int, bool], float | None] = {}
    micros = [int(m) for m in args.micros.split(",") if int(m) <= args.start_micro]
    settings = list(itertools.product(micros, (False, True)))
    for r in range(args.rounds):
        for micro, ckpt in (settings if r % 2 == 0 else settings[::-1]):
            if r and grid.get((micro, ckpt)) is None:
                continue  # out of memory once is out of memory
            rate = run_setting(args, work, micro, ckpt, r)
            grid[(micro, ckpt)] = max(filter(None, (rate, grid.get((micro, ckpt)))), default=None)
            print(f"  round {r + 1} micro={micro:<2} checkpointing={str(ckpt):<5} "
                  f"{'out of memory' if rate is None else f'{rate:.3f} steps/s'}", flush=True)

    runs = {k: v for k, v in grid.items() if v}
    best = max(runs, key=runs.get) if runs else None
    print(f"auto-tune: status {doc['status']}, {len(doc['attempts']) - 1} retries, "
          f"final micro={final_setting[0]} checkpointing={final_setting[1]}")
    for a in doc["attempts"]:
        d = a["diagnosis"] or {}
        print(f"  attempt {a['n']}: exit {a['exit_code']} {d.get('category', '-')}/{d.get('phase', '-')} "
              f"{a['decision']} {a['changes'] or ''}")
    if best is None or final_setting not in runs:
        print("ratio: n/a (the final setting or every grid setting failed)")
    else:
        ratio = runs[final_setting] / runs[best]
        print(f"best by exhaustive search: micro={best[0]} checkpointing={best[1]} ({runs[best]:.3f} steps/s)")
        print(f"final/best steps/s ratio: {ratio:.2f} (goal >= 0.9)")
    print(f"steps lost: {steps_lost(doc)} (goal 0)")
    print(f"work dir: {work}")


if __name__ == "__main__":
    main()
