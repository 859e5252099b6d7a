"""From a plotly selection event on the editor to the blocks it covers.

Streamlit reports selections only for scatter-like traces, so the editor lays a transparent
``Scattergl`` of square markers over the picture of the head. Block ``(row, col)`` is centred at
``x = col, y = row``. Pure functions: a selection dict in, a ``[M, N]`` bool mask out.

Markers: one per block up to ``MAX_MARKERS_PER_SIDE`` blocks a side. Larger heads get one marker
per ``stride × stride`` group of blocks (256×256 blocks: 128×128 markers, stride 2), which keeps
the figure and the selection events small. Precision is not lost where it matters: a box or a
lasso selects exactly the blocks whose centres it encloses, from its geometry; only a click picks
the marker's whole group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from designer.edit import Cells, Rect, Region
from designer.validate import check_choice, check_int

#: The most selection markers on one side of the editor (128² = 16,384 markers at most).
MAX_MARKERS_PER_SIDE = 128
#: What a selection paints: the blocks it covers, or the whole rows or columns it touches.
BRUSHES = ("blocks", "rows", "columns")


@dataclass(frozen=True)
class MarkerGrid:
    """Where the editor's selection markers sit for a head of ``n_rows × n_cols`` blocks.

    >>> grid = MarkerGrid.for_shape(256, 200)
    >>> grid.stride, len(grid.rows())
    (2, 12800)
    """

    n_rows: int
    n_cols: int
    stride: int

    @classmethod
    def for_shape(
        cls, n_rows: int, n_cols: int, max_per_side: int = MAX_MARKERS_PER_SIDE
    ) -> MarkerGrid:
        n_rows = check_int("n_rows", n_rows, low=1)
        n_cols = check_int("n_cols", n_cols, low=1)
        max_per_side = check_int("max_per_side", max_per_side, low=1)
        return cls(n_rows, n_cols, -(-max(n_rows, n_cols) // max_per_side))

    def rows(self) -> np.ndarray:
        """First block row of each marker's group, one entry per marker (row-major)."""
        starts = np.arange(0, self.n_rows, self.stride)
        return np.repeat(starts, len(range(0, self.n_cols, self.stride)))

    def cols(self) -> np.ndarray:
        """First block column of each marker's group, one entry per marker (row-major)."""
        starts = np.arange(0, self.n_cols, self.stride)
        return np.tile(starts, len(range(0, self.n_rows, self.stride)))

    def centres(self) -> tuple[np.ndarray, np.ndarray]:
        """Marker ``(x, y)``: the centre of its group, clipped to the head."""
        rows, cols = self.rows(), self.cols()
        x = (cols + np.minimum(cols + self.stride, self.n_cols) - 1) / 2
        y = (rows + np.minimum(rows + self.stride, self.n_rows) - 1) / 2
        return x, y


def selected_blocks(selection: Mapping[str, Any], grid: MarkerGrid, head: int) -> np.ndarray:
    """The ``[n_rows, n_cols]`` bool mask of the blocks a selection covers.

    ``selection`` is Streamlit's ``event.selection``: ``box`` and ``lasso`` geometries (data
    coordinates) and clicked ``points`` with ``customdata = (head, row, col)``. A box selects the
    blocks whose centre lies inside or on its edge, a lasso those inside by the even-odd rule;
    points select their marker's group, unless a box or lasso is present (its points are already
    counted, exactly). Points of another head (a stale event) are ignored.
    """
    mask = np.zeros((grid.n_rows, grid.n_cols), dtype=bool)
    boxes = selection.get("box") or []
    lassos = selection.get("lasso") or []
    for box in boxes:
        mask |= _box_mask(box["x"], box["y"], grid)
    for lasso in lassos:
        mask |= _lasso_mask(lasso["x"], lasso["y"], grid)
    if boxes or lassos:
        return mask
    for point in selection.get("points") or []:
        cell = _point_cell(point)
        if cell is None or cell[0] != head:
            continue
        _, row, col = cell
        mask[row : row + grid.stride, col : col + grid.stride] = True
    return mask


def _point_cell(point: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """A clicked point's ``(head, row, col)``; rows of a binary-encoded customdata array reach
    the server as ``{"0": head, "1": row, "2": col}``, plain lists as lists."""
    data = point.get("customdata")
    if isinstance(data, Mapping):
        data = [data.get(str(i)) for i in range(3)]
    if not isinstance(data, Sequence) or len(data) < 3 or any(v is None for v in data[:3]):
        return None
    return int(data[0]), int(data[1]), int(data[2])


def expand_brush(mask: np.ndarray, brush: str) -> np.ndarray:
    """Grow a selection to the whole rows or columns it touches (``"blocks"``: as it is).

    >>> expand_brush(np.array([[0, 1], [0, 0]], dtype=bool), "rows").astype(int).tolist()
    [[1, 1], [0, 0]]
    """
    check_choice("brush", brush, BRUSHES)
    if brush == "rows":
        return np.broadcast_to(mask.any(axis=1, keepdims=True), mask.shape).copy()
    if brush == "columns":
        return np.broadcast_to(mask.any(axis=0, keepdims=True), mask.shape).copy()
    return mask


def mask_region(mask: np.ndarray) -> Region | None:
    """The smallest edit region for a ``[M, N]`` bool mask: a ``Rect`` when it is one, else
    ``Cells``; None when nothing is selected. A box over 256×256 blocks stays one small value.

    >>> mask_region(np.eye(2, dtype=bool))
    Cells(cells=((0, 0), (1, 1)))
    """
    rows, cols = np.nonzero(mask)
    if len(rows) == 0:
        return None
    row0, row1, col0, col1 = rows.min(), rows.max(), cols.min(), cols.max()
    if len(rows) == (row1 - row0 + 1) * (col1 - col0 + 1):
        return Rect(int(row0), int(col0), int(row1), int(col1))
    return Cells(tuple(zip(rows.tolist(), cols.tolist(), strict=True)))


def _box_mask(xs: Sequence[float], ys: Sequence[float], grid: MarkerGrid) -> np.ndarray:
    mask = np.zeros((grid.n_rows, grid.n_cols), dtype=bool)
    if len(xs) < 2 or len(ys) < 2:
        return mask
    col_lo, col_hi = _index_span(min(xs), max(xs), grid.n_cols)
    row_lo, row_hi = _index_span(min(ys), max(ys), grid.n_rows)
    mask[row_lo:row_hi, col_lo:col_hi] = True
    return mask


def _index_span(low: float, high: float, size: int) -> tuple[int, int]:
    """Indices ``i`` in ``[0, size)`` with ``low <= i <= high``, as a half-open range."""
    first = max(0, int(np.ceil(low)))
    last = min(size - 1, int(np.floor(high)))
    return (first, last + 1) if first <= last else (0, 0)


def _lasso_mask(xs: Sequence[float], ys: Sequence[float], grid: MarkerGrid) -> np.ndarray:
    """Even-odd rule, one scan line per block row: count polygon edges crossed to the left."""
    mask = np.zeros((grid.n_rows, grid.n_cols), dtype=bool)
    x = np.asarray(xs, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    if len(x) < 3 or len(x) != len(y):
        return mask
    x0, y0, x1, y1 = x, y, np.roll(x, -1), np.roll(y, -1)
    cols = np.arange(grid.n_cols)
    row_lo, row_hi = _index_span(y.min(), y.max(), grid.n_rows)
    for row in range(row_lo, row_hi):
        crosses = (y0 > row) != (y1 > row)
        if not crosses.any():
            continue
        a, b, c, d = x0[crosses], y0[crosses], x1[crosses], y1[crosses]
        cross_x = np.sort(a + (row - b) * (c - a) / (d - b))
        left_of_col = np.searchsorted(cross_x, cols, side="right")
        mask[row] = left_of_col % 2 == 1
    return mask
