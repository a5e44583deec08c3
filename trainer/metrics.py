"""Where a step's metrics go: a verl-style console line, `metrics.jsonl`, MLflow (when asked for
and installed), a rich progress bar, and a PNG of the reward and KL curves at the end."""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

from trainer.checkpoint import write_text_atomic

HEADLINE = [("reward", "critic/score/mean"), ("acc", "reward/accuracy"), ("kl", "actor/kl_loss"),
            ("len", "response_length/mean"), ("s/step", "timing_s/step")]


def combine(parts: list[dict]) -> dict:
    """Merge the workers' (sum, weight) / ("max"|"min"|"sum", value) metrics into plain numbers."""
    merged: dict[str, list] = {}
    for part in parts:
        for key, (a, b) in part.items():
            if a in ("max", "min", "sum"):
                if key not in merged:
                    merged[key] = [a, b]
                else:
                    old = merged[key][1]
                    merged[key][1] = {"max": max, "min": min, "sum": lambda x, y: x + y}[a](old, b)
            else:
                m = merged.setdefault(key, [0.0, 0.0])
                m[0] += a
                m[1] += b
    out = {}
    for key, (a, b) in merged.items():
        out[key] = b if isinstance(a, str) else (a / b if b else 0.0)
    return out


def console_line(step: int, metrics: dict) -> str:
    """verl's console format: `step:N - key:value - ...`."""
    parts = [f"step:{step}"]
    for key in sorted(metrics):
        value = metrics[key]
        parts.append(f"{key}:{value:.6g}" if isinstance(value, float) else f"{key}:{value}")
    return " - ".join(parts)


class MetricsLog:
    """metrics.jsonl with exactly one line per completed step, also across resumes."""

    def __init__(self, path: Path, resume_step: int):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = [line for line in self.read(path) if line.get("step", 0) <= resume_step]
        # Steps after the checkpoint we resume from will be done again: drop their old lines.
        write_text_atomic(path, "".join(json.dumps(line) + "\n" for line in kept))

    @staticmethod
    def read(path: Path) -> list[dict]:
        if not path.is_file():
            return []
        rows = []
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by a kill
                continue
        return rows

    def write(self, step: int, metrics: dict) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps({"step": step, **_finite(metrics)}) + "\n")
            fh.flush()


def _finite(metrics: dict) -> dict:
    return {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in metrics.items()}


class MLflowLog:
    """MLflow tracking; the backend comes from MLFLOW_TRACKING_URI (sqlite works offline)."""

    def __init__(self, project: str, experiment: str, config: dict):
        import mlflow

        self.mlflow = mlflow
        mlflow.set_experiment(project)
        self.run = mlflow.start_run(run_name=experiment)
        mlflow.log_params({k: str(v)[:250] for k, v in config.items() if not k.startswith("_")})

    def write(self, step: int, metrics: dict) -> None:
        clean = {k.replace("@", "_at_"): v for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        self.mlflow.log_metrics(clean, step=step)

    def close(self) -> None:
        self.mlflow.end_run()


class Progress:
    """A rich progress bar on stderr with the headline metrics (only on a terminal)."""

    def __init__(self, total: int, start: int):
        self.bar = None
        if not sys.stderr.isatty():
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeRemainingColumn

        self.bar = RichProgress(TextColumn("[bold]GRPO"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                TextColumn("{task.fields[info]}"), console=Console(stderr=True), transient=False)
        self.task = self.bar.add_task("train", total=total, completed=start, info="")
        self.bar.start()

    def update(self, step: int, metrics: dict) -> None:
        if self.bar is not None:
            info = "  ".join(f"{name} {metrics[key]:.3g}" for name, key in HEADLINE if key in metrics)
            self.bar.update(self.task, completed=step, info=info)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def plot_curves(rows: list[dict], path: Path) -> Path | None:
    """Reward (and KL, when the run has a KL loss) against the step, as a PNG."""
    if not rows:
        return None
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    panels = [("critic/score/mean", "reward (mean score)"), ("actor/kl_loss", "KL loss")]
    panels = [(k, t) for k, t in panels if any(r.get(k) is not None for r in rows)]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.2), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels):
        ax.plot(steps, [r.get(key) for r in rows], marker=".")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)
    return path
