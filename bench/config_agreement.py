"""Agreement of doctor's config validation with verl's own validate_config, side by side in one run.

    .venv/bin/python bench/config_agreement.py [N] [SEED]      # default 500 cases, seed 1

Generated configs (tests/config_cases.py) go through verl 0.9.1's validate_config (one subprocess,
looping) and through doctor's `startup_problems` / `late_problems`. Printed:
  * agreement: of the configs verl rejects, the share doctor rejects first with verl's exact words
    (goal 100%); and doctor's false rejections of configs verl accepts (goal 0);
  * extra failure classes: what doctor also finds on configs verl's start-up validation lets through
    (checked by verl only minutes into a run, or never), with how many configs carry each;
  * speed: verl's validate_config time over doctor's validation time on the same configs (a ratio).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from checks.config import late_problems, startup_problems  # noqa: E402
from tests.config_cases import nested  # noqa: E402


def main(n: int = 500, seed: int = 1) -> int:
    proc = subprocess.run([sys.executable, "-m", "tests.config_cases", str(n), str(seed), "--timed"], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
        return 2
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"overrides"')]
    rejected = agreed = false_rejections = 0
    extra: Counter[str] = Counter()
    doctor_seconds = verl_seconds = 0.0
    for r in rows:
        view = nested(r["view"])
        t0 = time.perf_counter()
        problems = startup_problems(view)
        late = late_problems(view)
        doctor_seconds += time.perf_counter() - t0
        verl_seconds += r.get("seconds") or 0.0
        if r["verl"]["ok"]:
            false_rejections += bool(problems)
            extra.update({p.id for p in late})
        else:
            rejected += 1
            agreed += bool(problems) and problems[0].verl_text == r["verl"]["message"]
    print(f"configs: {len(rows)}; verl's validate_config rejects {rejected}")
    print(f"agreement: {agreed}/{rejected} = {agreed / max(rejected, 1):.1%} of verl's rejections "
          f"rejected first by doctor with verl's words (goal 100%)")
    print(f"false rejections: {false_rejections} of {len(rows) - rejected} configs verl accepts (goal 0)")
    print(f"extra failure classes doctor catches on configs verl accepts: {len(extra)}")
    for cid, count in extra.most_common():
        print(f"  {cid:<28} {count} configs")
    if verl_seconds and doctor_seconds:
        print(f"speed: verl validate_config time / doctor validation time = {verl_seconds / doctor_seconds:.0f} "
              f"(doctor's start-up and late checks together, per config, same configs)")
    return 0 if agreed == rejected and not false_rejections else 1


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    raise SystemExit(main(*args))
