"""Attention for packed rows: causal SDPA inside each sample of the row, never across samples.

A packed alignment row holds several samples back to back. Passing a (L, L) block-diagonal mask to
SDPA is correct but computes every cross-sample score only to mask it, and a float mask keeps PyTorch
off its fused causal kernels. This attention implementation (registered with transformers'
``AttentionInterface`` under ``SEGMENT_SDPA``) takes ``segment_lengths`` (a list of ints, passed
through the model's forward kwargs) and runs causal SDPA per sample instead: sum of L_i^2 work
instead of L^2. Without ``segment_lengths`` it is exactly transformers' SDPA, so generation, eval,
GRPO rollouts and batched decoding with padding masks behave as with ``sdpa``. On GPU with
flash-attn the same effect comes from varlen kernels; this is the CPU/SDPA path.
"""

from __future__ import annotations

import torch
from torch import nn

SEGMENT_SDPA = "pagemill_segment_sdpa"


def segment_sdpa_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                         segment_lengths: list[int] | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """(B, H, L, D) query/key/value -> (B, L, H, D) output, as transformers' attention functions."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if segment_lengths is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    length = query.shape[2]
    if query.shape[0] != 1 or key.shape[2] != length or sum(segment_lengths) != length:
        raise ValueError(f"segment attention needs one packed row without a cache whose segments sum to its "
                         f"length; got query {tuple(query.shape)}, key {tuple(key.shape)}, segments {segment_lengths}")
    outputs, start = [], 0
    for n in segment_lengths:
        span = slice(start, start + n)
        out, _ = sdpa_attention_forward(module, query[:, :, span], key[:, :, span], value[:, :, span], None,
                                        dropout=dropout, scaling=scaling, is_causal=True, **kwargs)
        outputs.append(out)
        start += n
    return torch.cat(outputs, dim=1), None


def register() -> None:
    """Make ``SEGMENT_SDPA`` known to transformers (idempotent); its masks are SDPA's."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(SEGMENT_SDPA, segment_sdpa_forward)
    AttentionMaskInterface.register(SEGMENT_SDPA, sdpa_mask)


def use_segment_attention(model: nn.Module) -> bool:
    """Switch the decoder of ``model`` from SDPA to ``SEGMENT_SDPA``; True when it now uses it.

    Only an SDPA decoder is switched (eager or flash-attn decoders are left as configured); the vision
    tower keeps its own implementation.
    """
    if uses_segment_attention(model):
        return True
    text_config = getattr(model.config, "text_config", None)
    if text_config is None or text_config._attn_implementation != "sdpa":
        return False
    register()
    model.set_attn_implementation({"text_config": SEGMENT_SDPA})
    return uses_segment_attention(model)


def uses_segment_attention(model: nn.Module) -> bool:
    text_config = getattr(model.config, "text_config", None)
    return text_config is not None and text_config._attn_implementation == SEGMENT_SDPA
