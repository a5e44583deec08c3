"""The reference GRPO trainer against TRL's GRPOTrainer on the CPU, side by side in one run.

Same tiny Qwen2 model and tokenizer (trainer.tiny), same rows of the digits task, same scorer
(trainer.reward.digits_score), group size 4, 8 prompts (32 completions) per optimizer step, one
optimizer step per rollout, 16 completion tokens, temperature 1, AdamW lr 1e-3 constant, weight
decay 0, grad clip 1, token-mean loss, clip 0.2, no KL, fp32, no activation checkpointing
(research/trl_cpu.md, "Recommended fair benchmark spec").

Each run is its own process with the same thread count; runs alternate (ours, TRL, ours, TRL ...).
With `--workers 2` ours runs two data-parallel workers (Ray, gloo all-reduce) with threads/2 each.
Printed: our steps/s and completion tokens/s over TRL's (ratio of medians across repeats; step 1
dropped), and the mean reward over steps 1-5 / 16-20 / last 5 for both.

    .venv/bin/python bench/trainer_vs_trl.py [--steps 50] [--repeats 3] [--threads 2] [--length 16]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def ours_overrides(tiny: Path, run_dir: Path, steps: int, length: int, seed: int, workers: int = 1) -> list[str]:
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={tiny / 'data/train.parquet'}",
        "data.train_batch_size=8", "data.max_prompt_length=64", f"data.max_response_length={length}",
        f"data.seed={seed}",
        f"actor_rollout_ref.model.path={tiny / 'model'}",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.optim.weight_decay=0.0",
        "actor_rollout_ref.actor.grad_clip=1.0", "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={32 // workers}",  # the whole mini batch per worker
        "actor_rollout_ref.actor.use_kl_loss=False", "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.rollout.temperature=1.0",
        "trainer.nnodes=1", f"trainer.n_gpus_per_node={workers}", "trainer.device=cpu",
        f"trainer.total_training_steps={steps}", "trainer.save_freq=-1", "trainer.plot=False",
        "trainer.logger=['console']", "trainer.resume_mode=disable", f"trainer.default_local_dir={run_dir}",
    ]


def run_ours(tiny: Path, steps: int, length: int, seed: int, threads: int, workers: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-ours-") as tmp:
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, threads // workers))}
        env.pop("RAY_ADDRESS", None)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "trainer.main_grpo",
                               *ours_overrides(tiny, Path(tmp), steps, length, seed, workers)],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode:
            raise SystemExit(f"reference trainer failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        rows = [json.loads(line) for line in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    return {"step_s": [r["timing_s/step"] for r in rows], "reward": [r["critic/score/mean"] for r in rows],
            "completion_tokens": [r["response_length/mean"] * 32 for r in rows], "wall_s": wall}


def trl_side(tiny: Path, steps: int, length: int, seed: int, threads: int, out: Path) -> None:
    """Runs inside its own process (see main)."""
    import torch

    torch.set_num_threads(threads)
    import pyarrow.parquet as pq
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trainer.reward import digits_score
    from trainer.tiny import DATA_SOURCE

    rows = pq.read_table(tiny / "data/train.parquet").to_pylist()
    data = Dataset.from_list([{"prompt": r["prompt"], "ground_truth": r["reward_model"]["ground_truth"]} for r in rows])

    def digits(prompts, completions, ground_truth, **kwargs):
        return [digits_score(DATA_SOURCE, c[0]["content"], gt) for c, gt in zip(completions, ground_truth)]

    class Clock(TrainerCallback):
        def __init__(self):
            self.times, self.start = [], None

        def on_step_begin(self, args, state, control, **kw):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.start)

    with tempfile.TemporaryDirectory(prefix="bench-trl-") as tmp:
        import dataclasses

        fields = {f.name for f in dataclasses.fields(GRPOConfig)}  # the name changed in transformers 5.2x
        no_ckpt = {name: False for name in ("activation_checkpointing", "gradient_checkpointing") if name in fields}
        cfg = GRPOConfig(output_dir=tmp, use_cpu=True, bf16=False, fp16=False, **no_ckpt,
                         per_device_train_batch_size=32, gradient_accumulation_steps=1, num_generations=4,
                         max_completion_length=length, max_steps=steps, learning_rate=1e-3,
                         lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
                         beta=0.0, num_iterations=1, epsilon=0.2, loss_type="dapo", scale_rewards="group",
                         temperature=1.0, top_p=1.0, top_k=0, logging_steps=1, save_strategy="no",
                         report_to="none", seed=seed, data_seed=seed, dataloader_num_workers=0,
                         disable_tqdm=True, use_vllm=False)
        clock = Clock()
        trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny / "model"), reward_funcs=[digits],
                              args=cfg, train_dataset=data,
                              processing_class=AutoTokenizer.from_pretrained(tiny / "model"), callbacks=[clock])
        trainer.train()
        logs = [h for h in trainer.state.log_history if "reward" in h]
    out.write_text(json.dumps({"step_s": clock.times, "reward": [h["reward"] for h in logs],
                               "completion_tokens": [h["completions/mean_length"] * 32 for h in logs]}))


def run_trl(tiny: Path, steps: int, length: int, seed: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-trl-out-") as tmp:
        out = Path(tmp) / "trl.json"
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--trl-side", str(out), "--steps", str(steps),
                               "--length", str(length), "--seed", str(seed), "--threads", str(threads)],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode:
            raise SystemExit(f"TRL failed:\n{proc.stderr[-3000:]}")
        result = json.loads(out.read_text())
    return {**result, "wall_s": wall}


def summarize(run: dict) -> dict:
    steps = run["step_s"][1:]  # step 1 is warm-up
    tokens = run["completion_tokens"][1:]
    total = sum(steps)
    return {"steps_per_s": len(steps) / total, "completion_tok_per_s": sum(tokens) / total,
            "median_step_s": statistics.median(steps), "train_s": sum(run["step_s"]),
            "startup_s": run["wall_s"] - sum(run["step_s"])}


def reward_windows(reward: list[float]) -> str:
    def mean(xs):
        return sum(xs) / len(xs) if xs else float("nan")

    return f"{mean(reward[0:5]):.3f} / {mean(reward[15:20]):.3f} / {mean(reward[-5:]):.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--length", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1, help="our data-parallel workers (TRL: one process)")
    ap.add_argument("--trl-side", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    from trainer.tiny import ensure_tiny

    tiny = ensure_tiny()
    if args.trl_side:
        trl_side(tiny, args.steps, args.length, args.seed, args.threads, args.trl_side)
        return
    ours, trl = [], []
    for i in range(args.repeats):  # interleaved, so a noisy neighbour hits both sides alike
        ours.append(run_ours(tiny, args.steps, args.length, args.seed, args.threads, args.workers))
        trl.append(run_trl(tiny, args.steps, args.length, args.seed, args.threads))
        a, b = summarize(ours[-1]), summarize(trl[-1])
        print(f"repeat {i + 1}: ours {a['steps_per_s']:.2f} steps/s, {a['completion_tok_per_s']:.0f} tok/s | "
              f"TRL {b['steps_per_s']:.2f} steps/s, {b['completion_tok_per_s']:.0f} tok/s", flush=True)
    med = {name: {k: statistics.median(summarize(r)[k] for r in runs) for k in summarize(runs[0])}
           for name, runs in (("ours", ours), ("trl", trl))}
    print(f"\nGRPO on CPU, tiny Qwen2, 8 prompts x 4, L={args.length}, {args.steps} steps, {args.threads} threads, "
          f"ours {args.workers} worker(s), {args.repeats} interleaved repeats (medians; step 1 dropped)")
    print(f"  steps/s  ours/TRL = {med['ours']['steps_per_s'] / med['trl']['steps_per_s']:.2f}x")
    print(f"  tokens/s ours/TRL = {med['ours']['completion_tok_per_s'] / med['trl']['completion_tok_per_s']:.2f}x")
    print(f"  start-up (process start to first step) ours/TRL = {med['ours']['startup_s'] / med['trl']['startup_s']:.2f}x"
          " (one worker runs in the driver's process; two or more start Ray)")
    print(f"  mean reward, steps 1-5 / 16-20 / last 5 (repeat 1): ours {reward_windows(ours[0]['reward'])}"
          f"   TRL {reward_windows(trl[0]['reward'])}")


if __name__ == "__main__":
    main()
