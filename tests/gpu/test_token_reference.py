"""``impl="reference"`` on token-exact layouts, fp64 on the CPU, against masked softmax attention
under Flex's ``create_mask`` of the same ``mask_mod``: max abs error <= 1e-9.

Skipped until ``gpu.plan`` reads a designer ``Layout``'s partial blocks (``plan.partials``)."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention.flex_attention import create_mask

import gpu
from designer import from_mask_mod
from designer.patterns.token_documents import token_documents
from designer.patterns.token_prefix_lm import token_prefix_lm
from designer.patterns.token_window import token_sliding_window

FAMILIES = {
    "window": token_sliding_window(100),
    "documents": token_documents([90, 300, 210], causal=True),
    "prefix": token_prefix_lm(130),
}


def _masked_attention(q, k, v, mask):
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.nan_to_num(weights) @ v


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("block", [16, 64])
@pytest.mark.parametrize("seq", [600, 577])
def test_reference_attention_is_create_masks(family, block, seq):
    mask_mod = FAMILIES[family]
    layout = from_mask_mod(mask_mod, heads=2, seq_q=seq, seq_k=seq, block_size=block)
    plan = gpu.plan(layout, device="cpu")
    if getattr(plan, "partials", None) is None and layout.partials is not None:
        pytest.skip("gpu.plan does not read a Layout's partial blocks yet")
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, 2, seq, 32, dtype=torch.float64)
    out = gpu.block_sparse_attention(q, k, v, plan, impl="reference")
    expected = _masked_attention(q, k, v, create_mask(mask_mod, 1, 2, seq, seq, device="cpu"))
    assert (out - expected).abs().max() <= 1e-9
