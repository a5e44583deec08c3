"""The run's record on disk: `RUN_DIR/run.json` (the supervisor's state) and
`RUN_DIR/attempts.jsonl` (one row per attempt). Both are redacted and rewritten atomically after
every change, so a reader - or `doctor train --resume` after the supervisor itself was stopped -
never sees half a file."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from matching.redact import redact_mapping
from trainer.atomic import write_text_atomic

RUN_STATE = "run.json"
ATTEMPTS = "attempts.jsonl"


@dataclass
class Attempt:
    n: int
    overrides: list[str]
    started_at: str
    resumed_from_step: int = 0
    exit_code: int | None = None
    duration_s: float = 0.0
    steps_completed: int = 0
    diagnosis: dict | None = None
    decision: str = "running"  # done | downshift | retry | stop | interrupted | abandoned
    reason: str = ""
    changes: dict[str, list] = field(default_factory=dict)  # for the next attempt: key -> [old, new]
    log: str = ""
    pid: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_ledger(run_dir: Path, state: dict[str, Any], attempts: list[Attempt]) -> None:
    write_text_atomic(run_dir / RUN_STATE, json.dumps(redact_mapping(state), indent=2) + "\n")
    rows = "".join(json.dumps(redact_mapping(a.to_dict())) + "\n" for a in attempts)
    write_text_atomic(run_dir / ATTEMPTS, rows)


def read_ledger(run_dir: Path) -> tuple[dict[str, Any], list[Attempt]]:
    """The state and the attempts recorded in `run_dir`; OSError or ValueError when it holds none."""
    state = json.loads((run_dir / RUN_STATE).read_text())
    rows = [json.loads(x) for x in (run_dir / ATTEMPTS).read_text().splitlines() if x]
    try:
        return state, [Attempt(**row) for row in rows]
    except TypeError as exc:  # a row this version does not know
        raise ValueError(f"{ATTEMPTS}: {exc}") from None
