import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.layout import Layout
from designer.partials import (
    MAX_PARTIAL_BYTES,
    MAX_PARTIALS,
    PartialBlocks,
    check_partial_size,
    distinct_masks,
    pack_masks,
)
from tests.factories import random_token_mask, token_layout_of

SHAPES = st.tuples(
    st.integers(1, 3), st.integers(1, 40), st.integers(1, 40), st.sampled_from([1, 3, 8, 13])
)


def _layout(seed, heads, seq_q, seq_k, block):
    mask = random_token_mask(np.random.default_rng(seed), heads, seq_q, seq_k, block)
    return mask, token_layout_of(mask, block)


@settings(max_examples=40, deadline=None)
@given(SHAPES, st.integers(0, 2**32 - 1))
def test_layout_and_token_mask_round_trip_in_normal_form(shape, seed):
    heads, seq_q, seq_k, block = shape
    mask, layout = _layout(seed, heads, seq_q, seq_k, block)
    assert torch.equal(layout.token_mask(), mask)
    assert (layout.seq_len_q, layout.seq_len_k) == (seq_q, seq_k)
    if layout.partials is not None:  # normal: no partial block is full or empty
        tiles = layout.partials.unpack()
        index = layout.partials.index.long()
        for p, (h, r, c) in enumerate(index.tolist()):
            inside = mask[h, r * block : (r + 1) * block, c * block : (c + 1) * block]
            rows, cols = inside.shape
            assert torch.equal(tiles[p, :rows, :cols], inside)
            assert not tiles[p, rows:].any() and not tiles[p, :, cols:].any()
            assert inside.any() and not inside.all()
    stats = layout.token_stats()
    assert stats.allowed == int(mask.sum())
    assert stats.full_blocks + stats.partial_blocks + stats.empty_blocks == layout.blocks.numel()
    assert stats.computed == int(layout.blocks.repeat_interleave(block, 1)
                                 .repeat_interleave(block, 2)[:, :seq_q, :seq_k].sum())  # fmt: skip


@settings(max_examples=30, deadline=None)
@given(SHAPES, st.integers(0, 2**32 - 1), st.booleans())
def test_algebra_is_token_algebra(shape, seed, one_head):
    heads, seq_q, seq_k, block = shape
    mask_a, a = _layout(seed, heads, seq_q, seq_k, block)
    mask_b, b = _layout(seed + 1, 1 if one_head else heads, seq_q, seq_k, block)
    assert torch.equal(a.union(b).token_mask(), mask_a | mask_b)
    assert torch.equal(a.intersection(b).token_mask(), mask_a & mask_b)
    assert torch.equal(a.difference(b).token_mask(), mask_a & ~mask_b)
    assert torch.equal(a.complement().token_mask(), ~mask_a)
    assert torch.equal(a.transpose().token_mask(), mask_a.transpose(1, 2))
    assert a.transpose().transpose() == a
    order = [heads - 1, 0]
    assert torch.equal(a.select_heads(order).token_mask(), mask_a[order])
    broadcast = b.select_heads([0]).broadcast_heads(3).token_mask()
    assert torch.equal(broadcast, mask_b[:1].expand(3, -1, -1))
    replaced = a.with_heads([0], b.select_heads([0]))
    assert torch.equal(replaced.token_mask()[0], mask_b[0])
    assert torch.equal(replaced.token_mask()[1:], mask_a[1:])
    clipped = a.causal_clip().token_mask()
    rows = torch.arange(seq_q)[:, None] // block
    cols = torch.arange(seq_k)[None, :] // block
    assert torch.equal(clipped, mask_a & (cols <= rows))


def test_normal_form_on_construction():
    blocks = torch.ones(1, 2, 2, dtype=torch.bool)
    ones = torch.ones(3, 4, 4, dtype=torch.bool)
    masks = torch.stack([ones[0], ~ones[0], torch.eye(4, dtype=torch.bool)])
    index = torch.tensor([[0, 0, 0], [0, 0, 1], [0, 1, 1]])
    layout = Layout(blocks, 4, PartialBlocks.of_masks(index, masks))
    assert layout.n_partial == 1 and layout.blocks[0].int().tolist() == [[1, 0], [1, 1]]
    tril = PartialBlocks.of_masks(index[2:], torch.tril(ones[:1]))
    cut = Layout(blocks, 4, tril, seq_q=5, seq_k=5)
    assert cut.n_partial == 0 and cut == Layout(blocks, 4, seq_q=5, seq_k=5)  # its token is set
    assert Layout(blocks, 4, seq_q=8) == Layout(blocks, 4)


@pytest.mark.parametrize(
    ("index", "bits", "message"),
    [
        (torch.zeros(1, 3), torch.zeros(1, 4, 1, dtype=torch.uint8), r"int32 \[P, 3\]"),
        (torch.zeros(1, 3, dtype=torch.int32), torch.zeros(1, 4, 2, dtype=torch.uint8),
         r"partial bits must be \[1, 4, 1\]"),
        (torch.tensor([[0, 0, 1], [0, 0, 0]], dtype=torch.int32),
         torch.zeros(2, 4, 1, dtype=torch.uint8), "sorted"),
        (torch.tensor([[0, -1, 0]], dtype=torch.int32), torch.zeros(1, 4, 1, dtype=torch.uint8),
         ">= 0"),
    ],
)  # fmt: skip
def test_partial_blocks_refuse_bad_tensors(index, bits, message):
    with pytest.raises(ValueError, match=message):
        PartialBlocks(index, bits)


def test_layouts_refuse_partials_that_do_not_fit():
    eye = torch.eye(4, dtype=torch.bool)[None]
    partial = PartialBlocks.of_masks(torch.tensor([[0, 0, 1]]), eye)
    with pytest.raises(ValueError, match=r"must be an active block"):
        Layout(torch.eye(2, dtype=torch.bool)[None], 4, partial)
    with pytest.raises(ValueError, match=r"outside the layout"):
        Layout(torch.ones(1, 1, 1, dtype=torch.bool), 4, partial)
    with pytest.raises(ValueError, match=r"masks of the block size 8"):
        Layout(torch.ones(1, 2, 2, dtype=torch.bool), 8, partial)
    with pytest.raises(ValueError, match=r"seq_q .* must be in \[5, 8\], got 4"):
        Layout(torch.ones(1, 2, 2, dtype=torch.bool), 4, seq_q=4)


def test_partial_masks_are_bounded_and_the_refusal_says_what_helps():
    with pytest.raises(ValueError, match=r"more than the limit .* use fewer heads or shorter"):
        check_partial_size(MAX_PARTIAL_BYTES // 512 + 1, 64)  # bytes: smaller blocks do not help
    with pytest.raises(ValueError, match=r"more than the limit .* use larger blocks"):
        check_partial_size(MAX_PARTIALS + 1, 1)  # too many blocks


def test_token_mask_is_refused_past_its_cap():
    with pytest.raises(ValueError, match=r"dense token mask .* more than the limit"):
        Layout.zeros(16, 2048, 2048, 16).token_mask()


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([16, 32, 64]), st.integers(1, 40))
def test_distinct_masks_hold_each_mask_once_and_every_block_finds_its_own(seed, block, count):
    """A block's slot in ``distinct_masks`` gives back its own token mask, slot 0 is all true,
    and no mask is stored twice, also when blocks repeat a few masks (a window's edges)."""
    rng = np.random.default_rng(seed)
    kinds = rng.random((int(rng.integers(1, 5)), block, block)) < rng.random()
    masks = torch.from_numpy(kinds[rng.integers(0, len(kinds), count)])  # repeats
    index = torch.stack([torch.zeros(count, dtype=torch.int32),
                         torch.arange(count, dtype=torch.int32),
                         torch.zeros(count, dtype=torch.int32)], 1)  # fmt: skip
    partials = PartialBlocks(index, pack_masks(masks))
    table, slots = distinct_masks(partials)
    assert table.dtype == torch.bool and table[0].all() and slots.dtype == torch.int32
    assert torch.equal(table[slots.long()], masks)
    assert len(table) - 1 == len(torch.unique(masks.reshape(count, -1), dim=0))
