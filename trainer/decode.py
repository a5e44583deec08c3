"""The rollout's forward passes for Qwen2/Llama-family decoders: the model's own modules, a static KV cache.

transformers' forward rebuilds the attention mask, the rotary table and the cache bookkeeping on every
call; for one new token of a small model that bookkeeping costs about as much as the maths. This class
calls the same modules in the same order (embedding, RMSNorms, projections, MLP, final norm, lm_head)
and only does the wiring between them differently, the way an inference engine does:

* every layer's keys and values go into buffers sized for the whole rollout (no cache objects);
* the rotary table is computed once per rollout by the model's own rotary module, then indexed;
* q, k and v come from one matmul (the three weights concatenated once per rollout);
* one new token attends with two small matmuls (grouped-query heads share their key/value head).

tests/test_trainer_parts.py checks its logits against the model's own forward at every step and its
greedy output against `generate()`. Models it does not cover (other architectures, sliding windows,
rotary scalings that depend on the sequence length) use the transformers path (`supports`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

ARCHITECTURES = ("qwen2", "llama")  # same decoder layer: pre-norm attention + gated MLP, RoPE, GQA
LENGTH_DEPENDENT_ROPE = ("dynamic", "longrope")  # their table changes with the sequence length


def supports(model) -> bool:
    core = getattr(model, "model", None)
    if model.config.model_type not in ARCHITECTURES or core is None or not hasattr(core, "rotary_emb"):
        return False
    if getattr(core.rotary_emb, "rope_type", "default") in LENGTH_DEPENDENT_ROPE:
        return False
    return all(getattr(layer.self_attn, "sliding_window", None) is None for layer in core.layers)


class StaticDecoder:
    """Prefill a left-padded batch, then one token per call, for at most `max_new_tokens` calls."""

    def __init__(self, model, batch: int, prompt_width: int, max_new_tokens: int):
        core, cfg = model.model, model.config
        self.model, self.core = model, core
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        param = next(model.parameters())
        width = prompt_width + max_new_tokens
        shape = (batch, self.kv_heads, width, self.head_dim)
        self.keys = [torch.zeros(shape, dtype=param.dtype, device=param.device) for _ in core.layers]
        self.values = [torch.zeros(shape, dtype=param.dtype, device=param.device) for _ in core.layers]
        cos, sin = core.rotary_emb(self.keys[0], torch.arange(width, device=param.device)[None])
        self.cos, self.sin = cos[0], sin[0]  # (width, head_dim), indexed by position
        self.qkv = [self._fused_qkv(layer.self_attn) for layer in core.layers]
        self.key_bias: torch.Tensor | None = None  # (batch, 1, 1, width): 0 for a real key, -inf for padding
        self.filled = 0

    @staticmethod
    def _fused_qkv(attn) -> tuple[torch.Tensor, torch.Tensor | None]:
        projections = (attn.q_proj, attn.k_proj, attn.v_proj)
        weight = torch.cat([p.weight for p in projections])
        biases = [p.bias for p in projections]
        if all(b is None for b in biases):
            return weight, None
        return weight, torch.cat([b if b is not None else weight.new_zeros(p.out_features)
                                  for b, p in zip(biases, projections)])

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = self.head_dim // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, attend) -> torch.Tensor:
        """Logits of the last position; `attend(layer, q, k, v)` -> attention output (bs, heads, n, dim)."""
        bs, n = ids.shape
        start = self.filled
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]  # (bs, 1, n, dim)
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        hidden = self.core.embed_tokens(ids)
        for i, layer in enumerate(self.core.layers):
            weight, bias = self.qkv[i]
            q, k, v = F.linear(layer.input_layernorm(hidden), weight, bias).split([q_size, kv_size, kv_size], -1)
            q = self._rope(q.view(bs, n, self.heads, self.head_dim).transpose(1, 2), cos, sin)
            k = self._rope(k.view(bs, n, self.kv_heads, self.head_dim).transpose(1, 2), cos, sin)
            self.keys[i][:, :, start:start + n] = k
            self.values[i][:, :, start:start + n] = v.view(bs, n, self.kv_heads, self.head_dim).transpose(1, 2)
            out = attend(layer.self_attn, q, self.keys[i][:, :, :start + n], self.values[i][:, :, :start + n])
            hidden = hidden + layer.self_attn.o_proj(out.transpose(1, 2).reshape(bs, n, q_size))
            hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
        self.filled = start + n
        return self.model.lm_head(self.core.norm(hidden[:, -1])).float()

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Run the prompts (left-padded; `mask` 1 for real tokens); logits of their last position."""
        bs, width = ids.shape
        total = self.keys[0].shape[2]
        real = torch.cat([mask.bool(), mask.new_ones((bs, total - width), dtype=torch.bool)], dim=1)
        self.key_bias = torch.zeros(real.shape, dtype=torch.float32, device=ids.device).masked_fill(
            ~real, float("-inf"))[:, None, None, :]
        causal = torch.ones((width, width), dtype=torch.bool, device=ids.device).tril()
        # A padding position attends to itself too: its row is never all masked (NaN-free), and no
        # real position ever attends to it.
        allowed = (causal & real[:, None, None, :width]) | torch.eye(width, dtype=torch.bool, device=ids.device)

        def attend(attn, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=attn.scaling,
                                                  enable_gqa=self.kv_heads != self.heads)

        return self._forward(ids, positions, attend)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One new token per row (`tokens` (bs,), `positions` (bs, 1)); logits of the next one."""
        bs = tokens.shape[0]
        group = self.heads // self.kv_heads
        bias = self.key_bias[..., :self.filled + 1]

        def attend(attn, q, k, v):
            # (bs, kv_heads, group, dim) x (bs, kv_heads, dim, keys): the query heads of a group share k/v.
            scores = torch.matmul(q.view(bs, self.kv_heads, group, self.head_dim), k.transpose(-1, -2))
            # softmax in fp32 as SDPA's kernels do (a no-op on an fp32 model)
            weights = (scores.float() * attn.scaling + bias).softmax(-1).to(v.dtype)
            return torch.matmul(weights, v).view(bs, self.heads, 1, self.head_dim)

        return self._forward(tokens[:, None], positions, attend)
