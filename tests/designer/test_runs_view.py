"""A window of a head held as runs, at full detail and as bucket densities, against the dense
grid cut and averaged by hand, over random layouts, windows and steps."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.block_runs import BlockRuns
from designer.runs_view import window_blocks, window_density, window_tile_maps
from designer.segment_runs import tile_maps_runs
from designer.segment_stats import head_tile_maps


@st.composite
def windows(draw):
    h, m, n = draw(st.integers(1, 3)), draw(st.integers(1, 12)), draw(st.integers(1, 12))
    density = draw(st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    grid = torch.from_numpy(rng.random((h, m, n)) < density)
    head, row0, col0 = (
        draw(st.integers(0, h - 1)),
        draw(st.integers(0, m - 1)),
        draw(st.integers(0, n - 1)),
    )
    rows, cols = draw(st.integers(1, m - row0)), draw(st.integers(1, n - col0))
    return grid, (head, row0, col0, rows, cols), draw(st.integers(1, 5))


@settings(max_examples=80, deadline=None)
@given(windows())
def test_window_blocks_and_density_match_the_grid(case):
    grid, (head, row0, col0, rows, cols), step = case
    runs = BlockRuns.from_dense(grid)
    cut = grid[head, row0 : row0 + rows, col0 : col0 + cols].numpy()
    assert np.array_equal(window_blocks(runs, head, row0, col0, rows, cols), cut)
    density = window_density(runs, head, row0, col0, rows, cols, step)
    expected = np.array(
        [
            [cut[r : r + step, c : c + step].mean() for c in range(0, cols, step)]
            for r in range(0, rows, step)
        ]
    )
    assert density.shape == expected.shape
    np.testing.assert_allclose(density, expected, atol=1e-6)


@settings(max_examples=80, deadline=None)
@given(windows(), st.integers(0, 8))
def test_window_tile_maps_cut_the_dense_head_maps(case, start_width):
    grid, (head, row0, col0, rows, cols), _ = case
    runs = BlockRuns.from_dense(grid)
    widths, odd = window_tile_maps(runs, tile_maps_runs(runs, start_width), head, row0, col0,
                                   rows, cols)  # fmt: skip
    dense_widths, dense_odd, _ = head_tile_maps(grid[head].numpy(), start_width)
    cut = (slice(row0, row0 + rows), slice(col0, col0 + cols))
    assert np.array_equal(widths, dense_widths[cut])
    assert np.array_equal(odd, dense_odd[cut])


def test_window_tile_maps_refuse_maps_of_other_runs():
    runs = BlockRuns.from_dense(torch.ones(1, 4, 4, dtype=torch.bool))
    other = tile_maps_runs(BlockRuns.from_dense(torch.eye(4, dtype=torch.bool)[None]), 2)
    with pytest.raises(ValueError, match="maps must be of these runs"):
        window_tile_maps(runs, other, 0, 0, 0, 4, 4)


@pytest.mark.parametrize(
    ("window", "match"),
    [
        ((1, 0, 0, 1, 1), "head must be in"),
        ((0, 4, 0, 1, 1), "window row0 must be in"),
        ((0, 0, 0, 1, 5), "window cols must be in"),
    ],
)
def test_a_window_outside_the_layout_is_refused(window, match):
    with pytest.raises(ValueError, match=match):
        window_blocks(BlockRuns.empty(1, 4, 4), *window)


def test_step_must_be_positive():
    with pytest.raises(ValueError, match="window step must be"):
        window_density(BlockRuns.empty(1, 4, 4), 0, 0, 0, 4, 4, 0)
