import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.segment_stats import UNTILED, tile_maps
from ui.pictures import (
    ACTIVE_RGB,
    ALTERNATE_SHADE,
    EMPTY_RGB,
    WIDTH_PALETTE,
    enlarge,
    frame,
    max_pool,
    plain_pictures,
    scale_factors,
    tile_pictures,
    width_colour,
)


def rgb(hex_colour):
    return tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))


def test_width_colours_follow_log2_and_differ_along_a_halving_chain():
    assert width_colour(1) == WIDTH_PALETTE[0]
    assert width_colour(2) == width_colour(3) == WIDTH_PALETTE[1]
    assert width_colour(4) == width_colour(7) == WIDTH_PALETTE[2]
    for start in range(1, 300):
        chain = [start >> k for k in range(start.bit_length())]
        assert len({width_colour(w) for w in chain}) == len(chain)


def test_tile_maps_mark_width_and_alternate_tiles():
    # head 0: a 2x2 tile then two single blocks; head 1: one single block
    two = torch.tensor([[0, 0, 0, 0], [0, 0, 1, 1], [0, 1, 0, 2], [0, 1, 1, 3]])
    ones = torch.tensor([[0, 3, 3, 4], [0, 2, 3, 5], [1, 0, 1, 6]])
    blocks = np.zeros((2, 4, 4), dtype=np.uint8)
    blocks[0, :2, :2] = blocks[0, 3, 3] = blocks[0, 2, 3] = blocks[1, 0, 1] = 1
    blocks[1, 3, 0] = 1  # active, in no tile
    widths, odd = tile_maps(blocks, [(2, two), (1, ones)])
    expected = np.zeros((2, 4, 4), dtype=np.int32)
    expected[0, :2, :2] = 2
    expected[0, 3, 3] = expected[0, 2, 3] = expected[1, 0, 1] = 1
    expected[1, 3, 0] = UNTILED
    assert np.array_equal(widths, expected)
    assert odd[0, 2, 3] and not odd[0, 3, 3] and not odd[0, 0, 0] and not odd[1, 0, 1]


def test_tile_pictures_colours_each_block_by_its_tile():
    widths = np.array([[[0, 1], [4, 2]]], dtype=np.int32)
    odd = np.array([[[False, False], [False, True]]])
    image = tile_pictures(widths, odd)
    assert image.shape == (1, 2, 2, 3) and image.dtype == np.uint8
    assert tuple(image[0, 0, 0]) == EMPTY_RGB
    assert tuple(image[0, 0, 1]) == rgb(width_colour(1))
    assert tuple(image[0, 1, 0]) == rgb(width_colour(4))
    darker = tuple(int(c * ALTERNATE_SHADE) for c in rgb(width_colour(2)))
    assert tuple(image[0, 1, 1]) == darker


def test_active_blocks_in_no_tile_are_drawn():
    blocks = np.array([[[1, 0], [1, 1]]], dtype=np.uint8)
    widths, odd = tile_maps(blocks, [])  # start width 0: no tiles at all
    image = tile_pictures(widths, odd)
    assert tuple(image[0, 0, 1]) == EMPTY_RGB
    for row, col in ((0, 0), (1, 0), (1, 1)):
        assert tuple(image[0, row, col]) == ACTIVE_RGB
    pooled = tile_pictures(max_pool(widths, 2), max_pool(odd, 2))
    assert tuple(pooled[0, 0, 0]) == ACTIVE_RGB


def test_plain_pictures():
    image = plain_pictures(np.array([[1, 0]], dtype=np.uint8))
    assert tuple(image[0, 0]) == ACTIVE_RGB and tuple(image[0, 1]) == EMPTY_RGB


@pytest.mark.parametrize(
    ("long_side", "target", "expected"), [(64, 256, (1, 4)), (300, 256, (2, 1)), (1, 5, (1, 5))]
)
def test_scale_factors(long_side, target, expected):
    assert scale_factors(long_side, target) == expected


@settings(max_examples=50, deadline=None)
@given(
    rows=st.integers(1, 9),
    cols=st.integers(1, 9),
    factor=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_max_pool_keeps_the_largest_value_under_each_cell(rows, cols, factor, seed):
    grid = np.random.default_rng(seed).integers(0, 9, size=(2, rows, cols))
    pooled = max_pool(grid, factor)
    assert pooled.shape == (2, -(-rows // factor), -(-cols // factor))
    for h in range(2):
        for r in range(pooled.shape[1]):
            for c in range(pooled.shape[2]):
                cell = grid[h, r * factor : (r + 1) * factor, c * factor : (c + 1) * factor]
                assert pooled[h, r, c] == cell.max()


def test_enlarge_repeats_pixels():
    image = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    big = enlarge(image, 3)
    assert big.shape == (6, 6, 3)
    assert np.array_equal(big[::3, ::3], image) and np.array_equal(big[2, 5], image[0, 1])


def test_frame_adds_a_one_pixel_border():
    image = np.zeros((2, 3, 3), dtype=np.uint8)
    framed = frame(image, (9, 8, 7))
    assert framed.shape == (4, 5, 3)
    assert np.array_equal(framed[1:-1, 1:-1], image)
    assert (framed[0] == (9, 8, 7)).all() and (framed[:, -1] == (9, 8, 7)).all()


@pytest.mark.parametrize("long_side", [1, 16, 100, 256, 512, 2048, 4096])
def test_thumbnails_stay_small_enough_for_four_a_row_whatever_the_grid(long_side):
    """Once they grew with the grid: 512 px at 4096² blocks, one a row, 16 rows for 16 heads."""
    from ui.overview_ui import MAX_THUMBNAIL_PX, thumbnail_scale

    shrink, grow = thumbnail_scale(long_side)
    side = -(-long_side // shrink) * grow
    assert 64 <= side <= MAX_THUMBNAIL_PX <= 180
