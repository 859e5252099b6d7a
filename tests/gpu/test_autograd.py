"""The autograd wiring of ``block_sparse_attention``, on the CPU through the reference path.

The reference path runs the same custom op and registered backward as the fused kernels, with
the backward formulas in torch, so ``gradcheck`` here checks what the GPU path relies on: which
gradient goes where, GQA sums, the logsumexp's gradient, and ``torch.compile`` tracing.
"""

from __future__ import annotations

import pytest
import torch

import gpu
from gpu import block_sparse_attention


def _leaves(batch, q_heads, kv_heads, seq_q, seq_k, dim=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    kv = (batch, kv_heads, seq_k, dim)
    shapes = [(batch, q_heads, seq_q, dim), kv, kv]
    return [torch.randn(s, generator=gen, dtype=torch.float64).requires_grad_() for s in shapes]


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_gradcheck_gqa_partial_blocks_and_empty_rows(alignment):
    blocks = torch.tensor([[[1, 0, 1], [0, 0, 0], [1, 1, 0]], [[1, 1, 1], [0, 1, 0], [0, 1, 1]]])
    the_plan = gpu.plan(blocks.bool(), 3, causal=True, causal_alignment=alignment, seq_q=8,
                        seq_k=7, device="cpu")  # fmt: skip
    q, k, v = _leaves(1, 2, 1, 8, 7)
    assert torch.autograd.gradcheck(
        lambda q, k, v: block_sparse_attention(q, k, v, the_plan, scale=0.8, impl="reference"),
        (q, k, v),
    )


def test_gradcheck_through_the_logsumexp():
    the_plan = gpu.plan(torch.ones(1, 2, 2, dtype=torch.bool), 2, causal=True, device="cpu")
    q, k, v = _leaves(2, 2, 2, 4, 4, seed=1)

    def both(q, k, v):
        return block_sparse_attention(q, k, v, the_plan, impl="reference", return_lse=True)

    assert torch.autograd.gradcheck(both, (q, k, v))


def test_float32_gradients_match_float64():
    the_plan = gpu.plan(torch.tensor([[[1, 0], [1, 1]]]).bool(), 4, device="cpu")
    leaves64 = _leaves(1, 4, 2, 8, 8, dim=8, seed=2)
    leaves32 = [x.detach().float().requires_grad_() for x in leaves64]
    for leaves in (leaves64, leaves32):
        block_sparse_attention(*leaves, the_plan, impl="reference").sum().backward()
    for a, b in zip(leaves32, leaves64, strict=True):
        assert a.grad.dtype == torch.float32
        torch.testing.assert_close(a.grad.double(), b.grad, rtol=1e-4, atol=1e-5)


def test_compiled_forward_and_backward_trace_without_graph_breaks():
    the_plan = gpu.plan(torch.tensor([[[1, 0], [1, 1]]]).bool(), 4, causal=True, device="cpu")
    q, k, v = _leaves(1, 2, 2, 8, 8, seed=3)

    def loss(q, k, v):
        out, lse = block_sparse_attention(q, k, v, the_plan, impl="reference", return_lse=True)
        return (out.sin().sum() + lse.sum()) * 0.5

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    expected = torch.autograd.grad(loss(q, k, v), (q, k, v))
    got = torch.autograd.grad(compiled(q, k, v), (q, k, v))
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_layout_form_keeps_its_plan_alive_until_backward():
    q, k, v = _leaves(1, 1, 1, 8, 8, seed=4)
    out = block_sparse_attention(
        q, k, v, torch.ones(1, 2, 2, dtype=torch.bool), 4, impl="reference"
    )
    gpu.api.clear_plan_cache()  # the cached plan's last other reference goes
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_cuda_kernels_never_fall_back_on_a_cpu():
    if gpu.unavailable_reason() is None:
        pytest.skip("this machine has a usable GPU")
    q, k, v = _leaves(1, 1, 1, 8, 8)
    with pytest.raises(gpu.GpuUnavailableError):
        block_sparse_attention(q, k, v, torch.ones(1, 2, 2, dtype=torch.bool), 4, impl="fused")
