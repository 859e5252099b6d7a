"""Partial blocks on the CPU: ``gpu.plan``'s checks of them, a layout's own partials and
lengths, the dense mask split, the reference's exactness against a dense masked softmax over
random token masks (fp64, every element), and ``impl="sdd"``'s refusal."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import gpu.partials
from designer.layout import Layout
from designer.partials import PartialBlocks
from gpu import block_sparse_attention, plan
from gpu.api import _run_sdd
from gpu.partials import split_token_mask
from tests.gpu.oracle import masked_softmax_attention
from tests.gpu.tables import token_mask

# --------------------------------------------------------------------------- checks
BLOCKS = torch.ones(2, 3, 4, dtype=torch.bool)
GOOD_INDEX = torch.tensor([[0, 1, 2], [1, 0, 0]], dtype=torch.int32)
GOOD_BITS = torch.zeros(2, 16, 2, dtype=torch.uint8)


@pytest.mark.parametrize(
    ("partials", "error", "match"),
    [
        ("bits", TypeError, "partials must be \\(index, bits\\) or an object"),
        ((GOOD_INDEX.long(), GOOD_BITS), TypeError, "partials index must be int32, got int64"),
        ((GOOD_INDEX, GOOD_BITS.int()), TypeError, "partials bits must be uint8, got int32"),
        ((GOOD_INDEX, [1]), TypeError, "partials bits must be a torch tensor"),
        ((GOOD_INDEX[:, :2], GOOD_BITS), ValueError, "index must be \\[P, 3\\].*got \\[2, 2\\]"),
        ((GOOD_INDEX, GOOD_BITS[:, :8]), ValueError, "bits must be .*\\[2, 16, 2\\].*got"),
        ((GOOD_INDEX.flip(0), GOOD_BITS), ValueError, "must be sorted .* row 1 \\[0, 1, 2\\]"),
        ((GOOD_INDEX[[0, 0]], GOOD_BITS), ValueError, "sorted by \\(head, q_block, k_block\\)"),
        ((GOOD_INDEX + torch.tensor([0, 0, 2], dtype=torch.int32), GOOD_BITS), ValueError,
         "k_block must be in \\[0, 3\\] .* got 4"),
        ((GOOD_INDEX - 1, GOOD_BITS), ValueError, "head must be in \\[0, 1\\] .* got -1"),
    ],
)  # fmt: skip
def test_bad_partials_are_named(partials, error, match):
    with pytest.raises(error, match=match):
        plan(BLOCKS, 16, partials=partials, device="cpu")


def test_partials_must_name_active_blocks():
    blocks = BLOCKS.clone()
    blocks[1, 0, 0] = False
    with pytest.raises(ValueError, match="row 1 \\[1, 0, 0\\] names an inactive block"):
        plan(blocks, 16, partials=(GOOD_INDEX, GOOD_BITS), device="cpu")


def test_partial_memory_is_capped_before_anything_is_copied(monkeypatch):
    monkeypatch.setattr(gpu.partials, "MAX_PARTIAL_BYTES", 63)
    with pytest.raises(ValueError, match=r"hold 64 bytes of token bits .* at most 63"):
        plan(BLOCKS, 16, partials=(GOOD_INDEX, GOOD_BITS), device="cpu")
    monkeypatch.setattr(gpu.partials, "MAX_TOKEN_TILE_BYTES", 1000)
    the_plan = plan(BLOCKS, 16, partials=(GOOD_INDEX[:1], GOOD_BITS[:1]), device="cpu")
    with pytest.raises(ValueError, match="touch 1 kernel tiles of 128 x 128, 2,048 bytes"):
        the_plan.forward_lut(128, 128)


def test_no_entries_means_every_active_block_is_full():
    empty = (torch.zeros(0, 3, dtype=torch.int32), torch.zeros(0, 16, 2, dtype=torch.uint8))
    the_plan = plan(BLOCKS, 16, partials=empty, device="cpu")
    assert the_plan.n_partials == 0 and the_plan.partials is None


def test_a_layout_brings_its_partials_and_lengths():
    layout = Layout(BLOCKS, 16, PartialBlocks(GOOD_INDEX, torch.full_like(GOOD_BITS, 0x55)), 40, 60)
    own = layout.partials
    the_plan = plan(layout, device="cpu")
    assert (the_plan.seq_q, the_plan.seq_k) == (40, 60)
    assert the_plan.n_partials == len(own.index)
    index, bits = the_plan.partials
    assert torch.equal(index, own.index) and torch.equal(bits, own.bits)
    assert f"partial blocks={len(own.index)}" in repr(the_plan)
    same = plan(layout, seq_q=40, partials=(own.index.numpy(), own.bits.numpy()), device="cpu")
    assert same.n_partials == len(own.index)
    with pytest.raises(ValueError, match="seq_k \\(64\\) must equal the layout's seq_k \\(60\\)"):
        plan(layout, seq_k=64, device="cpu")
    with pytest.raises(ValueError, match="partials must equal the layout's partials"):
        plan(layout, partials=(own.index, own.bits ^ 1), device="cpu")
    plain = Layout(BLOCKS, 16)
    assert plan(plain, partials=(GOOD_INDEX, GOOD_BITS), device="cpu").n_partials == 2


def test_split_token_mask_gives_back_the_mask():
    generator = torch.Generator().manual_seed(1)
    mask = torch.rand(2, 70, 90, generator=generator) < 0.4
    mask[0, :32, :32] = True  # a full block
    mask[1, 32:64] = False  # an empty block row
    blocks, (index, bits) = split_token_mask(mask, 32)
    assert blocks[0, 0, 0] and not (index[:, :3] == torch.tensor([0, 0, 0])).all(1).any()
    assert not blocks[1, 1].any()
    rebuilt = token_mask(blocks.numpy(), 32, False, seq=(70, 90), partials=(index, bits))
    np.testing.assert_array_equal(rebuilt, mask.numpy())
    causal = torch.ones(70, 90, dtype=torch.bool).tril()
    blocks, (index, _) = split_token_mask(mask[:, :, :] & causal, 32, implied=causal)
    assert len(index) <= int(blocks.sum())


# --------------------------------------------------------------------------- the reference
@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([8, 16, 32]),
    st.integers(1, 4),
    st.integers(1, 4),
    st.sampled_from([None, "top_left", "bottom_right"]),
    st.sampled_from([(2, 2, False), (4, 2, False), (4, 1, True)]),
    st.sampled_from([0.0, 0.3, 0.8]),
    st.integers(0, 2**31),
)
def test_reference_is_exact_over_random_token_masks(block, n_q, n_k, causal, heads, density, seed):
    """Random token masks at every block scale, lengths not whole blocks, GQA, a layout head
    serving every head: ``impl="reference"`` with partials equals the dense masked softmax of
    the same token mask to 1e-9 (fp64), output, logsumexp and every gradient."""
    q_heads, kv_heads, one_head = heads
    rng = np.random.default_rng(seed)
    seq_q = int(rng.integers((n_q - 1) * block + 1, n_q * block + 1))
    seq_k = int(rng.integers((n_k - 1) * block + 1, n_k * block + 1))
    mask = torch.from_numpy(rng.random((1 if one_head else q_heads, seq_q, seq_k)) < density)
    if n_q * n_k > 1:
        mask[:, :block, :block] = True  # a full block beside partial and empty ones
    allowed = mask
    if causal is not None:
        offset = seq_k - seq_q if causal == "bottom_right" else 0
        allowed = mask & torch.ones(seq_q, seq_k, dtype=torch.bool).tril(offset)
    blocks, partials = split_token_mask(mask, block)
    the_plan = plan(blocks, block, causal=causal is not None,
                    causal_alignment=causal or "top_left", seq_q=seq_q, seq_k=seq_k,
                    partials=partials, device="cpu")  # fmt: skip
    gen = torch.Generator().manual_seed(seed % 1000)
    q = torch.randn(2, q_heads, seq_q, 8, generator=gen, dtype=torch.float64).requires_grad_()
    k, v = (torch.randn(2, kv_heads, seq_k, 8, generator=gen, dtype=torch.float64)
            .requires_grad_() for _ in range(2))  # fmt: skip
    out, lse = block_sparse_attention(q, k, v, the_plan, impl="reference", return_lse=True)
    expected, expected_lse = masked_softmax_attention(q, k, v, allowed, 8**-0.5)
    assert ((out - expected).abs() <= 1e-9).all()
    assert torch.equal(torch.isinf(lse), torch.isinf(expected_lse))
    finite = torch.isfinite(expected_lse)
    assert ((lse - expected_lse)[finite].abs() <= 1e-9).all()
    grad = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    got = torch.autograd.grad((out * grad).sum(), (q, k, v))
    wanted = torch.autograd.grad((expected * grad).sum(), (q, k, v))
    for name, g, ref in zip("qkv", got, wanted, strict=True):
        assert ((g - ref).abs() <= 1e-9).all(), f"d{name}"


def test_sdd_refuses_partials_and_names_the_alternative():
    blocks, partials = split_token_mask(torch.rand(1, 64, 64) < 0.5, 16)
    the_plan = plan(blocks, 16, partials=partials, device="cpu")
    q = torch.zeros(1, 1, 64, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r'impl="sdd" does not support partial blocks .*fused"'):
        _run_sdd(the_plan, q, q, q, 0.125, None, False, None)
