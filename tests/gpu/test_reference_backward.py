"""The reference backward against autograd through the naive fp64 oracle, on the CPU."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.reference import dense_masked_attention_backward
from tests.gpu.oracle import naive_attention


@st.composite
def problems(draw):
    block = draw(st.sampled_from([1, 2, 4]))
    kv_heads = draw(st.sampled_from([1, 2]))
    heads = kv_heads * draw(st.sampled_from([1, 2]))
    seq_q, seq_k = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    n_q, n_k = -(-seq_q // block), -(-seq_k // block)
    layout_heads = draw(st.sampled_from([1, heads]))
    seed = draw(st.integers(0, 2**31 - 1))
    generator = torch.Generator().manual_seed(seed)
    blocks = torch.rand(layout_heads, n_q, n_k, generator=generator) < draw(
        st.sampled_from([0.3, 0.7, 1.0])
    )
    shapes = [(2, heads, seq_q, 4), (2, kv_heads, seq_k, 4), (2, kv_heads, seq_k, 4)]
    q, k, v = (torch.randn(s, generator=generator, dtype=torch.float64) for s in shapes)
    causal = draw(st.booleans())
    alignment = draw(st.sampled_from(["top_left", "bottom_right"]))
    return q, k, v, blocks, block, causal, alignment, draw(st.booleans())


@settings(max_examples=60, deadline=None)
@given(problems())
def test_matches_autograd_through_the_oracle(problem):
    q, k, v, blocks, block, causal, alignment, with_lse = problem
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, lse = naive_attention(
        *leaves, blocks, block, causal=causal, bottom_right=alignment == "bottom_right",
        scale=0.7, lse=True,
    )  # fmt: skip
    grad_out = torch.randn_like(out)
    grad_lse = torch.where(torch.isinf(lse), 0.0, torch.randn_like(lse)) if with_lse else None
    loss = (out * grad_out).sum()
    if with_lse:
        loss = loss + (torch.where(torch.isinf(lse), 0.0, lse) * grad_lse).sum()
    expected = torch.autograd.grad(loss, leaves)
    got = dense_masked_attention_backward(
        q, k, v, grad_out, blocks, block, causal=causal, causal_alignment=alignment, scale=0.7,
        grad_lse=grad_lse, chunk_bytes=64,
    )  # fmt: skip
    for name, a, b in zip("qkv", got, expected, strict=True):
        assert torch.allclose(a, b, atol=1e-12, rtol=1e-10), name
