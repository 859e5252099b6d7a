"""``sdd_segment_runs`` equals ``sdd_segment`` of the same layout, and checks its runs."""

from __future__ import annotations

import time
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer import segment_runs
from designer.run_arrays import RunArrays, check_runs, row_counts, run_offsets
from designer.segment import sdd_segment
from designer.segment_runs import ODD_CODE, sdd_segment_runs, tile_counts_runs, tile_maps_runs
from designer.segment_stats import UNTILED, head_tile_maps
from tests.designer.run_layouts import dense_layouts, dense_to_runs


def assert_same(dense: np.ndarray, start_width: int, mode: str) -> None:
    expected = sdd_segment(dense, start_width, mode=mode)
    found = sdd_segment_runs(dense_to_runs(dense), start_width, mode=mode)
    assert [width for width, _ in found] == [width for width, _ in expected]
    for (_, rows), (_, want) in zip(found, expected, strict=True):
        assert rows.dtype == torch.int64
        assert torch.equal(rows, want)
    counts = tile_counts_runs(dense_to_runs(dense), start_width, mode=mode)
    assert list(counts) == [width for width, _ in expected]
    for width, rows in expected:  # each head's rows, a width² block per tile
        per_head = np.bincount(rows[:, 0].numpy(), minlength=dense.shape[0])
        assert counts[width].tolist() == (per_head // (width * width)).tolist()
        assert (per_head % (width * width) == 0).all()


@settings(max_examples=250, deadline=None)
@given(dense_layouts(), st.integers(0, 30), st.sampled_from(["safe", "deepspeed"]))
def test_equals_the_dense_segmentation(dense, start_width, mode):
    assert_same(dense, start_width, mode)


@pytest.mark.parametrize("mode", ["safe", "deepspeed"])
@pytest.mark.parametrize("start_width", [1, 2, 3, 8, 1000])
def test_structured_layouts(mode, start_width):
    rows, cols = np.arange(40)[:, None], np.arange(40)[None, :]
    sinks = (cols <= rows) & ((cols < 1) | (rows - cols < 6))  # the gap rule across a long gap
    ladder = np.zeros((40, 40), dtype=bool)  # column 0 visited far more often than column 1
    ladder[:, 0] = True
    ladder[[0, 39], 1] = True
    phantoms = np.array([[0, 1, 1, 1], [1, 1, 1, 1], [1, 0, 1, 1]], dtype=bool)
    wide = np.zeros((6, 50), dtype=bool)
    wide[:, ::3] = True
    for dense in (sinks, ladder, np.pad(phantoms, ((0, 2), (0, 5))), wide, np.ones((9, 7), bool)):
        assert_same(dense[None], start_width, mode)


def test_huge_empty_grid_costs_its_blocks(rng):
    """A few blocks in a 2 x 2**20 x 2**20 grid (2**41 cells) segment at once, as they would
    alone."""
    small = rng.random((2, 12, 12)) < 0.7
    runs = dense_to_runs(small)
    n_rows = 1 << 20
    row_ptr = np.concatenate(
        [runs.row_ptr[:13], np.full(n_rows - 12, runs.row_ptr[12]),
         runs.row_ptr[13:], np.full(n_rows - 12, runs.row_ptr[-1])]
    )  # fmt: skip
    huge = RunArrays((2, n_rows, n_rows), row_ptr, runs.starts, runs.stops)
    start = time.perf_counter()
    for mode in ("safe", "deepspeed"):
        found = sdd_segment_runs(huge, 6, mode=mode)
        expected = sdd_segment(small, 6, mode=mode)
        assert [w for w, _ in found] == [w for w, _ in expected]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(found, expected, strict=True))
    assert time.perf_counter() - start < 5


def test_nothing_to_segment():
    runs = dense_to_runs(np.zeros((2, 3, 4), dtype=bool))
    assert sdd_segment_runs(runs, 4) == []
    assert sdd_segment_runs(dense_to_runs(np.ones((1, 3, 3), dtype=bool)), 0) == []
    no_runs = np.zeros(0, dtype=np.int32)
    assert sdd_segment_runs(RunArrays((0, 0, 0), np.zeros(1, np.int64), no_runs, no_runs), 2) == []


def test_arguments_are_checked():
    runs = dense_to_runs(np.ones((1, 2, 2), dtype=bool))
    with pytest.raises(TypeError, match="start_width must be an integer"):
        sdd_segment_runs(runs, 2.0)
    with pytest.raises(ValueError, match="mode must be"):
        sdd_segment_runs(runs, 2, mode="fast")
    with pytest.raises(TypeError, match="lacks row_ptr, starts, stops"):
        sdd_segment_runs(torch.ones(1, 2, 2), 2)


# ------------------------------------------------------------------ the runs' checks
def runs_of(shape, *arrays):
    return RunArrays(shape, *(np.array(a) if a else np.zeros(0, np.int64) for a in arrays))


@pytest.mark.parametrize(
    ("runs", "error", "match"),
    [
        (runs_of((1, 2), [0, 0], [], []), ValueError, r"shape must be \(H, M, N\)"),
        (runs_of((1, -1, 2), [0], [], []), ValueError, r"shape\[1\] must be >= 0"),
        (runs_of((1, 2, 2), [0, 0], [], []), ValueError, "H·M \\+ 1 = 3 entries, got 2"),
        (runs_of((1, 1, 2), [1, 0], [0], [1]), ValueError, "start at 0 and never decrease"),
        (runs_of((1, 1, 2), [0, 2], [0], [1]), ValueError, "row_ptr\\[-1\\] = 2 entries"),
        (runs_of((1, 1, 2), [0, 1], [0], [3]), ValueError, "0 <= start < stop <= N = 2"),
        (runs_of((1, 1, 2), [0, 1], [1], [1]), ValueError, "0 <= start < stop"),
        (runs_of((1, 1, 4), [0, 2], [0, 1], [1, 2]), ValueError, "disjoint and not touching"),
        (runs_of((1, 1, 4), [0, 2], [2, 0], [3, 1]), ValueError, "sorted"),
        (runs_of((1, 1, 4), [0, 1], [0.0], [1]), TypeError, "starts must be a 1-D integer"),
        (runs_of((1, 1, 4), [0, 1], [0], [2**40]), ValueError, "stops must fit in int32"),
    ],
)
def test_bad_runs_are_refused(runs, error, match):
    with pytest.raises(error, match=match):
        check_runs(runs)


def test_runs_of_separate_rows_may_touch():
    runs = check_runs(runs_of((1, 2, 4), [0, 1, 2], [0, 2], [2, 4]))  # row ends, next starts
    assert runs.row_ptr.dtype == np.int64 and runs.starts.dtype == np.int32
    assert run_offsets(runs).tolist() == [0, 2, 4]
    assert row_counts(runs).tolist() == [2, 2]
    torch_runs = RunArrays(runs.shape, *(torch.from_numpy(a) for a in runs[1:]))
    assert all(
        np.array_equal(a, b) for a, b in zip(check_runs(torch_runs)[1:], runs[1:], strict=True)
    )


@settings(max_examples=120, deadline=None)
@given(dense_layouts(), st.integers(0, 30), st.integers(1, 400))
def test_tile_maps_equal_the_dense_head_maps(dense, start_width, group_blocks):
    """Every block's tile width and odd flag, and each head's tile counts, are those of
    ``head_tile_maps`` on the head's grid, whatever the head groups held at once."""
    with mock.patch.object(segment_runs, "_MAP_GROUP_BLOCKS", group_blocks):
        maps = tile_maps_runs(dense_to_runs(dense), start_width)
    width_of_code = np.array([UNTILED, *maps.widths.tolist()])
    nonzero = np.nonzero(dense)
    for h in range(dense.shape[0]):
        widths, odd, tiles = head_tile_maps(dense[h], start_width)
        mine = maps.codes[nonzero[0] == h]
        assert np.array_equal(width_of_code[mine & (ODD_CODE - 1)], widths[dense[h] != 0])
        assert np.array_equal(mine >= ODD_CODE, odd[dense[h] != 0])
        assert maps.head_tiles(h) == list(tiles)
        assert maps.active[h] == np.count_nonzero(dense[h])
