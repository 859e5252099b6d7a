"""The fused backward on a GPU: dq, dk, dv against fp64 autograd through dense masked attention.

Every test runs on every backward build a plan can choose (``conftest.backward_build``: the
``fused.cu`` kernel and, on Hopper, the three sm90 builds). Fresh random inputs and output
gradients; relative error ‖g − ref‖ / ‖ref‖ of each gradient at most 2e-2 (bf16) / 5e-3 (fp16).
Covers the standard families at every block size, both head dims and dtypes, causal in both
alignments, GQA (one CTA walking a group's heads, and heads split over CTAs), Sq ≠ Sk, partial
last blocks, empty rows, the logsumexp's own gradient, per-head layouts, strided views and
``torch.compile``.
"""

from __future__ import annotations

import pytest
import torch

import gpu
from gpu import block_sparse_attention
from gpu.backward import sm90
from gpu.bench.cases import FAMILIES, family_blocks
from gpu.reference import dense_masked_attention
from tests.gpu.oracle import relative_error
from tests.gpu.repeats import repeated_gradients

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("backward_build")]

TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 5e-3}


def _leaves(batch, q_heads, kv_heads, seq_q, seq_k, dim, dtype, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shapes = [
        (batch, q_heads, seq_q, dim),
        (batch, kv_heads, seq_k, dim),
        (batch, kv_heads, seq_k, dim),
    ]
    return [
        torch.randn(s, generator=gen, device="cuda", dtype=dtype).requires_grad_() for s in shapes
    ]


def _check_grads(q, k, v, the_plan, *, scale=None, with_lse=False, compiled=None, seed=7):
    """Backward through our kernels and through fp64 autograd; compare every gradient."""
    call = compiled or (lambda q, k, v: block_sparse_attention(
        q, k, v, the_plan, scale=scale, return_lse=True))  # fmt: skip
    out, lse = call(q, k, v)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    grad_out = torch.randn(out.shape, generator=gen, device="cuda", dtype=out.dtype)
    grad_lse = torch.randn(lse.shape, generator=gen, device="cuda") if with_lse else None
    loss = (out.float() * grad_out.float()).sum()
    if with_lse:
        loss = loss + (torch.where(torch.isinf(lse), 0.0, lse) * grad_lse).sum()
    got = torch.autograd.grad(loss, (q, k, v))

    leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref_out, ref_lse = dense_masked_attention(
        *leaves, the_plan.blocks, the_plan.block_size, causal=the_plan.causal,
        causal_alignment=the_plan.causal_alignment, scale=scale, return_lse=True,
    )  # fmt: skip
    ref_loss = (ref_out * grad_out.double()).sum()
    if with_lse:
        ref_loss = ref_loss + (torch.where(torch.isinf(ref_lse), 0.0, ref_lse) * grad_lse).sum()
    expected = torch.autograd.grad(ref_loss, leaves)
    for name, g, ref, x in zip("qkv", got, expected, (q, k, v), strict=True):
        assert g.shape == x.shape and g.dtype == x.dtype
        assert torch.isfinite(g).all(), f"d{name} has NaN or inf"
        error = relative_error(g, ref)
        assert error <= TOLERANCE[q.dtype], f"d{name}: relative error {error:.2e}"
    return got


#: Every family, block size and head dim in bf16; fp16 on two families (one build per dtype).
STANDARD = [(f, b, d, torch.bfloat16) for f in FAMILIES for b in (16, 32, 64, 128)
            for d in (64, 128)]  # fmt: skip
STANDARD += [(f, b, d, torch.float16) for f, b in (("causal", 32), ("bigbird_10pct", 16))
             for d in (64, 128)]  # fmt: skip


@pytest.mark.parametrize(("family", "block", "head_dim", "dtype"), STANDARD)
def test_standard_families(family, block, head_dim, dtype):
    seq = 1024
    blocks = family_blocks(family, seq // block, block)[:4]
    the_plan = gpu.plan(blocks, block, causal=family == "causal", device="cuda")
    _check_grads(*_leaves(1, 4, 4, seq, seq, head_dim, dtype, seed=block), the_plan)


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
@pytest.mark.parametrize(("seq_q", "seq_k"), [(384, 640), (640, 384), (1000, 1000), (333, 777)])
@pytest.mark.parametrize("block", [16, 64, 128])
def test_causal_lengths_and_partial_blocks(alignment, seq_q, seq_k, block):
    gen = torch.Generator().manual_seed(block + seq_q)
    n_q, n_k = -(-seq_q // block), -(-seq_k // block)
    blocks = torch.rand(2, n_q, n_k, generator=gen) < 0.6
    blocks[:, min(1, n_q - 1)] = False  # an empty block row
    the_plan = gpu.plan(blocks, block, causal=True, causal_alignment=alignment, seq_q=seq_q,
                        seq_k=seq_k, device="cuda")  # fmt: skip
    _check_grads(*_leaves(2, 2, 2, seq_q, seq_k, 64, torch.bfloat16), the_plan)


@pytest.mark.parametrize(("q_heads", "kv_heads"), [(16, 4), (16, 1), (8, 8)])
@pytest.mark.parametrize("one_layout_head", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("split_groups", [True, False])
def test_gqa_sums_kv_gradients_over_each_group(
    q_heads, kv_heads, one_layout_head, head_dim, split_groups, monkeypatch
):
    """sm90 builds split a group's heads over CTAs on a small grid (as here), or walk them in
    one CTA (forced by asking for no CTAs per SM)."""
    if not split_groups:
        monkeypatch.setattr(sm90, "MIN_CTAS_PER_SM", 0)
    gen = torch.Generator().manual_seed(q_heads + kv_heads)
    blocks = torch.rand(1 if one_layout_head else q_heads, 8, 8, generator=gen) < 0.5
    the_plan = gpu.plan(blocks, 64, device="cuda")
    _check_grads(*_leaves(1, q_heads, kv_heads, 512, 512, head_dim, torch.bfloat16), the_plan)


def test_logsumexp_gradient_and_scale():
    gen = torch.Generator().manual_seed(3)
    blocks = torch.rand(2, 6, 6, generator=gen) < 0.5
    blocks[:, 2] = False
    the_plan = gpu.plan(blocks, 64, causal=True, device="cuda")
    _check_grads(*_leaves(2, 2, 2, 384, 384, 64, torch.float16), the_plan, scale=0.3,
                 with_lse=True)  # fmt: skip


def test_empty_layout_gives_zero_gradients():
    the_plan = gpu.plan(torch.zeros(1, 4, 4, dtype=torch.bool), 64, device="cuda")
    q, k, v = _leaves(1, 2, 2, 256, 256, 64, torch.bfloat16)
    out = block_sparse_attention(q, k, v, the_plan)
    out.backward(torch.randn_like(out))
    for x in (q, k, v):
        assert (x.grad == 0).all()


def test_strided_bshd_views():
    blocks = torch.ones(1, 4, 4, dtype=torch.bool).tril()
    the_plan = gpu.plan(blocks, 64, causal=True, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(5)
    qkv = torch.randn(2, 256, 3, 4, 64, generator=gen, device="cuda", dtype=torch.bfloat16)
    qkv.requires_grad_()
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    out = block_sparse_attention(q, k, v, the_plan)
    grad_out = torch.randn_like(out).transpose(1, 2).contiguous().transpose(1, 2)  # BSHD grad
    out.backward(grad_out)
    leaves = [x.detach().double().requires_grad_() for x in (q, k, v)]
    ref = dense_masked_attention(*leaves, blocks, 64, causal=True)
    ref.backward(grad_out.double())
    for i, leaf in enumerate(leaves):
        assert relative_error(qkv.grad[:, :, i].transpose(1, 2), leaf.grad) <= 2e-2


def test_sdd_refuses_to_train():
    q, k, v = _leaves(1, 2, 2, 256, 256, 64, torch.bfloat16)
    with pytest.raises(RuntimeError, match='impl="fused"'):
        block_sparse_attention(q, k, v, torch.ones(1, 4, 4, dtype=torch.bool), 64, impl="sdd")


def test_compiled_forward_and_backward():
    gen = torch.Generator().manual_seed(11)
    blocks = torch.rand(4, 8, 8, generator=gen) < 0.5
    the_plan = gpu.plan(blocks, 64, causal=True, device="cuda")

    def step(q, k, v):
        return block_sparse_attention(q, k, v, the_plan, return_lse=True)

    compiled = torch.compile(step, fullgraph=True)
    _check_grads(*_leaves(1, 4, 2, 512, 512, 128, torch.bfloat16), the_plan, compiled=compiled)


def test_gradients_repeat_within_atomic_noise():
    """dq sums key tiles with atomics or bulk reductions (order varies run to run): the spread
    is rounding only; dk and dv never vary."""
    blocks = torch.ones(1, 16, 16, dtype=torch.bool)
    the_plan = gpu.plan(blocks, 64, device="cuda")
    q, k, v = _leaves(1, 4, 4, 1024, 1024, 64, torch.bfloat16)
    grad_out = torch.randn(q.shape, device="cuda", dtype=q.dtype)
    first, second = (torch.autograd.grad(block_sparse_attention(q, k, v, the_plan), (q, k, v),
                                         grad_out) for _ in range(2))  # fmt: skip
    assert torch.equal(first[1], second[1]) and torch.equal(first[2], second[2])  # no atomics
    assert relative_error(first[0], second[0]) <= 1e-2


@pytest.mark.parametrize("split_groups", [True, False])
def test_deterministic_gradients_are_bitwise_equal(backward_build, split_groups, monkeypatch):
    """deterministic=True (the sm90_separate build: dQ with no atomics) gives bitwise-equal
    gradients run after run, with GQA heads split over CTAs or walked in one."""
    if backward_build != "sm90_separate":
        pytest.skip("deterministic=True takes the sm90_separate build only")
    monkeypatch.delenv("BLOCKSPARSE_BACKWARD_BUILD")
    if not split_groups:
        monkeypatch.setattr(sm90, "MIN_CTAS_PER_SM", 0)
    gen = torch.Generator().manual_seed(21)
    blocks = torch.rand(1, 11, 12, generator=gen) < 0.6
    the_plan = gpu.plan(blocks, 64, causal=True, seq_q=700, seq_k=740, device="cuda",
                        deterministic=True)  # fmt: skip
    q, k, v = _leaves(2, 8, 2, 700, 740, 128, torch.bfloat16, seed=3)
    grad_out = torch.randn(q.shape, device="cuda", dtype=q.dtype)
    first = repeated_gradients(lambda *x: block_sparse_attention(*x, the_plan), (q, k, v),
                               grad_out)  # fmt: skip
    _check_grads(q, k, v, the_plan)
    # the call's flag overrides the plan's (here: the other way round)
    loose = gpu.plan(blocks, 64, causal=True, seq_q=700, seq_k=740, device="cuda")
    got = torch.autograd.grad(block_sparse_attention(q, k, v, loose, deterministic=True),
                              (q, k, v), grad_out)  # fmt: skip
    for ours, again in zip(first, got, strict=True):
        assert torch.equal(ours, again)
