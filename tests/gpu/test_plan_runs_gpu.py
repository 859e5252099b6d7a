"""A plan of row runs with partial blocks on the GPU: forward and backward (every backward build
a plan can choose, ``conftest.backward_build``) against the fp64 masked softmax of the token
mask, and bit for bit what the plan of the same dense layout gives.

Token masks are random per block (empty, full, or partial with random bits) at blocks 16 to
128, causal in both alignments, lengths that are not whole blocks; and a designer layout held
as runs, made by ``designer.from_mask_mod`` from a sliding window of odd width.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import designer.layout
import gpu
from designer import from_mask_mod
from gpu import block_sparse_attention
from gpu.partials import split_token_mask
from tests.designer.run_layouts import dense_to_runs
from tests.gpu.test_partials_gpu import LENGTHS, check_backward, check_forward, inputs

pytestmark = pytest.mark.gpu


def random_token_mask(block, seq_q, seq_k, heads, seed):
    """A bool ``[heads, seq_q, seq_k]`` mask: blocks empty, full or partial with random bits."""
    rng = np.random.default_rng(seed)
    n_q, n_k = -(-seq_q // block), -(-seq_k // block)
    kind = rng.choice(3, size=(heads, n_q, n_k), p=[0.3, 0.3, 0.4])
    tokens = rng.random((heads, n_q * block, n_k * block)) < 0.6
    per_block = np.repeat(np.repeat(kind, block, 1), block, 2)
    mask = np.where(per_block == 1, True, (per_block == 2) & tokens)[:, :seq_q, :seq_k]
    return torch.from_numpy(np.ascontiguousarray(mask))


def plans_of(mask, block, causal, alignment):
    """``(runs plan, dense plan, allowed)`` of one token mask, on the GPU."""
    seq_q, seq_k = mask.shape[1:]
    blocks, partials = split_token_mask(mask, block)
    options = {"causal": causal, "causal_alignment": alignment, "seq_q": seq_q, "seq_k": seq_k,
               "partials": partials, "device": "cuda"}  # fmt: skip
    layout = SimpleNamespace(runs=dense_to_runs(blocks.numpy()), block_size=block)
    from_runs, dense = gpu.plan(layout, **options), gpu.plan(blocks, block, **options)
    assert from_runs.runs is not None and from_runs.n_partials == dense.n_partials > 0
    allowed = mask
    if causal:
        offset = seq_k - seq_q if alignment == "bottom_right" else 0
        allowed = mask & torch.ones(seq_q, seq_k, dtype=torch.bool).tril(offset)
    return from_runs, dense, allowed


def forward_and_grads(plan, q, k, v, grad_out):
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    out, lse = block_sparse_attention(*leaves, plan, return_lse=True)
    grads = torch.autograd.grad(out, leaves, grad_out)
    return out.detach(), lse, grads


@pytest.mark.parametrize("causal", [None, "top_left", "bottom_right"])
@pytest.mark.parametrize("block", sorted(LENGTHS))
def test_runs_plan_with_partials_against_fp64(backward_build, block, causal):
    seq_q, seq_k = LENGTHS[block]
    mask = random_token_mask(block, seq_q, seq_k, heads=2, seed=block)
    from_runs, dense, allowed = plans_of(mask, block, causal is not None, causal or "top_left")
    dtype, head_dim = torch.bfloat16, 64
    q, k, v = inputs(2, 2, 2, seq_q, seq_k, head_dim, dtype, seed=block)
    gen = torch.Generator(device="cuda").manual_seed(block)
    grad_out = torch.randn(q.shape, generator=gen, device="cuda").to(dtype)
    out, lse, grads = forward_and_grads(from_runs, q, k, v, grad_out)
    label = f"runs block {block} causal {causal} {backward_build}"
    check_forward(out, lse, q, k, v, allowed, head_dim**-0.5, label)
    check_backward(grads, q, k, v, grad_out, allowed, head_dim**-0.5, label)
    want_out, _, want_grads = forward_and_grads(dense, q, k, v, grad_out)
    torch.testing.assert_close(out, want_out, rtol=0, atol=0)  # the same tables, the same work
    if backward_build != "sm90_separate":
        return  # the others add dQ with atomics, in an order that differs between runs
    for got, want in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_from_mask_mod_layout_held_as_runs(monkeypatch):
    """A designer layout of runs and partial blocks (a 333-token causal window) planned as is."""
    monkeypatch.setattr(designer.layout, "DENSE_CELLS", 0)
    seq, block = 1000, 64

    def window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < 333)

    layout = from_mask_mod(window, heads=2, seq_q=seq, seq_k=seq, block_size=block, causal=True)
    assert layout.runs is not None and layout.n_partial > 0
    the_plan = gpu.plan(layout, causal=True, device="cuda")
    allowed = layout.token_mask() & torch.ones(seq, seq, dtype=torch.bool).tril()
    q, k, v = inputs(1, 2, 2, seq, seq, 128, torch.bfloat16, seed=11)
    grad_out = torch.randn_like(q)
    out, lse, grads = forward_and_grads(the_plan, q, k, v, grad_out)
    check_forward(out, lse, q, k, v, allowed, 128**-0.5, "from_mask_mod runs")
    check_backward(grads, q, k, v, grad_out, allowed, 128**-0.5, "from_mask_mod runs")
