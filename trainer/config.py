"""The reference trainer's configuration: verl's key names, verl 0.9.1's defaults and meanings.

Overrides are read with Hydra's override grammar (through `launch.script`), so a line from a verl
launch script means the same here. Every key the trainer knows is listed in `KEYS`; a key that is
not listed is refused by name. Keys that only steer verl's engines (vLLM, FSDP) are accepted and
have no effect here; `doctor train` still passes them on to verl when it runs verl itself.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any


class ConfigError(Exception):
    """A bad override or an inconsistent setting: printed as one line, exit 2."""


@dataclass(frozen=True)
class Key:
    default: Any
    meaning: str
    effect: bool = True  # False: accepted for verl compatibility, no effect in the reference engine
    verl: bool = True  # False: our own key (verl needs `+key=` for it, so `+` is accepted too)


A = "actor_rollout_ref.actor."
R = "actor_rollout_ref.rollout."
NOOP_ENGINE = "steers verl's vLLM/FSDP engines; no effect in the reference engine"

KEYS: dict[str, Key] = {
    # data
    "data.train_files": Key("~/data/rlhf/gsm8k/train.parquet", "training parquet file(s), verl's GSM8K layout"),
    "data.val_files": Key("~/data/rlhf/gsm8k/test.parquet", "validation parquet file(s), scored every trainer.test_freq steps"),
    "data.train_batch_size": Key(1024, "prompts per training step (samples = this x rollout.n)"),
    "data.max_prompt_length": Key(512, "longest prompt in tokens, after the chat template"),
    "data.max_response_length": Key(512, "tokens generated per response at most"),
    "data.filter_overlong_prompts": Key(False, "drop prompts longer than data.max_prompt_length (else: error)"),
    "data.truncation": Key("error", "dead key for RL prompts in verl 0.9", effect=False),
    "data.shuffle": Key(True, "reshuffle the training rows every epoch"),
    "data.seed": Key(None, "seed of shuffling, sampling and initialisation (null means 1, as in verl)"),
    "data.prompt_key": Key("prompt", "column holding the chat prompt"),
    "data.reward_fn_key": Key("data_source", "column that selects the scorer"),
    "data.train_max_samples": Key(-1, "use at most this many training rows (-1: all)"),
    "data.val_max_samples": Key(-1, "use at most this many validation rows (-1: all)"),
    "data.dataloader_num_workers": Key(8, "torch dataloader workers in verl", effect=False),
    "data.source": Key(None, "free-form tag some scripts add with +data.source", effect=False, verl=False),
    # model
    "actor_rollout_ref.model.path": Key("~/models/deepseek-llm-7b-chat", "local Hugging Face model folder"),
    "actor_rollout_ref.model.enable_gradient_checkpointing": Key(True, "recompute activations in the backward pass"),
    "actor_rollout_ref.model.use_remove_padding": Key(True, "sequence packing in verl", effect=False),
    "actor_rollout_ref.model.trust_remote_code": Key(False, "allow model code from the model folder"),
    # actor
    A + "strategy": Key("fsdp", NOOP_ENGINE, effect=False),
    A + "ppo_mini_batch_size": Key(256, "prompts per optimizer step, over all workers (x rollout.n samples)"),
    A + "ppo_micro_batch_size": Key(None, "deprecated global micro batch (divided by the worker count)"),
    A + "ppo_micro_batch_size_per_gpu": Key(None, "samples per forward/backward on one worker; gradients accumulate"),
    A + "use_dynamic_bsz": Key(False, "token-budget batches (only false is supported)"),
    A + "ppo_epochs": Key(1, "passes over each step's samples"),
    A + "shuffle": Key(False, "shuffle samples between ppo epochs"),
    A + "clip_ratio": Key(0.2, "PPO clip range"),
    A + "clip_ratio_low": Key(0.2, "lower clip range"),
    A + "clip_ratio_high": Key(0.2, "upper clip range"),
    A + "clip_ratio_c": Key(3.0, "dual-clip bound for negative advantages"),
    A + "loss_agg_mode": Key("token-mean", "token-mean | token-sum | seq-mean-token-sum | seq-mean-token-mean | seq-mean-token-sum-norm"),
    A + "loss_scale_factor": Key(None, "divisor of seq-mean-token-sum-norm (null: response length)"),
    A + "policy_loss.loss_mode": Key("vanilla", "policy loss (only vanilla is supported)"),
    A + "entropy_coeff": Key(0, "entropy bonus coefficient"),
    A + "use_kl_loss": Key(False, "add a KL loss to a frozen reference model"),
    A + "kl_loss_coef": Key(0.001, "KL loss coefficient"),
    A + "kl_loss_type": Key("low_var_kl", "kl | abs | mse | low_var_kl (k1/k2/k3 aliases; '+' for k2 gradient)"),
    A + "grad_clip": Key(1.0, "max global gradient norm"),
    A + "use_torch_compile": Key(True, NOOP_ENGINE, effect=False),
    A + "optim.lr": Key(1e-6, "AdamW learning rate"),
    A + "optim.weight_decay": Key(0.01, "AdamW weight decay"),
    A + "optim.betas": Key([0.9, 0.999], "AdamW betas"),
    A + "optim.lr_warmup_steps": Key(-1, "linear warm-up steps (-1: use lr_warmup_steps_ratio)"),
    A + "optim.lr_warmup_steps_ratio": Key(0.0, "warm-up steps as a share of all steps"),
    A + "optim.lr_scheduler_type": Key("constant", "constant (after warm-up) | cosine"),
    A + "optim.min_lr_ratio": Key(0.0, "cosine schedule floor as a share of lr"),
    A + "fsdp_config.param_offload": Key(False, NOOP_ENGINE, effect=False),
    A + "fsdp_config.optimizer_offload": Key(False, NOOP_ENGINE, effect=False),
    # rollout
    R + "name": Key(None, "verl's rollout engine (vllm, sglang); the reference engine samples with torch", effect=False),
    R + "mode": Key("async", NOOP_ENGINE, effect=False),
    R + "n": Key(1, "responses sampled per prompt (GRPO's group size)"),
    R + "temperature": Key(1.0, "sampling temperature (also applied to log-probs, as in verl)"),
    R + "top_p": Key(1.0, "nucleus sampling"),
    R + "top_k": Key(-1, "top-k sampling (-1: off)"),
    R + "do_sample": Key(True, "sample (false: greedy)"),
    R + "log_prob_micro_batch_size": Key(None, "deprecated global old-log-prob micro batch"),
    R + "log_prob_micro_batch_size_per_gpu": Key(None, "samples per old-log-prob forward on one worker"),
    R + "tensor_model_parallel_size": Key(2, NOOP_ENGINE, effect=False),
    R + "gpu_memory_utilization": Key(0.5, NOOP_ENGINE, effect=False),
    R + "enforce_eager": Key(False, NOOP_ENGINE, effect=False),
    R + "free_cache_engine": Key(True, NOOP_ENGINE, effect=False),
    R + "max_num_batched_tokens": Key(8192, NOOP_ENGINE, effect=False),
    R + "enable_chunked_prefill": Key(True, NOOP_ENGINE, effect=False),
    R + "load_format": Key("dummy", NOOP_ENGINE, effect=False),
    # reference model
    "actor_rollout_ref.ref.log_prob_micro_batch_size": Key(None, "deprecated global ref-log-prob micro batch"),
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": Key(None, "samples per ref-log-prob forward on one worker"),
    "actor_rollout_ref.ref.fsdp_config.param_offload": Key(False, NOOP_ENGINE, effect=False),
    # algorithm
    "algorithm.adv_estimator": Key("gae", "advantage estimator (the reference trainer implements grpo)"),
    "algorithm.norm_adv_by_std_in_grpo": Key(True, "divide by the group's std (false: Dr.GRPO)"),
    "algorithm.use_kl_in_reward": Key(False, "KL penalty inside the reward (only false is supported)"),
    "algorithm.gamma": Key(1.0, "discount (unused by grpo)", effect=False),
    "algorithm.lam": Key(1.0, "GAE lambda (unused by grpo)", effect=False),
    # reward
    "reward.custom_reward_function.path": Key(None, "file (or pkg://module) defining the scorer"),
    "reward.custom_reward_function.name": Key("compute_score", "scorer function name"),
    "reward.custom_reward_function.reward_kwargs": Key({}, "extra keyword arguments for the scorer", verl=False),
    "reward.reward_manager.name": Key("naive", "reward manager (only naive is supported)"),
    "custom_reward_function.path": Key(None, "legacy key; verl 0.9 ignores it, this trainer honours it with a notice"),
    "custom_reward_function.name": Key(None, "legacy key (null means compute_score), see custom_reward_function.path"),
    # trainer
    "trainer.total_epochs": Key(30, "passes over the training data"),
    "trainer.total_training_steps": Key(None, "stop after this many steps (overrides total_epochs)"),
    "trainer.project_name": Key("verl_examples", "project name (checkpoint folder, MLflow experiment)"),
    "trainer.experiment_name": Key("gsm8k", "run name (checkpoint folder, MLflow run)"),
    "trainer.logger": Key(["console", "wandb"], "console | mlflow | file (others are skipped with a notice)"),
    "trainer.nnodes": Key(1, "Ray nodes to train on"),
    "trainer.n_gpus_per_node": Key(8, "workers per node: one per device (CPU: one per process)"),
    "trainer.device": Key("cuda", "cuda | npu | cpu; when left at the default, the available one is used"),
    "trainer.save_freq": Key(-1, "checkpoint every N steps (-1: only never)"),
    "trainer.test_freq": Key(-1, "validate every N steps (-1: never)"),
    "trainer.val_before_train": Key(True, "validate before the first step (when test_freq > 0)"),
    "trainer.resume_mode": Key("auto", "auto | disable | resume_path"),
    "trainer.resume_from_path": Key(None, "a global_step_N folder, with resume_mode=resume_path"),
    "trainer.default_local_dir": Key("checkpoints/${trainer.project_name}/${trainer.experiment_name}",
                                     "checkpoints and metrics.jsonl"),
    "trainer.max_actor_ckpt_to_keep": Key(None, "keep only the newest N checkpoints"),
    "trainer.critic_warmup": Key(0, "critic warm-up steps (grpo has no critic: only 0)"),
    "trainer.balance_batch": Key(True, "verl's sequence-length balancing", effect=False),
    "trainer.use_v1": Key(True, "verl's v1 trainer", effect=False),
    "trainer.worker_memory_limit": Key(None, "kernel limit on each worker's memory (bytes or 2GiB)", verl=False),
    "trainer.plot": Key(True, "write reward/KL curves as a PNG at the end", verl=False),
    "ray_kwargs.ray_init.num_cpus": Key(None, "CPUs of a local Ray cluster"),
}


def _nested(flat: dict[str, Any]) -> dict:
    out: dict = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def _resolve(flat: dict[str, Any]) -> dict[str, Any]:
    """Resolve ${a.b} interpolations the way OmegaConf does for verl."""
    from omegaconf import OmegaConf

    resolved = OmegaConf.to_container(OmegaConf.create(_nested(flat)), resolve=True)
    return {key: _lookup(resolved, key) for key in flat}


def _lookup(tree: dict, key: str) -> Any:
    for part in key.split("."):
        tree = tree[part]
    return tree


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.I)


def parse_bytes(value: Any) -> int | None:
    """`2GiB`, `512M`, `1.5G` or a plain number of bytes."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    m = _SIZE.match(str(value))
    if not m:
        raise ConfigError(f"trainer.worker_memory_limit={value!r} is not a size like 2GiB or 2147483648")
    unit = (m.group(2) or "B").upper().rstrip("B").rstrip("I")
    power = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4}[unit]
    return int(float(m.group(1)) * 1024 ** power)


def _coerce(key: str, value: Any) -> Any:
    default = KEYS[key].default
    if value is None or default is None:
        return value
    kind = type(default)
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}={value!r}: expected true or false")
    if kind in (int, float) and not isinstance(value, bool):
        if isinstance(value, (int, float)):
            return value if kind is float or float(value).is_integer() else _bad(key, value, "a whole number")
        try:
            return kind(value)
        except (TypeError, ValueError):
            return _bad(key, value, "a number")
    if kind is list and not isinstance(value, list):
        return [value]
    return value


def _bad(key: str, value: Any, what: str):
    raise ConfigError(f"{key}={value!r}: expected {what}")


def config_from_overrides(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """verl-style `key=value` words -> (flat config with defaults, notices for the user)."""
    from launch.script import LaunchError, parse_launch

    words = [w for w in argv if w]
    for w in words:
        if w.startswith("-"):
            raise ConfigError(f"unexpected option {w!r}: the trainer takes KEY=VALUE overrides only")
    try:
        launch = parse_launch(["python", "-m", "trainer.main_grpo", *words])
    except LaunchError as exc:
        raise ConfigError(str(exc)) from None
    flat = {key: spec.default for key, spec in KEYS.items()}
    given: set[str] = set()
    notices: list[str] = []
    for ov in launch.overrides:
        if ov.key not in KEYS:
            raise ConfigError(f"unsupported key {ov.key!r}: the reference trainer does not implement it "
                              "(see `python -m trainer.main_grpo --help` for the keys it knows)")
        if ov.op == "delete":
            flat[ov.key] = KEYS[ov.key].default
            given.discard(ov.key)
            continue
        flat[ov.key] = _coerce(ov.key, ov.value)
        given.add(ov.key)
        if not KEYS[ov.key].effect:
            notices.append(f"{ov.key}: {KEYS[ov.key].meaning}")
    flat = _resolve(flat)
    flat["_given"] = sorted(given)
    return flat, notices


def help_text() -> str:
    lines = ["usage: python -m trainer.main_grpo KEY=VALUE ...", "", "keys (verl 0.9.1 names and defaults):"]
    for key, spec in KEYS.items():
        mark = "" if spec.effect else "  [no effect here]"
        lines.append(f"  {key}={spec.default!r}  {spec.meaning}{mark}")
    return "\n".join(lines)


@dataclass(frozen=True)
class BatchPlan:
    """The seed article's batch hierarchy for W workers."""
    workers: int
    prompts_per_step: int  # B
    samples_per_step: int  # T = B * n
    mini_batch_samples: int  # M * n, over all workers
    updates_per_step: int  # ceil(T / (M n)) per ppo epoch
    local_mini: int  # samples per worker per mini batch
    micro: int  # samples per forward/backward on one worker
    accumulation: int  # micro batches per optimizer step
    log_prob_micro: int
    ref_micro: int


def _per_gpu(cfg: dict, global_key: str, per_gpu_key: str, workers: int, needed: bool) -> int:
    per_gpu, glob = cfg[per_gpu_key], cfg[global_key]
    if per_gpu is not None and glob is not None:
        raise ConfigError(f"set only one of {global_key} and {per_gpu_key} (the global one is deprecated)")
    if per_gpu is not None:
        return int(per_gpu)
    if glob is not None:
        return max(1, int(glob) // workers)
    if needed:
        raise ConfigError(f"set {per_gpu_key} (samples per forward pass on one worker)")
    return 0


def validate(cfg: dict) -> BatchPlan:
    """verl's own consistency rules for the keys this trainer uses, with the key named in each error."""
    if cfg["algorithm.adv_estimator"] != "grpo":
        raise ConfigError(f"algorithm.adv_estimator={cfg['algorithm.adv_estimator']!r}: the reference trainer "
                          "implements grpo (set algorithm.adv_estimator=grpo)")
    for key, allowed in ((A + "use_dynamic_bsz", False), ("algorithm.use_kl_in_reward", False),
                         ("trainer.critic_warmup", 0), (A + "policy_loss.loss_mode", "vanilla"),
                         ("reward.reward_manager.name", "naive")):
        if cfg[key] != allowed:
            raise ConfigError(f"{key}={cfg[key]!r} is not supported by the reference trainer (only {allowed!r})")
    from trainer.algos import KL_TYPES, LOSS_AGG_MODES

    if cfg[A + "loss_agg_mode"] not in LOSS_AGG_MODES:
        raise ConfigError(f"{A}loss_agg_mode={cfg[A + 'loss_agg_mode']!r}: choose from {', '.join(LOSS_AGG_MODES)}")
    if cfg[A + "kl_loss_type"].rstrip("+") not in KL_TYPES:
        raise ConfigError(f"{A}kl_loss_type={cfg[A + 'kl_loss_type']!r}: choose from {', '.join(KL_TYPES)}")
    if cfg["trainer.resume_mode"] not in ("auto", "disable", "resume_path"):
        raise ConfigError(f"trainer.resume_mode={cfg['trainer.resume_mode']!r}: choose auto, disable or resume_path")
    if cfg["trainer.resume_mode"] == "resume_path" and "global_step_" not in str(cfg["trainer.resume_from_path"]):
        raise ConfigError("trainer.resume_from_path must name a global_step_N folder when resume_mode=resume_path")
    positive = ["data.train_batch_size", "data.max_prompt_length", "data.max_response_length", A + "ppo_mini_batch_size",
                A + "ppo_epochs", R + "n", "trainer.nnodes", "trainer.n_gpus_per_node"]
    for key in positive:
        if not isinstance(cfg[key], int) or cfg[key] < 1:
            raise ConfigError(f"{key}={cfg[key]!r}: expected a positive whole number")
    parse_bytes(cfg["trainer.worker_memory_limit"])

    workers = cfg["trainer.nnodes"] * cfg["trainer.n_gpus_per_node"]
    n, prompts, mini = cfg[R + "n"], cfg["data.train_batch_size"], cfg[A + "ppo_mini_batch_size"]
    if prompts % workers:
        raise ConfigError(f"data.train_batch_size={prompts} must be divisible by the worker count {workers} "
                          "(trainer.nnodes x trainer.n_gpus_per_node), so each worker gets whole prompt groups")
    if mini > prompts:
        raise ConfigError(f"{A}ppo_mini_batch_size={mini} is larger than data.train_batch_size={prompts}")
    if (mini * n) % workers:
        raise ConfigError(f"{A}ppo_mini_batch_size={mini} x rollout.n={n} must be divisible by the worker count {workers}")
    local_mini = mini * n // workers
    micro = _per_gpu(cfg, A + "ppo_micro_batch_size", A + "ppo_micro_batch_size_per_gpu", workers, needed=True)
    if local_mini % micro:
        raise ConfigError(f"{A}ppo_micro_batch_size_per_gpu={micro} must divide the per-worker mini batch "
                          f"{local_mini} (= ppo_mini_batch_size {mini} x n {n} / {workers} workers)")
    needs_old = cfg[A + "ppo_epochs"] > 1 or mini < prompts
    log_micro = _per_gpu(cfg, R + "log_prob_micro_batch_size", R + "log_prob_micro_batch_size_per_gpu",
                         workers, needed=needs_old)
    ref_micro = _per_gpu(cfg, "actor_rollout_ref.ref.log_prob_micro_batch_size",
                         "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", workers,
                         needed=cfg[A + "use_kl_loss"])
    return BatchPlan(workers=workers, prompts_per_step=prompts, samples_per_step=prompts * n,
                     mini_batch_samples=mini * n, updates_per_step=math.ceil(prompts / mini),
                     local_mini=local_mini, micro=micro, accumulation=local_mini // micro,
                     log_prob_micro=log_micro, ref_micro=ref_micro)
