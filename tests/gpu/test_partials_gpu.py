"""Partial blocks on the GPU: the fused forward (every build this GPU has) and the backward
(every build a plan can choose, ``conftest.backward_build``: ``fused`` on both instruction
paths, and on Hopper ``sm90_bulk``, ``sm90_atomic`` and ``sm90_separate``) against the fp64
masked softmax of the same token mask.

Token masks are random per block (empty, full, or partial with random bits), with query rows
and key columns that the bits mask entirely, at blocks 16 to 128, both head dims and dtypes,
causal in both alignments, lengths that are not whole blocks, GQA and one layout head serving
every head; and the token families users bring (a sliding window of odd width, packed and
causal documents, prefix-LM, rows that attend to nothing) through ``designer.from_mask_mod``.
Fresh random inputs; outputs poisoned with NaN first. A failure names the case, the relative
error and the first worst (batch, head, row, column).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

import gpu
from designer import from_mask_mod
from designer.patterns.token_documents import token_documents
from designer.patterns.token_prefix_lm import token_prefix_lm
from designer.patterns.token_window import token_sliding_window
from gpu import block_sparse_attention
from gpu.backward import sm90
from gpu.backward.builds import choose_backward_config
from gpu.backward.fused import plan_backward
from gpu.forward.builds import choose_config, hopper_token_paths
from gpu.forward.launch import plan_forward, run_fused
from gpu.partials import split_token_mask
from gpu.runtime import is_hopper
from tests.gpu.oracle import masked_softmax_attention, relative_error
from tests.gpu.repeats import repeated_gradients

pytestmark = pytest.mark.gpu

FORWARD_TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 5e-3}
BACKWARD_TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 5e-3}


def token_case(block, seq_q, seq_k, *, heads, causal, alignment="top_left", seed=0):
    """``(plan, allowed)``: a random token mask split into blocks and partials, planned on the
    GPU, and the ``[heads, Sq, Sk]`` token rule the kernels must apply."""
    rng = np.random.default_rng(seed)
    n_q, n_k = -(-seq_q // block), -(-seq_k // block)
    kind = rng.choice(3, size=(heads, n_q, n_k), p=[0.3, 0.3, 0.4])  # empty, full, partial
    tokens = rng.random((heads, n_q * block, n_k * block)) < rng.choice([0.2, 0.6, 0.95])
    per_block = np.repeat(np.repeat(kind, block, 1), block, 2)
    mask = np.where(per_block == 1, True, (per_block == 2) & tokens)[:, :seq_q, :seq_k]
    mask[:, rng.choice(seq_q, 3)] = False  # rows the bits mask entirely
    mask[:, :, rng.choice(seq_k, 2)] = False  # keys nobody attends to
    mask = torch.from_numpy(np.ascontiguousarray(mask))
    allowed = mask
    if causal:
        offset = seq_k - seq_q if alignment == "bottom_right" else 0
        allowed = mask & torch.ones(seq_q, seq_k, dtype=torch.bool).tril(offset)
    blocks, partials = split_token_mask(mask, block)
    the_plan = gpu.plan(blocks, block, causal=causal, causal_alignment=alignment, seq_q=seq_q,
                        seq_k=seq_k, partials=partials, device="cuda")  # fmt: skip
    assert the_plan.n_partials > 0
    return the_plan, allowed


def inputs(batch, q_heads, kv_heads, seq_q, seq_k, dim, dtype, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(batch, q_heads, seq_q, dim, generator=gen, device="cuda").to(dtype)
    k, v = (torch.randn(batch, kv_heads, seq_k, dim, generator=gen, device="cuda").to(dtype)
            for _ in range(2))  # fmt: skip
    return q, k, v


def where_worst(got: torch.Tensor, expected: torch.Tensor) -> str:
    """The first index of the largest absolute error, and the error there."""
    diff = (got.double().cpu() - expected.double().cpu()).abs().nan_to_num(math.inf)
    at = np.unravel_index(int(diff.argmax()), tuple(diff.shape))
    return f"max abs error {float(diff.max()):.3e} at {tuple(int(i) for i in at)}"


def check_forward(out, lse, q, k, v, allowed, scale, label):
    """``out`` and ``lse`` against fp64: relative error, every element written, and rows with
    no allowed key exactly zero with logsumexp -inf."""
    expected, expected_lse = masked_softmax_attention(
        q.double().cpu(), k.double().cpu(), v.double().cpu(), allowed, scale
    )
    assert not out.isnan().any(), f"{label}: unwritten or NaN outputs, {where_worst(out, expected)}"
    error = relative_error(out, expected)
    print(f"{label}: relative error {error:.2e}, {where_worst(out, expected)}")
    worst = where_worst(out, expected)
    assert error <= FORWARD_TOLERANCE[q.dtype], f"{label}: {error:.2e}, {worst}"
    empty = torch.isinf(expected_lse)
    assert (out.cpu()[empty] == 0).all(), f"{label}: fully masked rows must give zeros"
    lse = lse.cpu().double()
    assert torch.equal(torch.isinf(lse), empty), f"{label}: logsumexp -inf exactly on empty rows"
    lse_error = (lse - expected_lse)[~empty].abs().max()
    assert lse_error <= 2e-2, f"{label}: logsumexp off by {float(lse_error):.2e}"


def forward_configs(head_dim, dtype):
    """Every forward build this GPU may run: the mma.sync build, and on Hopper each build a
    plan may take, with either token-word path where it fits."""
    configs = [choose_config(head_dim=head_dim, dtype=dtype, wgmma=False)]
    if is_hopper(torch.device("cuda")):
        configs += hopper_token_paths("bf16" if dtype == torch.bfloat16 else "fp16", head_dim)
    return configs


# Sq != Sk and neither a whole number of blocks (nor of 128-token tiles)
LENGTHS = {16: (200, 333), 32: (300, 170), 64: (450, 390), 128: (500, 700)}


@pytest.mark.parametrize("causal", [None, "top_left", "bottom_right"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("block", sorted(LENGTHS))
def test_forward_builds_mask_partial_tiles(block, head_dim, dtype, causal):
    seq_q, seq_k = LENGTHS[block]
    the_plan, allowed = token_case(block, seq_q, seq_k, heads=2, causal=causal is not None,
                                   alignment=causal or "top_left", seed=block)  # fmt: skip
    q, k, v = inputs(2, 2, 2, seq_q, seq_k, head_dim, dtype, seed=block)
    scale = head_dim**-0.5
    for config in forward_configs(head_dim, dtype):
        fused = plan_forward(the_plan, config)
        out = torch.full_like(q, float("nan"))
        lse = torch.full(q.shape[:3], float("nan"), device="cuda")
        run_fused(fused, q, k, v, scale=scale, out=out, lse=lse)
        torch.cuda.synchronize()
        label = f"block {block} D {head_dim} {dtype} causal {causal} {config}"
        check_forward(out, lse, q, k, v, allowed, scale, label)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_hopper_token_paths_over_many_units_per_cta(head_dim):
    """Five persistent CTAs, each running eight units of full, token and masked tiles: the
    rings (and the token slots of their stages) wrap many times; both token-word paths give
    what one unit per CTA gives, bit for bit, and the fp64 result."""
    if not is_hopper(torch.device("cuda")):
        pytest.skip("the Hopper kernel needs compute capability 9.0")
    the_plan, allowed = token_case(64, 640, 704, heads=2, causal=True, seed=head_dim)
    q, k, v = inputs(2, 2, 2, 640, 704, head_dim, torch.bfloat16, seed=head_dim)
    scale = head_dim**-0.5
    for config in hopper_token_paths("bf16", head_dim):
        fused = plan_forward(the_plan, config)
        outs = []
        for max_ctas in (None, 5):
            few = fused if max_ctas is None else dataclasses.replace(fused, max_ctas=max_ctas)
            out = torch.full_like(q, float("nan"))
            lse = torch.full(q.shape[:3], float("nan"), device="cuda")
            outs.append(run_fused(few, q, k, v, scale=scale, out=out, lse=lse))
        torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=0)
        check_forward(outs[1], lse, q, k, v, allowed, scale, f"five CTAs {config}")


@pytest.mark.parametrize(("q_heads", "kv_heads", "layout_heads"), [(8, 2, 8), (8, 2, 1), (4, 1, 1)])
def test_forward_gqa_and_one_layout_head(q_heads, kv_heads, layout_heads):
    the_plan, allowed = token_case(64, 384, 448, heads=layout_heads, causal=True, seed=q_heads)
    q, k, v = inputs(1, q_heads, kv_heads, 384, 448, 64, torch.bfloat16, seed=3)
    out, lse = block_sparse_attention(q, k, v, the_plan, return_lse=True,
                                      out=torch.full_like(q, float("nan")))  # fmt: skip
    check_forward(out, lse, q, k, v, allowed, 0.125, f"GQA {q_heads}/{kv_heads}/{layout_heads}")


def check_backward(grads, q, k, v, grad_out, allowed, scale, label):
    """Gradients against fp64 autograd through the masked softmax of the token mask."""
    leaves = [x.detach().double().cpu().requires_grad_() for x in (q, k, v)]
    expected, _ = masked_softmax_attention(*leaves, allowed, scale)
    wanted = torch.autograd.grad((expected * grad_out.double().cpu()).sum(), leaves)
    for name, got, ref in zip("qkv", grads, wanted, strict=True):
        assert torch.isfinite(got).all(), f"{label}: d{name} has NaN or inf"
        error = relative_error(got, ref)
        print(f"{label} d{name}: relative error {error:.2e}, {where_worst(got, ref)}")
        assert error <= BACKWARD_TOLERANCE[q.dtype], f"{label} d{name}: {error:.2e}, " + (
            where_worst(got, ref)
        )


def backward_plans(the_plan, build, dtype, head_dim):
    """``(label, backward plan)`` of ``build`` for a plan with partial blocks: ``fused`` on each
    instruction path this GPU has, an sm90 build as the plan compiles it (its token-tile path)."""
    if build != "fused":
        backward = the_plan.backward(dtype, head_dim)  # the build conftest named
        assert backward.config.tokens and (backward.dq is None or backward.dq.config.tokens)
        return [(build, backward)]
    paths = [False, True] if is_hopper(torch.device("cuda")) else [False]
    return [(f"fused wgmma {wgmma}", plan_backward(the_plan, choose_backward_config(
        head_dim=head_dim, dtype=dtype, wgmma=wgmma))) for wgmma in paths]  # fmt: skip


@pytest.mark.parametrize("causal", [None, "top_left", "bottom_right"])
@pytest.mark.parametrize(("block", "head_dim", "dtype"), [
    (16, 64, torch.bfloat16), (32, 128, torch.bfloat16), (64, 64, torch.float16),
    (128, 128, torch.bfloat16), (64, 128, torch.float16), (128, 64, torch.bfloat16),
])  # fmt: skip
def test_backward_builds_mask_partial_tiles(backward_build, block, head_dim, dtype, causal):
    """Every backward build (both instruction paths of ``fused``) on one forward."""
    seq_q, seq_k = LENGTHS[block]
    the_plan, allowed = token_case(block, seq_q, seq_k, heads=4, causal=causal is not None,
                                   alignment=causal or "top_left", seed=7 * block)  # fmt: skip
    q, k, v = inputs(2, 4, 2, seq_q, seq_k, head_dim, dtype, seed=head_dim)
    scale = head_dim**-0.5
    out, lse = block_sparse_attention(q, k, v, the_plan, return_lse=True)
    gen = torch.Generator(device="cuda").manual_seed(block)
    grad_out = torch.randn(out.shape, generator=gen, device="cuda").to(dtype)
    for name, backward in backward_plans(the_plan, backward_build, dtype, head_dim):
        grads = backward.launch(q, k, v, out, lse, grad_out, None, scale=scale)
        label = f"block {block} D {head_dim} {dtype} causal {causal} {name}"
        check_backward(grads, q, k, v, grad_out, allowed, scale, label)


def test_autograd_with_gqa_and_one_layout_head(backward_build):
    the_plan, allowed = token_case(32, 320, 320, heads=1, causal=True, seed=5)
    q, k, v = (x.requires_grad_() for x in inputs(1, 8, 2, 320, 320, 128, torch.bfloat16, 9))
    out = block_sparse_attention(q, k, v, the_plan)
    grad_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), grad_out)
    check_backward(grads, q, k, v, grad_out, allowed, 128**-0.5,
                   f"autograd GQA one head {backward_build}")  # fmt: skip


def without_rows(mask_mod, first, last):
    """``mask_mod`` with query rows [first, last] attending to nothing."""

    def rows_cut(b, h, q_idx, kv_idx):
        return mask_mod(b, h, q_idx, kv_idx) & ((q_idx < first) | (q_idx > last))

    return rows_cut


# name: (mask_mod, block, seq_q, seq_k, causal plan); lengths are not whole blocks but one
FAMILIES = {
    "window 97": (token_sliding_window(97), 64, 450, 450, False),
    "window 97 causal plan": (token_sliding_window(97), 32, 333, 333, True),
    "bidirectional window 45": (token_sliding_window(45, causal=False), 16, 300, 300, False),
    "documents": (token_documents([100, 37, 203]), 64, 390, 390, False),
    "causal documents": (token_documents([150, 71, 99], causal=True), 128, 320, 320, False),
    "documents, more keys": (token_documents([70, 133]), 32, 260, 390, False),
    "prefix-LM": (token_prefix_lm(150), 64, 384, 384, False),
    "prefix-LM, empty rows": (without_rows(token_prefix_lm(90), 130, 140), 16, 300, 300, False),
}


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("family", FAMILIES)
def test_backward_builds_on_token_families(backward_build, family, head_dim):
    """Each build through autograd on a ``from_mask_mod`` layout (one layout head for GQA 4/2):
    gradients within tolerance of fp64 autograd under the same ``mask_mod``, everywhere."""
    mask_mod, block, seq_q, seq_k, causal = FAMILIES[family]
    layout = from_mask_mod(mask_mod, heads=1, seq_q=seq_q, seq_k=seq_k, block_size=block,
                           causal=causal)  # fmt: skip
    the_plan = gpu.plan(layout, causal=causal, device="cuda")
    assert the_plan.n_partials > 0
    q_idx, kv_idx = torch.arange(seq_q)[:, None], torch.arange(seq_k)[None, :]
    allowed = mask_mod(0, 0, q_idx, kv_idx)[None] & (kv_idx <= q_idx if causal else True)
    q, k, v = (x.requires_grad_() for x in inputs(1, 4, 2, seq_q, seq_k, head_dim,
                                                  torch.bfloat16, seed=len(family)))  # fmt: skip
    out = block_sparse_attention(q, k, v, the_plan)
    grad_out = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), grad_out)
    check_backward(grads, q, k, v, grad_out, allowed, head_dim**-0.5,
                   f"{family} D {head_dim} {backward_build}")  # fmt: skip


@pytest.mark.parametrize("split_groups", [True, False])
def test_deterministic_token_gradients_are_bitwise_equal(split_groups, monkeypatch):
    """deterministic=True on a plan with partial blocks (sm90_separate with its token-tile
    path, both kernels): bitwise-equal gradients run after run, the GQA heads split over CTAs
    or walked in one, and within tolerance of fp64."""
    if not is_hopper(torch.device("cuda")):
        pytest.skip("deterministic=True needs the Hopper backward (compute capability 9.0)")
    if not split_groups:
        monkeypatch.setattr(sm90, "MIN_CTAS_PER_SM", 0)
    mask_mod = token_documents([100, 37, 203], causal=True)
    layout = from_mask_mod(mask_mod, heads=1, seq_q=450, seq_k=450, block_size=64)
    the_plan = gpu.plan(layout, device="cuda", deterministic=True)
    backward = the_plan.backward(torch.bfloat16, 128)
    assert backward.config.dq == "separate" and backward.config.tokens
    q, k, v = (x.requires_grad_() for x in inputs(2, 8, 2, 450, 450, 128, torch.bfloat16, 4))
    grad_out = torch.randn(q.shape, device="cuda", dtype=q.dtype)
    grads = repeated_gradients(lambda *x: block_sparse_attention(*x, the_plan), (q, k, v),
                               grad_out)  # fmt: skip
    q_idx, kv_idx = torch.arange(450)[:, None], torch.arange(450)[None, :]
    check_backward(grads, q, k, v, grad_out, mask_mod(0, 0, q_idx, kv_idx)[None], 128**-0.5,
                   f"deterministic, split groups {split_groups}")  # fmt: skip


def test_all_ones_partials_equal_the_full_layout():
    """Bits all ones stored as partial (the cost probe's case) give what full blocks give."""
    blocks = torch.ones(1, 6, 6, dtype=torch.bool).tril()
    index = blocks.nonzero().to(torch.int32)
    bits = torch.full((len(index), 64, 8), 0xFF, dtype=torch.uint8)
    full = gpu.plan(blocks, 64, causal=True, device="cuda")
    partial = gpu.plan(blocks, 64, causal=True, partials=(index, bits), device="cuda")
    q, k, v = inputs(2, 4, 4, 384, 384, 128, torch.bfloat16, seed=1)
    torch.testing.assert_close(block_sparse_attention(q, k, v, partial),
                               block_sparse_attention(q, k, v, full), rtol=0, atol=0)  # fmt: skip


def test_sdd_refuses_partials():
    the_plan, _ = token_case(64, 256, 256, heads=1, causal=False)
    q, k, v = inputs(1, 1, 1, 256, 256, 64, torch.bfloat16, seed=0)
    with pytest.raises(ValueError, match=r'does not support partial blocks.*use impl="fused"'):
        block_sparse_attention(q, k, v, the_plan, impl="sdd")
