"""The seed article's launch, kept as data so the tests that need it run in a bare clone.

Facts from the seed article (DESIGN.md: `seed/000_2612502b60985506.txt`, a two-node verl GRPO run on
Ascend 910B3): its section 3.3 exports and its section 3.5 launch script, override by override as
written there (shell quotes included). tests/test_seed_launch.py compares them with the article
wherever the article is beside the clone.
"""
from __future__ import annotations

from pathlib import Path

# section 3.3
EXPORTS = {"HCCL_SOCKET_IFNAME": "eth6", "GLOO_SOCKET_IFNAME": "eth6", "VLLM_ASCEND_ENABLE_NZ": "0"}

# section 3.5: `python -m verl.trainer.main_ppo` with these, then `$@`
OVERRIDES = [
    'algorithm.adv_estimator=grpo',
    '+data.source=gsm8k',
    'data.train_files=/data2/models/gsm8k/train.parquet',
    'data.val_files=/data2/models/gsm8k/test.parquet',
    'data.train_batch_size=128',
    'data.max_prompt_length=512',
    'data.max_response_length=1024',
    'data.filter_overlong_prompts=True',
    "data.truncation='error'",
    'actor_rollout_ref.model.path=/data2/models/Qwen2-0.5B-Instruct',
    'actor_rollout_ref.actor.optim.lr=1e-6',
    'actor_rollout_ref.actor.use_torch_compile=False',
    'actor_rollout_ref.model.use_remove_padding=True',
    'actor_rollout_ref.actor.ppo_mini_batch_size=32',
    'actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4',
    'actor_rollout_ref.actor.use_kl_loss=True',
    'actor_rollout_ref.actor.kl_loss_coef=0.001',
    'actor_rollout_ref.actor.kl_loss_type=low_var_kl',
    'actor_rollout_ref.actor.entropy_coeff=0',
    'actor_rollout_ref.model.enable_gradient_checkpointing=True',
    'actor_rollout_ref.actor.fsdp_config.param_offload=False',
    'actor_rollout_ref.actor.fsdp_config.optimizer_offload=False',
    'actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4',
    'actor_rollout_ref.rollout.tensor_model_parallel_size=2',
    'actor_rollout_ref.rollout.name=vllm',
    'actor_rollout_ref.rollout.gpu_memory_utilization=0.6',
    'actor_rollout_ref.rollout.n=4',
    'actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4',
    'actor_rollout_ref.ref.fsdp_config.param_offload=True',
    'algorithm.use_kl_in_reward=False',
    'trainer.critic_warmup=0',
    'trainer.logger=\'["console"]\'',
    "trainer.project_name='verl_grpo_example_gsm8k'",
    "trainer.experiment_name='qwen0.5b_function_tmp_1124'",
    'trainer.n_gpus_per_node=8',
    'trainer.nnodes=2',
    'trainer.save_freq=20',
    'trainer.test_freq=5',
    'trainer.total_epochs=30',
    'trainer.device=npu',
]

# section 4.3: the custom reward function the article points its runs at
REWARD_OVERRIDES = ["custom_reward_function.path=./reward.py", "custom_reward_function.name=compute_score"]


def script_text(overrides: list[str] = OVERRIDES, head: list[str] = ()) -> str:
    """The section 3.5 script (`#!/bin/bash`, `set -x`, the command over continued lines, `$@`),
    with `head` lines (exports, a `cd`) before `set -x`."""
    body = " \\\n    ".join(overrides)
    return "\n".join(["#!/bin/bash", *head, "set -x", "", f"python -m verl.trainer.main_ppo \\\n    {body} $@"]) + "\n"


def write_script(path: Path, overrides: list[str] = OVERRIDES, head: list[str] = ()) -> Path:
    path.write_text(script_text(overrides, head))
    return path
