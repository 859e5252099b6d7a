import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.formats.flex_tiles import (
    FLEX_BLOCK,
    check_tiles,
    flex_tile_size,
    kv_lists,
    listed_tiles,
    tile_classes,
)
from designer.layout import Layout
from tests.designer.formats.flex_reference import layouts, lengths_and_offsets, token_tiles
from tests.factories import random_layout


@settings(max_examples=80, deadline=None)
@given(st.data(), layouts(), st.booleans(), st.sampled_from([None, 8, 16, 128]))
def test_tiles_are_classified_by_their_token_pairs(data, layout, causal, tile):
    """At whole or partial lengths, causal at top-left, bottom-right or any other offset."""
    tile = tile or flex_tile_size(layout.block_size)
    lengths, offset = data.draw(lengths_and_offsets(layout))
    full, partial = tile_classes(
        layout.blocks, layout.block_size, causal=causal, tile_size=tile,
        seq_lengths=lengths, causal_offset=offset,
    )  # fmt: skip
    expected_full, expected_partial = token_tiles(layout, causal, tile, lengths, offset)
    assert torch.equal(full, expected_full)
    assert torch.equal(partial, expected_partial)


@pytest.mark.parametrize(
    ("block", "tile"), [(1, 128), (16, 128), (64, 128), (96, 128), (128, 128), (256, 256)]
)
def test_the_tile_is_flexs_unless_the_blocks_are_a_multiple_of_it(block, tile):
    assert flex_tile_size(block) == tile
    assert FLEX_BLOCK == 128


def test_a_short_diagonal_tile_can_be_wholly_causal():
    layout = Layout(torch.ones(1, 129, 129, dtype=torch.bool), 1)  # tiles of 128 and 1 token
    full, partial = tile_classes(layout.blocks, 1, causal=True)
    assert full[0].int().tolist() == [[0, 0], [1, 1]]
    assert partial[0].int().tolist() == [[1, 0], [0, 0]]


def test_a_tile_grid_past_the_limit_is_refused_before_it_is_built():
    blocks = torch.ones(32, 64, 64, dtype=torch.bool)  # 32 heads x 2048 x 2048 tiles of 128
    with pytest.raises(ValueError, match=r"needs 134,217,728 tiles, more than the limit of 67,"):
        tile_classes(blocks, 4095, causal=False)


@settings(max_examples=30, deadline=None)
@given(layouts())
def test_kv_lists_list_each_rows_tiles_first_and_read_back(layout):
    num, indices = kv_lists(layout.blocks)
    assert num.dtype == indices.dtype == torch.int32
    assert num.shape == (1, *layout.shape[:2]) and indices.shape == (1, *layout.shape)
    for h, row in np.ndindex(*layout.shape[:2]):
        active = layout.blocks[h, row].nonzero().flatten().tolist()
        assert indices[0, h, row, : num[0, h, row]].tolist() == active
    assert torch.equal(listed_tiles(num, indices, layout.n_k_blocks)[0], layout.blocks)


def test_listed_tiles_refuses_indices_outside_the_row():
    num, indices = torch.tensor([[2]]), torch.tensor([[[0, 5]]])
    with pytest.raises(ValueError, match=r"tile indices must be in \[0, 3\], got \[0, 5\]"):
        listed_tiles(num, indices, 4)


def test_check_tiles_says_what_differs(rng):
    layout = random_layout(rng, 2, 8, 8, 0.5, 16)
    full, partial = tile_classes(layout.blocks, 16, causal=False)
    check_tiles(layout, False, 128, (128, 128), full, partial, "mask")
    with pytest.raises(ValueError, match="mask has 64-token tiles over 128 x 128 tokens, but its"):
        check_tiles(layout, False, 64, (128, 128), full, partial, "mask")
    with pytest.raises(ValueError, match=r"over 112 x 128 tokens, but .* over 128 x 128 tokens \("):
        check_tiles(layout, False, 128, (112, 128), full, partial, "mask")  # past a block short
    with pytest.raises(ValueError, match=r"for \[heads, rows, columns\] \[1, 1, 1\], but its"):
        check_tiles(layout, False, 128, (128, 128), full[:1], partial[:1], "mask")
    with pytest.raises(ValueError, match="mask tile lists are not the tiles of its layout"):
        check_tiles(layout, False, 128, (128, 128), full | partial, partial, "mask")
    full, partial = tile_classes(layout.blocks, 16, causal=True, seq_lengths=(120, 128),
                                 causal_offset=8)  # fmt: skip
    check_tiles(layout, True, 128, (120, 128), full, partial, "mask", causal_offset=8)
    with pytest.raises(ValueError, match="mask tile lists are not the tiles of its layout"):
        check_tiles(layout, True, 128, (120, 128), full, partial, "mask", causal_offset=-130)
