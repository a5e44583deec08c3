"""A launch planted with secrets the way users leak them: an exported HF token, a tracking URI with
a password, wandb as logger with its key in the environment, a bearer token for log lines. Tests
assert that none of them reaches any output."""
from __future__ import annotations

import textwrap
from pathlib import Path

HF = "hf_ScriptExportedToken9876543210abcdef"
WANDB = "5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f"
MLFLOW_PW = "mlfl0w-Pa55word"
BEARER = "Zm9vYmFyLWJlYXJlci10b2tlbi0xMjM0NTY3"
ENV_SECRET = "envOnly-Secr3t-value-42"
SECRETS = (HF, WANDB, MLFLOW_PW, BEARER, ENV_SECRET)
MLFLOW_URI = f"http://alice:{MLFLOW_PW}@mlflow.internal:5000"


def planted_script(path: Path, *overrides: str) -> Path:
    """Write `path`: a launch script that exports the HF token and the tracking URI, then runs verl's
    GRPO with wandb logging, `overrides` and one node."""
    lines = ["algorithm.adv_estimator=grpo", "trainer.logger='[\"console\",\"wandb\"]'", *overrides,
             "trainer.nnodes=1"]
    path.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        export HF_TOKEN={HF}
        export MLFLOW_TRACKING_URI={MLFLOW_URI}
        python3 -m verl.trainer.main_ppo \\
        """) + " \\\n".join(f"    {line}" for line in lines) + "\n")
    return path


def planted_env() -> dict[str, str]:
    """Secrets only the environment holds: wandb's key and a password variable."""
    return {"WANDB_API_KEY": WANDB, "MY_SERVICE_PASSWORD": ENV_SECRET}
