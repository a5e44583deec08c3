"""`doctor train`'s closing table: one row per attempt, then the overrides to paste."""
from __future__ import annotations

import sys
from typing import Any, TextIO

from supervisor.overrides import hydra_value


def render_table(doc: dict[str, Any], file: TextIO | None = None) -> None:
    """The final table of attempts and the line to paste into the launch script."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file or sys.stdout, highlight=False, soft_wrap=True)
    table = Table(title=f"doctor train: {doc['status']}, {doc['steps_completed']} step(s) done")
    for col in ("#", "exit", "diagnosis", "resumed from", "steps", "seconds", "decision", "changes"):
        table.add_column(col)
    for a in doc["attempts"]:
        table.add_row(str(a["n"]), str(a["exit_code"]), _diagnosis_cell(a["diagnosis"]),
                      str(a["resumed_from_step"]), str(a["steps_completed"]), f"{a['duration_s']:.0f}",
                      a["decision"], _changes_cell(a["changes"]))
    console.print(table)
    if doc["paste"]:
        console.print("Overrides that worked (append to the launch command):")
        console.print(f"  {doc['paste']}", markup=False)


def _diagnosis_cell(d: dict | None) -> str:
    if not d:
        return "-"
    return d["category"] + (f" {d['rule']}" if d.get("rule") else "") + (f" @{d['phase']}" if d.get("phase") else "")


def _changes_cell(changes: dict[str, list]) -> str:
    return ", ".join(f"{k.rsplit('.', 1)[-1]} {hydra_value(o)}->{hydra_value(v)}"
                     for k, (o, v) in changes.items()) or "-"
