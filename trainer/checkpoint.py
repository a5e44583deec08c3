"""Checkpoints in verl's layout, written so that a crash at any moment leaves the previous one usable.

    <default_local_dir>/
        global_step_N/actor/{model.pt, optim.pt, rng_rank_R.pt}, global_step_N/data.pt
        latest_checkpointed_iteration.txt        # "N": the marker, written last

A checkpoint is written into a hidden temp folder, flushed to disk, renamed into place, and only
then is the marker replaced (temp file + rename). `latest()` trusts only the marker, so a folder
without it (a kill during the write) is never loaded.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import torch

from trainer.atomic import fsync_dir, write_text_atomic  # noqa: F401  (re-exported)

MARKER = "latest_checkpointed_iteration.txt"
TMP_PREFIX = ".tmp-global_step_"
# Test hook, "STEP:SECONDS": hold that step's finished temp folder before the rename, so a test
# can kill the run in the middle of a checkpoint write.
HOLD_ENV = "TRAINER_CHECKPOINT_HOLD"


def _save(obj, path: Path) -> None:
    with open(path, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())


def save(root: Path, step: int, model: dict, optimizer: dict, rngs: list[dict], data_state: dict,
         keep: int | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"global_step_{step}"
    tmp = root / f"{TMP_PREFIX}{step}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "actor").mkdir(parents=True)
    _save(model, tmp / "actor" / "model.pt")
    _save(optimizer, tmp / "actor" / "optim.pt")
    for rank, rng in enumerate(rngs):
        _save(rng, tmp / "actor" / f"rng_rank_{rank}.pt")
    _save(data_state, tmp / "data.pt")
    fsync_dir(tmp / "actor")
    fsync_dir(tmp)
    hold_step, _, hold_s = os.environ.get(HOLD_ENV, "").partition(":")
    if hold_step == str(step):
        time.sleep(float(hold_s or 0))
    if final.exists():  # left by a run that died after the rename but before its marker
        shutil.rmtree(final)
    os.rename(tmp, final)
    fsync_dir(root)
    write_text_atomic(root / MARKER, f"{step}\n")
    if keep:
        prune(root, keep)
    return final


def latest(root: Path) -> int | None:
    """The step of the newest complete checkpoint (the marker's), or None."""
    try:
        text = (root / MARKER).read_text().strip()
    except OSError:
        return None
    step = int(text) if text.isdigit() else None
    if step is None or not (root / f"global_step_{step}" / "data.pt").is_file():
        return None
    return step


def load(path: Path) -> dict:
    actor = path / "actor"
    rngs = []
    rank = 0
    while (actor / f"rng_rank_{rank}.pt").is_file():
        rngs.append(torch.load(actor / f"rng_rank_{rank}.pt", weights_only=False))
        rank += 1
    return {"model": torch.load(actor / "model.pt", weights_only=True),
            "optimizer": torch.load(actor / "optim.pt", weights_only=False),
            "rngs": rngs, "data": torch.load(path / "data.pt", weights_only=False)}


def clean_temp(root: Path) -> None:
    """Remove temp folders of writes that never finished."""
    if root.is_dir():
        for p in root.glob(f"{TMP_PREFIX}*"):
            shutil.rmtree(p, ignore_errors=True)


def prune(root: Path, keep: int) -> None:
    steps = sorted(int(p.name.rsplit("_", 1)[1]) for p in root.glob("global_step_*") if p.name.rsplit("_", 1)[1].isdigit())
    for step in steps[:-keep]:
        shutil.rmtree(root / f"global_step_{step}", ignore_errors=True)
