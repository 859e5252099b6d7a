"""Segmentation statistics and the DeepSpeed defect check, against hand counts and the reference."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.layout import Layout
from designer.segment import sdd_segment
from designer.segment_stats import (
    DeepSpeedDefects,
    WidthStats,
    deepspeed_defects,
    deepspeed_start_width,
    run_segment_stats,
    segment_stats,
    unsegmented_stats,
)
from tests.designer.segment_reference import reference_sdd_segment
from tests.designer.test_segment import PHANTOM_EXAMPLE, longformer_layout
from tests.factories import random_layout


def test_numbers_of_a_small_segmentation():
    layout = Layout(torch.ones(1, 3, 3, dtype=torch.bool), 16)
    stats = segment_stats(layout, sdd_segment(layout, 2), head_dim=64)
    assert stats.widths == (
        WidthStats(2, tiles=1, blocks=4, coverage=4 / 9, tile_tokens=32, flops=2 * 32 * 32 * 64),
        WidthStats(
            1, tiles=5, blocks=5, coverage=5 / 9, tile_tokens=16, flops=5 * 2 * 16 * 16 * 64
        ),
    )
    assert (stats.active_blocks, stats.tiles, stats.blocks, stats.coverage) == (9, 6, 9, 1.0)
    assert stats.mean_tile_blocks == 1.5 and stats.mean_tile_tokens2 == 1.5 * 16 * 16
    assert stats.flops == 9 * 2 * 16 * 16 * 64 == stats.dense_flops


def test_unsegmented_is_one_tile_per_block():
    layout = Layout(longformer_layout(), 32)
    stats = unsegmented_stats(layout, head_dim=128)
    assert stats.widths == (
        WidthStats(
            1, tiles=264, blocks=264, coverage=1.0, tile_tokens=32, flops=264 * 2 * 32**2 * 128
        ),
    )
    assert (stats.tiles, stats.mean_tile_blocks, stats.mean_tile_tokens2) == (264, 1.0, 1024.0)
    assert stats.dense_flops == 2 * 1 * 1024 * 1024 * 128


def test_empty_segmentation():
    layout = Layout.zeros(2, 4, 4, 64)
    stats = segment_stats(layout, sdd_segment(layout, 4), head_dim=64)
    assert stats.widths == () and stats.tiles == stats.blocks == stats.flops == 0
    assert stats.coverage == stats.mean_tile_blocks == stats.mean_tile_tokens2 == 0.0


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(1, 20),
    st.integers(1, 20),
    st.floats(0.0, 1.0),
    st.integers(1, 9),
    st.sampled_from([16, 64]),
    st.integers(0, 2**32 - 1),
)
def test_safe_segmentation_covers_once_and_computes_what_single_blocks_do(
    heads, rows, cols, density, start_width, block_size, seed
):
    layout = random_layout(np.random.default_rng(seed), heads, rows, cols, density, block_size)
    segments = sdd_segment(layout, start_width)
    stats = segment_stats(layout, segments, head_dim=64)
    baseline = unsegmented_stats(layout, head_dim=64)
    assert stats.blocks == layout.nnz == baseline.tiles
    assert stats.coverage == baseline.coverage == (1.0 if layout.nnz else 0.0)
    assert stats.flops == baseline.flops
    assert stats.tiles <= baseline.tiles
    for row, (width, tile_rows) in zip(stats.widths, segments, strict=True):
        assert (row.width, row.tiles * width * width, row.tile_tokens) == (
            width,
            len(tile_rows),
            width * block_size,
        )
    if stats.tiles:
        assert stats.mean_tile_blocks == pytest.approx(layout.nnz / stats.tiles)
    assert run_segment_stats(layout, start_width, head_dim=64) == stats  # counts only, on runs


# ------------------------------------------------------------------ DeepSpeed defects
def test_phantom_example():
    defects = deepspeed_defects(Layout(PHANTOM_EXAMPLE, 16), 3)
    assert defects == DeepSpeedDefects(3, 1, 0, ((0, 0, 0),), ())
    assert defects.found and defects.heads == (0,)


def test_longformer_corner_is_emitted_three_times():
    defects = deepspeed_defects(Layout(longformer_layout(), 16), 4)
    assert defects == DeepSpeedDefects(4, 0, 2, (), ((0, 0, 0),))


@pytest.mark.parametrize("start_width", [0, 1, 2])
def test_no_defects_below_width_3(start_width):
    layout = Layout(longformer_layout(), 16)
    assert not deepspeed_defects(layout, start_width).found


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(1, 16),
    st.integers(1, 16),
    st.floats(0.4, 1.0),
    st.integers(0, 9),
    st.integers(0, 2**32 - 1),
)
def test_defects_match_a_count_over_the_reference(heads, rows, cols, density, start_width, seed):
    layout = random_layout(np.random.default_rng(seed), heads, rows, cols, density)
    emitted = Counter(
        (h, r, c)
        for _, out in reference_sdd_segment(layout.blocks, start_width)
        for h, r, c, _ in out
    )
    blocks = layout.blocks.numpy()
    phantoms = {cell: n for cell, n in emitted.items() if not blocks[cell]}
    duplicates = {cell: n for cell, n in emitted.items() if blocks[cell] and n > 1}
    assert deepspeed_defects(layout, start_width) == DeepSpeedDefects(
        start_width,
        sum(phantoms.values()),
        sum(n - 1 for n in duplicates.values()),
        tuple(sorted(phantoms)),
        tuple(sorted(duplicates)),
    )


def test_deepspeed_start_width():
    assert [deepspeed_start_width(b) for b in (1, 8, 16, 32, 64, 128, 256)] == [
        32,
        4,
        2,
        4,
        2,
        1,
        0,
    ]
    with pytest.raises(ValueError, match=r"block_size must be >= 1, got 0"):
        deepspeed_start_width(0)


# ------------------------------------------------------------------ bad arguments
def test_bad_arguments():
    layout = Layout(torch.ones(1, 2, 2, dtype=torch.bool), 16)
    segments = sdd_segment(layout, 2)
    with pytest.raises(TypeError, match=r"layout must be a Layout, got Tensor"):
        segment_stats(layout.blocks, segments, head_dim=64)
    with pytest.raises(TypeError, match=r"layout must be a Layout, got Tensor"):
        deepspeed_defects(layout.blocks, 4)
    with pytest.raises(ValueError, match=r"head_dim must be >= 1, got 0"):
        segment_stats(layout, segments, head_dim=0)
    with pytest.raises(TypeError, match=r"segments must be sdd_segment's list, got dict"):
        segment_stats(layout, dict(segments), head_dim=64)
    with pytest.raises(ValueError, match=r"segments\[0\] must be a \(width, rows\) pair"):
        segment_stats(layout, [(2,)], head_dim=64)
    with pytest.raises(ValueError, match=r"segments\[0\] width must be >= 1, got 0"):
        segment_stats(layout, [(0, torch.zeros(0, 4))], head_dim=64)
    with pytest.raises(ValueError, match=r"rows must be a \[k·width², 4\] tensor, got \[4, 3\]"):
        segment_stats(layout, [(2, torch.zeros(4, 3))], head_dim=64)
    with pytest.raises(ValueError, match=r"whole 2x2 tiles \(a multiple of 4 rows\), got 3"):
        segment_stats(layout, [(2, torch.zeros(3, 4))], head_dim=64)
