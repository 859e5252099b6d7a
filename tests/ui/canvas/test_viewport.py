"""The canvas's windows of a head held as runs, against the dense grid cut and pooled by hand,
and the canvas's view requests checked before use."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import designer.layout
from designer.block_runs import BlockRuns
from designer.layout import Layout
from designer.segment_runs import tile_maps_runs
from designer.segment_stats import head_tile_maps
from ui.canvas.payload import ODD_FLAG, _unpack, head_payload, read_head
from ui.canvas.viewport import (
    MAX_WINDOW_CELLS,
    View,
    read_view,
    whole_head,
    window_payload,
)


@st.composite
def windows(draw):
    h, m, n = draw(st.integers(1, 2)), draw(st.integers(1, 20)), draw(st.integers(1, 20))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    grid = torch.from_numpy(rng.random((h, m, n)) < draw(st.sampled_from([0.05, 0.4, 0.9])))
    row0, col0 = draw(st.integers(0, m - 1)), draw(st.integers(0, n - 1))
    view = View(row0, col0, draw(st.integers(1, m - row0)), draw(st.integers(1, n - col0)),
                draw(st.sampled_from([1, 2, 4])))  # fmt: skip
    return grid, draw(st.integers(0, h - 1)), view


@settings(max_examples=60, deadline=None)
@given(windows())
def test_a_window_payload_is_the_grid_cut_and_pooled(case):
    grid, head, view = case
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(designer.layout, "DENSE_CELLS", 0)
        payload = window_payload(Layout(BlockRuns.from_dense(grid), 16), head, view)
    cut = grid[head, view.row0 : view.row0 + view.rows, view.col0 : view.col0 + view.cols].numpy()
    s = view.step
    pooled = [[cut[r : r + s, c : c + s] for c in range(0, view.cols, s)]
              for r in range(0, view.rows, s)]  # fmt: skip
    cells, _ = read_head(payload)
    assert np.array_equal(cells, np.array([[b.any() for b in row] for row in pooled]))
    assert payload["window"] == {"row0": view.row0, "col0": view.col0, "rows": view.rows,
                                 "cols": view.cols, "step": s}  # fmt: skip
    assert (payload["full_rows"], payload["full_cols"]) == grid.shape[1:]
    if s == 1:
        assert payload["density"] == ""
        return
    shares = np.frombuffer(_unpack(payload["density"]), dtype=np.uint8).reshape(cells.shape)
    expected = np.array([[b.mean() for b in row] for row in pooled])
    assert np.all((shares == 0) == (expected == 0))
    assert np.all(np.abs(shares / 255 - expected) <= 1 / 255 + 1e-9)


@settings(max_examples=40, deadline=None)
@given(windows(), st.integers(0, 8))
def test_a_full_detail_window_is_coloured_as_the_dense_head(case, start_width):
    """With the segmentation's tiles, each block of a window gets the colour and odd shade the
    dense head's payload gives it (its tile's width, from ``head_tile_maps``)."""
    grid, head, view = case
    view = View(view.row0, view.col0, view.rows, view.cols, 1)
    runs = BlockRuns.from_dense(grid)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(designer.layout, "DENSE_CELLS", 0)
        layout = Layout(runs, 16)
    payload = window_payload(layout, head, view, tile_maps_runs(runs, start_width))
    widths, odd, _ = head_tile_maps(grid[head].numpy(), start_width)
    cut = (slice(view.row0, view.row0 + view.rows), slice(view.col0, view.col0 + view.cols))
    dense = head_payload(grid[head].numpy(), widths, odd)
    assert np.array_equal(shown_colours(payload), shown_colours(dense)[cut])


def shown_colours(payload: dict) -> np.ndarray:
    """Each block's colour as the canvas draws it: its tile's colour (dark when odd), or
    ``active`` / ``empty``."""
    cells, codes = read_head(payload)
    table = np.array(["active", *payload["colours"], *payload["dark"]] + ["?"] * 256)
    tiled = codes & (ODD_FLAG - 1)
    index = np.where(tiled == 0, 0, tiled + (codes >= ODD_FLAG) * len(payload["colours"]))
    return np.where(cells, table[index], "empty")


def test_the_first_view_is_the_whole_head_within_the_picture_size():
    assert whole_head(300, 200) == View(0, 0, 300, 200, 1)
    assert whole_head(16384, 16384) == View(0, 0, 16384, 16384, 16)


def test_a_view_request_is_read_and_checked():
    value = {"head": 1, "row0": 10, "col0": 20, "rows": 100, "cols": 50, "step": 4}
    assert read_view(value, (2, 2048, 2048)) == (1, View(10, 20, 100, 50, 4))


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"head": 2}, ValueError, r"head must be in \[0, 1\], got 2"),
        ({"rows": 4090}, ValueError, r"window rows must be in \[1, 4086\], got 4090"),
        ({"step": 3}, ValueError, "view step must be a power of 2, got 3"),
        ({"step": "1"}, TypeError, "view step must be an int"),
        ({"row0": 0, "col0": 0, "rows": 4096, "cols": 2048, "step": 1}, ValueError,
         f"at most {MAX_WINDOW_CELLS:,} picture cells"),
        ({"extra": 1}, ValueError, "canvas view"),
    ],
)  # fmt: skip
def test_a_bad_view_request_is_refused(change, error, match):
    value = {"head": 1, "row0": 10, "col0": 20, "rows": 100, "cols": 50, "step": 4, **change}
    with pytest.raises(error, match=match):
        read_view(value, (2, 4096, 4096))
