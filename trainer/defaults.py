"""The embedded default task: the tiny Qwen2 model and the digits task, on two local Ray nodes.

`EMBEDDED_DEFAULT` is an override list in verl's key names; `{model}` and `{data}` are filled in
with the folders `trainer.tiny.ensure_tiny()` builds. Seeded, it raises the mean reward clearly
within its first 30 steps on a 2-core CPU.
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
