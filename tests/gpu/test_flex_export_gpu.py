"""The exported ``BlockMask`` in compiled ``flex_attention`` on CUDA, forward and backward.

Compiled Flex visits only the listed tiles and runs ``mask_mod`` inside partial ones; its
backward needs tiles divisible by its own (torch 2.11 refused 64-token ones). Each case is one
layout and shape, so one compile of the forward and one of the backward; out, dq, dk and dv are
compared with the fp64 reference (relative error, bf16 tolerance).
"""

from __future__ import annotations

import pytest
import torch

from designer.formats import to_block_mask
from designer.layout import Layout
from gpu.reference import dense_masked_attention, dense_masked_attention_backward
from tests.gpu.oracle import relative_error

pytestmark = pytest.mark.gpu

#: bf16 inputs, fp32 accumulation: the tolerance the fused kernel's gradients are held to.
TOLERANCE = 2e-2


@pytest.fixture(scope="module")
def compiled_flex():
    """One compiled ``flex_attention``: a fresh compile cache (other tests compile it too, and
    past the recompile limit it would run eager) and ``fullgraph``, so nothing runs uncompiled."""
    from torch.nn.attention.flex_attention import flex_attention

    torch._dynamo.reset()
    return torch.compile(flex_attention, dynamic=False, fullgraph=True)


@pytest.mark.parametrize(
    ("block", "causal", "n_q", "n_k"),
    [
        (16, True, 60, 60),  # 960 tokens: a short last tile
        (32, False, 20, 28),  # 640 x 896 tokens
        (64, True, 15, 15),  # the block size the compiled backward refused at its own tiles
        (128, False, 8, 6),
    ],
)
def test_compiled_flex_gives_the_layouts_attention_and_gradients(
    compiled_flex, block, causal, n_q, n_k
):
    generator = torch.Generator().manual_seed(block)
    blocks = torch.rand(2, n_q, n_k, generator=generator) < 0.4
    blocks[:, 1] = False  # an empty query block row: zero output and gradients, no NaN
    layout = Layout(blocks, block)
    mask = to_block_mask(layout, causal=causal, device="cuda")
    cuda = torch.Generator(device="cuda").manual_seed(block)

    def randn(seq):
        return torch.randn(1, 2, seq, 64, generator=cuda, device="cuda", dtype=torch.bfloat16)

    q, k, v = randn(layout.seq_len_q), randn(layout.seq_len_k), randn(layout.seq_len_k)
    grad = randn(layout.seq_len_q)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = compiled_flex(*leaves, block_mask=mask)
    out.backward(grad)
    expected = dense_masked_attention(q, k, v, blocks, block, causal=causal)
    gradients = dense_masked_attention_backward(q, k, v, grad, blocks, block, causal=causal)
    errors = {"out": relative_error(out, expected)}
    for name, leaf, want in zip(("dq", "dk", "dv"), leaves, gradients, strict=True):
        assert torch.isfinite(leaf.grad).all(), name
        errors[name] = relative_error(leaf.grad, want)
    assert max(errors.values()) <= TOLERANCE, errors
