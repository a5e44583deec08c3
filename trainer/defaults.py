"""The embedded default task: the tiny Qwen2 model and the digits task, on two local Ray nodes.

`EMBEDDED_DEFAULT` is an override list in verl's key names; `{model}` and `{data}` are filled in
with the folders `trainer.tiny.ensure_tiny()` builds. Seeded, it raises the mean reward clearly
within its first 30 steps on a 2-core CPU.

`layered(overrides)` puts a user's overrides on top of it, as verl puts its command line on top of
its yaml, unless they name a task of their own (data or a model).
"""
from __future__ import annotations

EMBEDDED_DEFAULT = [
    "algorithm.adv_estimator=grpo",
    "data.train_files={data}/train.parquet",
    "data.val_files={data}/test.parquet",
    "data.train_batch_size=8",
    "data.max_prompt_length=64",
    "data.max_response_length=16",
    "data.seed=0",
    "actor_rollout_ref.model.path={model}",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.actor.optim.lr=3e-3",
    "actor_rollout_ref.actor.optim.weight_decay=0.0",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16",
    "trainer.logger=['console']",
    "trainer.project_name=verl_doctor",
    "trainer.experiment_name=embedded_default",
    "trainer.nnodes=2",
    "trainer.n_gpus_per_node=1",
    "trainer.total_training_steps=30",
    "trainer.save_freq=10",
    "trainer.test_freq=-1",
]


def embedded_default(size: str = "tiny") -> list[str]:
    """EMBEDDED_DEFAULT with the model and data folders built (once) and filled in."""
    from trainer.tiny import ensure_tiny

    root = ensure_tiny(size)
    return [o.format(model=root / "model", data=root / "data") for o in EMBEDDED_DEFAULT]


# Keys that make a task of the user's own: with any of them given, the embedded task is not used.
TASK_KEYS = frozenset({"data.train_files", "data.val_files", "actor_rollout_ref.model.path"})


def layered(overrides: list[str], size: str = "tiny") -> list[str]:
    """The embedded default with `overrides` on top: a key the user gives replaces the embedded
    entry (its `~key` removes it), every other embedded entry stays. Overrides that name data or
    a model come back unchanged. Read with Hydra's grammar (a syntax error raises LaunchError)."""
    from launch.script import parse_launch

    given = {ov.key for ov in parse_launch(["python", "-m", "_", *overrides]).overrides}
    if given & TASK_KEYS:
        return list(overrides)
    base = [o for o in embedded_default(size) if o.split("=", 1)[0] not in given]
    return base + list(overrides)
