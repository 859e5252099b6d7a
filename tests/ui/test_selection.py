import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.edit import Cells, Rect
from designer.ui.selection import MarkerGrid, expand_brush, mask_region, selected_blocks


def reference_box(grid, xs, ys):
    """Block by block: is the centre (col, row) inside the closed box?"""
    mask = np.zeros((grid.n_rows, grid.n_cols), dtype=bool)
    for row in range(grid.n_rows):
        for col in range(grid.n_cols):
            mask[row, col] = min(xs) <= col <= max(xs) and min(ys) <= row <= max(ys)
    return mask


def reference_lasso(grid, xs, ys):
    """Block by block ray casting to the left: an odd number of edge crossings is inside."""
    mask = np.zeros((grid.n_rows, grid.n_cols), dtype=bool)
    n = len(xs)
    for row in range(grid.n_rows):
        for col in range(grid.n_cols):
            inside = False
            for i in range(n):
                ax, ay, bx, by = xs[i], ys[i], xs[(i + 1) % n], ys[(i + 1) % n]
                if (ay > row) != (by > row):
                    cross = ax + (row - ay) * (bx - ax) / (by - ay)
                    if cross <= col:
                        inside = not inside
            mask[row, col] = inside
    return mask


def test_marker_grid_is_one_per_block_when_small():
    grid = MarkerGrid.for_shape(3, 4)
    x, y = grid.centres()
    assert grid.stride == 1
    assert grid.rows().tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert grid.cols().tolist() == [0, 1, 2, 3] * 3
    assert x.tolist() == [0, 1, 2, 3] * 3 and y.tolist() == grid.rows().tolist()


def test_marker_grid_groups_large_heads():
    grid = MarkerGrid.for_shape(256, 256)
    assert grid.stride == 2 and len(grid.rows()) == 128 * 128
    ragged = MarkerGrid.for_shape(5, 3, max_per_side=2)
    x, y = ragged.centres()
    assert ragged.stride == 3
    assert list(zip(ragged.rows(), ragged.cols(), strict=True)) == [(0, 0), (3, 0)]
    assert y.tolist() == [1.0, 3.5] and x.tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    ("args", "match"),
    [((0, 4), r"n_rows must be >= 1, got 0"), ((4, 1.5), r"n_cols must be an integer")],
)
def test_marker_grid_checks_its_shape(args, match):
    with pytest.raises((ValueError, TypeError), match=match):
        MarkerGrid.for_shape(*args)


def test_box_selects_centres_inside_edges_included():
    grid = MarkerGrid.for_shape(6, 8)
    mask = selected_blocks({"box": [{"x": [3.0, 1.0], "y": [0.5, 2.0]}]}, grid, head=0)
    assert np.array_equal(mask, reference_box(grid, [1.0, 3.0], [0.5, 2.0]))
    assert mask.sum() == 3 * 2


def test_box_outside_the_head_selects_nothing():
    grid = MarkerGrid.for_shape(4, 4)
    mask = selected_blocks({"box": [{"x": [5, 9], "y": [-3, -1]}]}, grid, head=0)
    assert not mask.any()


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 12),
    cols=st.integers(1, 12),
    coords=st.lists(st.floats(-3, 15, allow_nan=False), min_size=4, max_size=4),
)
def test_box_matches_reference(rows, cols, coords):
    grid = MarkerGrid.for_shape(rows, cols)
    xs, ys = coords[:2], coords[2:]
    mask = selected_blocks({"box": [{"x": xs, "y": ys}]}, grid, head=0)
    assert np.array_equal(mask, reference_box(grid, xs, ys))


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 10),
    cols=st.integers(1, 10),
    points=st.lists(
        st.tuples(st.floats(-2, 12, allow_nan=False), st.floats(-2, 12, allow_nan=False)),
        min_size=3,
        max_size=9,
    ),
)
def test_lasso_matches_reference(rows, cols, points):
    grid = MarkerGrid.for_shape(rows, cols)
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mask = selected_blocks({"lasso": [{"x": xs, "y": ys}]}, grid, head=0)
    assert np.array_equal(mask, reference_lasso(grid, xs, ys))


def test_lasso_triangle():
    grid = MarkerGrid.for_shape(5, 5)
    triangle = {"x": [-0.5, 4.5, -0.5], "y": [-0.5, 4.5, 4.5]}
    mask = selected_blocks({"lasso": [triangle]}, grid, head=0)
    assert np.array_equal(mask, np.tril(np.ones((5, 5), dtype=bool), -1))


def test_points_select_their_group_and_ignore_other_heads():
    grid = MarkerGrid.for_shape(5, 5, max_per_side=3)  # stride 2
    points = [{"customdata": [1, 2, 4]}, {"customdata": [0, 0, 0]}, {"x": 1}]
    mask = selected_blocks({"points": points}, grid, head=1)
    expected = np.zeros((5, 5), dtype=bool)
    expected[2:4, 4:5] = True
    assert np.array_equal(mask, expected)


def test_points_with_customdata_as_an_object():
    grid = MarkerGrid.for_shape(4, 4)
    point = {"x": 1, "y": 2, "customdata": {"0": 0, "1": 2, "2": 1}}
    mask = selected_blocks({"points": [point, {"customdata": {"0": 0}}]}, grid, head=0)
    assert mask.sum() == 1 and mask[2, 1]


def test_geometry_wins_over_points():
    grid = MarkerGrid.for_shape(4, 4, max_per_side=2)  # stride 2: a point would cover 2x2
    selection = {"box": [{"x": [0, 0], "y": [0, 0]}], "points": [{"customdata": [0, 0, 0]}]}
    mask = selected_blocks(selection, grid, head=0)
    assert mask.sum() == 1 and mask[0, 0]


def test_union_of_several_boxes():
    grid = MarkerGrid.for_shape(4, 4)
    boxes = [{"x": [0, 0], "y": [0, 1]}, {"x": [3, 3], "y": [3, 3]}]
    assert selected_blocks({"box": boxes}, grid, head=0).sum() == 3


def test_empty_selection():
    grid = MarkerGrid.for_shape(4, 4)
    empty = {"points": [], "point_indices": [], "box": [], "lasso": []}
    assert not selected_blocks(empty, grid, head=0).any()
    assert mask_region(selected_blocks(empty, grid, head=0)) is None


def test_mask_region_is_a_rect_when_it_can_be():
    mask = np.zeros((6, 6), dtype=bool)
    mask[1:3, 2:6] = True
    assert mask_region(mask) == Rect(1, 2, 2, 5)
    mask[5, 0] = True
    region = mask_region(mask)
    assert isinstance(region, Cells) and len(region.cells) == 9
    assert np.array_equal(region.mask(6, 6).numpy(), mask)


def test_expand_brush_to_rows_and_columns():
    mask = np.zeros((3, 4), dtype=bool)
    mask[1, 2] = True
    assert expand_brush(mask, "blocks") is mask
    assert expand_brush(mask, "rows").sum(axis=1).tolist() == [0, 4, 0]
    assert expand_brush(mask, "columns").sum(axis=0).tolist() == [0, 0, 3, 0]
    with pytest.raises(ValueError, match=r"brush must be one of 'blocks', 'rows', 'columns'"):
        expand_brush(mask, "diagonal")
