"""Paint edits of a layout held as row runs give exactly the dense edit's layout, region by
region (the switch point is lowered to 0 cells, so small random layouts are held as runs)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import designer.layout
from designer.edit import ACTIONS, EditOp, apply_edit
from designer.edit_runs import paints_any_runs, region_runs
from designer.regions import Band, Bitmap, Cells, Column, Rect, Row
from tests.designer.test_layout_runs import as_runs, check_same, layouts


@pytest.fixture(autouse=True)
def _runs_everywhere(monkeypatch):
    monkeypatch.setattr(designer.layout, "DENSE_CELLS", 0)


@st.composite
def regions(draw, n_rows, n_cols):
    kind = draw(st.sampled_from(["rect", "row", "column", "band", "cells", "bitmap"]))
    row, col = draw(st.integers(0, n_rows - 1)), draw(st.integers(0, n_cols - 1))
    if kind == "rect":
        row1, col1 = draw(st.integers(row, n_rows - 1)), draw(st.integers(col, n_cols - 1))
        return Rect(row, col, row1, col1)
    if kind == "row":
        return Row(row)
    if kind == "column":
        return Column(col)
    if kind == "band":
        low = draw(st.integers(-n_cols - 1, n_rows))
        return Band(low, draw(st.integers(low, n_rows + 1)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    mask = rng.random((n_rows - row, n_cols - col)) < 0.5
    mask[0, 0] = True
    if kind == "bitmap":
        return Bitmap.of(mask, row, col)
    rows, cols = np.nonzero(mask)
    return Cells(tuple(zip((rows + row).tolist(), (cols + col).tolist(), strict=True)))


@settings(max_examples=60, deadline=None)
@given(st.data(), layouts())
def test_an_edit_on_runs_is_the_dense_edit(data, dense):
    h, m, n = dense.shape
    region = data.draw(regions(m, n))
    heads = data.draw(st.none() | st.sets(st.integers(0, h - 1), min_size=1).map(tuple))
    op = EditOp(data.draw(st.sampled_from(ACTIONS)), region, heads)
    expected = apply_edit(dense, op)
    painted = apply_edit(as_runs(dense), op)
    check_same(painted, expected)
    blocks_change = expected.to_runs() != dense.to_runs()  # a partial block set full: no paint
    assert paints_any_runs(as_runs(dense), op) == (op.action == "toggle" or blocks_change)


@settings(max_examples=40, deadline=None)
@given(st.data(), st.integers(1, 6), st.integers(1, 6))
def test_region_runs_are_the_region_mask(data, n_rows, n_cols):
    region = data.draw(regions(n_rows, n_cols))
    assert np.array_equal(
        region_runs(region, n_rows, n_cols).to_dense()[0].numpy(),
        region.mask(n_rows, n_cols).numpy(),
    )


def test_a_region_outside_the_grid_is_refused():
    with pytest.raises(ValueError, match="outside"):
        region_runs(Rect(0, 0, 4, 1), 3, 3)
