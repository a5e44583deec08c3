"""Transformers' SDPA attention, with grouped-query heads shared inside the kernel.

Transformers copies each key/value head out to every query head (`repeat_kv`) whenever a padding
mask is passed, which is every forward here (prompts are left-padded). `scaled_dot_product_attention`
takes `enable_gqa=True` with a mask and returns the same numbers without those copies; on the CPU
this is most of the attention's time at this trainer's sizes.
"""
from __future__ import annotations

import torch

NAME = "sdpa_gqa"


def sdpa_gqa_forward(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                     is_causal=None, **kwargs):
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    is_causal = query.shape[2] > 1 and attention_mask is None and is_causal  # as transformers' sdpa decides
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=is_causal,
        enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


def use_sdpa_gqa(model) -> bool:
    """Switch a model that runs transformers' SDPA to the GQA-sharing variant; False if it runs another."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(NAME, sdpa_gqa_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)  # the masks SDPA takes
    model.set_attn_implementation(NAME)
    return True
