"""Memory estimate vs a measured peak, side by side in one run.

    .venv/bin/python bench/memory_accuracy.py      # ~10 min of CPU on a 2-core box (bf16 autocast on CPU)

What is measured: the training `update` phase of one rank (no FSDP sharding, no rollout engine, which
this CPU box cannot run): a randomly initialised Qwen2 model (fp32 master weights, bf16 autocast as in
verl's mixed precision), one micro batch forward, log-softmax of the logits in fp32, backward, and an
Adam step, in a fresh subprocess per case. The peak is the rise of the process's peak RSS
(ru_maxrss) over its RSS just before the model is built. The estimate is `checks.plan.memory_estimate`
for the same config on one device, `update` phase, without the FSDP gather buffer (there is no FSDP
here). Printed: estimate / measured per case (goal: within 15%, i.e. 0.85-1.15).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODEL = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 16000, "hidden_size": 512,
         "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 1408,
         "tie_word_embeddings": False, "max_position_embeddings": 4096}
CASES = [  # (micro batch, prompt, response, gradient checkpointing)
    (2, 128, 384, True),
    (2, 128, 384, False),
    (4, 256, 768, True),
]

MEASURE = r"""
import json, resource, sys, torch
from transformers import Qwen2Config, Qwen2ForCausalLM
cfg, micro, seq, ckpt = json.loads(sys.argv[1])
torch.manual_seed(0)
torch.set_num_threads(2)
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
base = rss()
model = Qwen2ForCausalLM(Qwen2Config(**{k: v for k, v in cfg.items() if k != "architectures"},
                                     attn_implementation="sdpa"))
if ckpt:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
ids = torch.randint(0, cfg["vocab_size"], (micro, seq))
with torch.autocast("cpu", dtype=torch.bfloat16):
    logits = model(input_ids=ids).logits
logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
(-logp.mean()).backward()
opt.step()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"peak": peak - base}))
"""


def estimate(micro: int, prompt: int, response: int, ckpt: bool) -> int:
    from checks.plan import memory_estimate
    from checks.verl_config import compose_snapshot

    cfg = compose_snapshot([
        f"data.max_prompt_length={prompt}", f"data.max_response_length={response}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.model.enable_gradient_checkpointing={ckpt}",
        "trainer.n_gpus_per_node=1", "trainer.nnodes=1"]).flat
    parts = memory_estimate(cfg, MODEL, None).phases["update"]
    return sum(v for k, v in parts.items() if k != "gather buffer")


def main() -> int:
    ratios = []
    print(f"{'micro':>5} {'seq':>5} {'ckpt':>5} {'estimate GiB':>13} {'measured GiB':>13} {'ratio':>6}")
    for micro, prompt, response, ckpt in CASES:
        arg = json.dumps([MODEL, micro, prompt + response, ckpt])
        proc = subprocess.run([sys.executable, "-c", MEASURE, arg], capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            print(f"measurement failed: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            return 2
        measured = json.loads(proc.stdout.strip().splitlines()[-1])["peak"]
        est = estimate(micro, prompt, response, ckpt)
        ratios.append(est / measured)
        print(f"{micro:>5} {prompt + response:>5} {str(ckpt):>5} {est / 2**30:>13.2f} {measured / 2**30:>13.2f} "
              f"{est / measured:>6.2f}")
    inside = sum(0.85 <= r <= 1.15 for r in ratios)
    print(f"estimate / measured: {', '.join(f'{r:.2f}' for r in ratios)}; {inside}/{len(ratios)} within 15%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
