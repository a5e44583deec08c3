"""Generated verl configs for the differential test and bench/config_agreement.py.

`cases(n, seed)` yields override lists around the knobs verl's validate_config looks at (batch
sizes, device counts, micro-batch settings, KL, sequence parallelism, loss mode, scheduler, sampling).
`python -m tests.config_cases N SEED` (run with verl importable) composes verl's own config ONCE,
applies each case's overrides, runs verl's own `validate_config` on it, and prints one JSON line per
case: the overrides, verl's verdict (exception type and innermost message) and the config values
doctor's validation reads (`checks.config.STARTUP_KEYS`), taken from the very config verl validated.
A last line holds verl's default scorer's verdict on the data sources doctor's knowledge lists.
"""
from __future__ import annotations

import io
import json
import random
import sys
import time
from contextlib import redirect_stdout

A = "actor_rollout_ref.actor."
R = "actor_rollout_ref.rollout."
F = "actor_rollout_ref.ref."
BASE = ["algorithm.adv_estimator=grpo", R + "name=vllm"]


def _pick(rng: random.Random, common, rare=(), p_rare=0.1):
    return rng.choice(rare) if rare and rng.random() < p_rare else rng.choice(common)


def case(rng: random.Random) -> list[str]:
    ov = {
        "data.train_batch_size": _pick(rng, [8, 16, 32, 64, 128, 256], [1, 3, 6, 12, 24, 100], 0.3),
        R + "n": _pick(rng, [2, 4, 8, 16], [1, 3, 5], 0.25),
        "trainer.n_gpus_per_node": _pick(rng, [1, 2, 4, 8], [3, 6, 16], 0.2),
        "trainer.nnodes": _pick(rng, [1, 2], [3, 4], 0.2),
        A + "ppo_mini_batch_size": _pick(rng, [4, 8, 16, 32, 64], [1, 2, 3, 128, 512], 0.3),
        A + "ppo_micro_batch_size_per_gpu": _pick(rng, [1, 2, 4, 8], ["null"], 0.15),
        A + "ppo_micro_batch_size": _pick(rng, ["null"], [1, 2, 4, 8, 16, 32], 0.15),
        A + "use_dynamic_bsz": _pick(rng, [False], [True], 0.1),
        A + "use_kl_loss": _pick(rng, [True, False]),
        "algorithm.use_kl_in_reward": _pick(rng, [False], [True], 0.1),
        F + "log_prob_micro_batch_size_per_gpu": _pick(rng, [2, 4], ["null"], 0.2),
        F + "log_prob_micro_batch_size": _pick(rng, ["null"], [8, 16], 0.1),
        R + "log_prob_micro_batch_size_per_gpu": _pick(rng, [2, 4], ["null"], 0.15),
        R + "log_prob_micro_batch_size": _pick(rng, ["null"], [8, 16], 0.1),
        A + "loss_agg_mode": _pick(rng, ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"],
                                   ["sum", "token_mean"], 0.05),
        A + "ulysses_sequence_parallel_size": _pick(rng, [1], [2, 4], 0.15),
        "actor_rollout_ref.model.use_remove_padding": _pick(rng, [True, False]),
        A + "optim.lr_scheduler_type": _pick(rng, ["constant", "cosine"], ["linear"], 0.05),
        A + "fsdp_config.strategy": _pick(rng, ["fsdp", "fsdp2"], ["ddp"], 0.05),
        R + "val_kwargs.do_sample": _pick(rng, [False, True]),
        R + "temperature": _pick(rng, [1.0, 0.7], [0.0], 0.2),
    }
    return BASE + [f"{k}={v}" for k, v in ov.items()]


def cases(n: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    return [case(rng) for _ in range(n)]


def _value(text: str):
    import yaml

    return yaml.safe_load(text)  # what Hydra's grammar yields for these simple values


def run_verl(n: int, seed: int, timed: bool = False) -> None:
    """Runs where verl is importable: print one JSON line per case."""
    import copy
    import warnings

    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from checks.config import STARTUP_KEYS
    from probes.verl_config import _hydra_compose, run_validate, verl_config_dir

    warnings.simplefilter("ignore")
    full = _hydra_compose(verl_config_dir(), "ppo_trainer", [])
    plain = _reads_of_validate(OmegaConf.to_container(full, resolve=False))
    for overrides in cases(n, seed):
        tree = copy.deepcopy(plain)
        for text in overrides:
            key, raw = text.split("=", 1)
            node = tree
            *parents, leaf = key.split(".")
            for p in parents:
                node = node[p]
            node[leaf] = _value(raw)
        cfg = OmegaConf.create(tree)
        t0 = time.perf_counter()
        with redirect_stdout(io.StringIO()):
            verdict = run_validate(cfg, validate_config, need_reference_policy, need_critic, with_traceback=True)
        seconds = time.perf_counter() - t0
        view = {k: OmegaConf.select(cfg, k, default=None) for k in STARTUP_KEYS}
        row = {"overrides": overrides, "verl": verdict, "view": view}
        if timed:
            row["seconds"] = seconds
        print(json.dumps(row), flush=True)
    print(json.dumps({"registry": registry_verdicts()}), flush=True)


def registry_verdicts() -> dict[str, bool]:
    """For each data_source knowledge/verl_keys.toml lists (and one it does not): does verl's
    default scorer dispatch it? An unregistered source raises NotImplementedError."""
    from verl.utils.reward_score import default_compute_score

    from checks.config import key_table

    table = key_table()["reward_sources"]
    out = {}
    for source in table["exact"] + [p + "_2024" for p in table["prefixes"]] + ["verl_doctor/digits"]:
        try:
            with redirect_stdout(io.StringIO()):
                default_compute_score(source, "", "0")
            out[source] = True
        except NotImplementedError:
            out[source] = False
        except Exception:  # a scorer exists and disliked the dummy answer
            out[source] = True
    return out


def _reads_of_validate(tree: dict) -> dict:
    """The parts of the composed config that validate_config reads: all of the actor (it becomes a
    dataclass), the scalars and val_kwargs of rollout/ref/model, and trainer/data/algorithm/critic
    scalars. Building a DictConfig of the whole tree costs ~0.5 s a case on a small CPU; this keeps
    500 cases within the test budget. Every case still goes through verl's own validate_config."""
    def scalars(node: dict, keep=()) -> dict:
        return {k: v for k, v in node.items() if not isinstance(v, dict) or k in keep}

    arr = tree["actor_rollout_ref"]
    return {
        "trainer": scalars(tree["trainer"]), "data": scalars(tree["data"]),
        "algorithm": scalars(tree["algorithm"], keep=("rollout_correction",)),
        "critic": {"enable": tree["critic"].get("enable")},
        "actor_rollout_ref": {"actor": arr["actor"], "ref": scalars(arr["ref"]),
                              "rollout": scalars(arr["rollout"], keep=("val_kwargs",)),
                              "model": scalars(arr["model"], keep=("lora",))},
    }


def nested(view: dict) -> dict:
    """{"a.b": 1} -> {"a": {"b": 1}}"""
    out: dict = {}
    for key, value in view.items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


if __name__ == "__main__":
    run_verl(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0, timed="--timed" in sys.argv)
