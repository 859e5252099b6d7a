"""The window of a head the canvas shows of a design held as runs, and what Python sends for it.

A head past the dense grid's size (16,384^2 blocks is 268M cells) is never sent whole: the
canvas asks for the window it shows (the visible blocks and a margin for panning) at the
detail of its zoom, ``step`` blocks a side per picture cell (a power of 2; 1 is full detail),
with the trigger ``view``; ``window_payload`` sends that window alone: its blocks at step 1, the
share of active blocks per ``step x step`` bucket when zoomed out (``density``), computed from
the window rows' runs (``designer.runs_view``); once the design's segmentation is done, its
blocks at step 1 are coloured by their tiles as a dense head's are. Panning inside the window
costs nothing; past it, or at a finer zoom, the canvas asks again. Zoomed out, the canvas's
rectangle, row and column strokes paint every block of the buckets they cover.

>>> whole_head(2048, 2048)
View(row0=0, col0=0, rows=2048, cols=2048, step=2)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from designer.layout import Layout
from designer.runs_view import check_window, window_blocks, window_density, window_tile_maps
from designer.segment_runs import RunTileMaps
from designer.segment_stats import UNTILED
from designer.validate import check_int, check_keys
from ui.block_zoom_ui import window_partials
from ui.canvas.payload import deflated_base64, head_payload

#: Picture cells a side of a whole head's first picture (a step of blocks each).
MAX_PICTURE_SIDE = 1024
#: Most picture cells one window may hold: 4M (512 KiB of bits at full detail).
MAX_WINDOW_CELLS = 1 << 22
#: Coarsest step: a 16,384^2-block head at 16 picture cells a side.
MAX_STEP = 1 << 10


@dataclass(frozen=True)
class View:
    """A window of a head: ``rows x cols`` blocks from ``(row0, col0)``, ``step`` blocks a
    side per picture cell."""

    row0: int
    col0: int
    rows: int
    cols: int
    step: int

    @property
    def picture_cells(self) -> int:
        return -(-self.rows // self.step) * -(-self.cols // self.step)


def whole_head(n_rows: int, n_cols: int) -> View:
    """The whole head at the finest power-of-2 step within ``MAX_PICTURE_SIDE`` a side."""
    step = 1
    while max(n_rows, n_cols) > step * MAX_PICTURE_SIDE:
        step *= 2
    return View(0, 0, n_rows, n_cols, step)


def read_view(value: Any, shape: tuple[int, int, int]) -> tuple[int, View]:
    """``(head, view)`` from the canvas's ``view`` trigger for a layout of ``shape``; raises
    ``ValueError``/``TypeError`` naming what is wrong (a window outside the head, a step not a
    power of 2, more than ``MAX_WINDOW_CELLS`` picture cells)."""
    check_keys("canvas view", value, ("head", "row0", "col0", "rows", "cols", "step"))
    fields = ("head", "row0", "col0", "rows", "cols")
    head, row0, col0, rows, cols = (check_int(f"view {k}", value[k], low=0) for k in fields)
    check_window(shape, head, row0, col0, rows, cols)
    step = check_int("view step", value["step"], low=1, high=MAX_STEP)
    if step & (step - 1):
        raise ValueError(f"view step must be a power of 2, got {step}")
    view = View(row0, col0, rows, cols, step)
    if view.picture_cells > MAX_WINDOW_CELLS:
        raise ValueError(
            f"view must hold at most {MAX_WINDOW_CELLS:,} picture cells, got "
            f"{view.picture_cells:,} ({rows} x {cols} blocks at step {step})"
        )
    return head, view


def window_payload(
    layout: Layout, head: int, view: View, tiles: RunTileMaps | None = None
) -> dict[str, Any]:
    """The canvas's data for ``view`` of ``head`` (a layout held as runs): ``head_payload`` of
    the window's picture cells (at step 1 its blocks, coloured by their tiles when the
    segmentation's ``tiles`` are given, else drawn untiled; zoomed out, the buckets holding any
    active block) with ``density`` (zoomed out: each bucket's share of active blocks, one byte,
    0 only for none, deflated, base64), ``window`` and the head's size."""
    runs, where = layout.runs, (head, view.row0, view.col0, view.rows, view.cols)
    density = None
    if view.step == 1 and tiles is not None:
        widths, odd = window_tile_maps(runs, tiles, *where)
        cells = widths > 0
    else:
        if view.step == 1:
            cells = window_blocks(runs, *where)
        else:
            share = window_density(runs, *where, view.step)
            cells = share > 0
            density = np.where(cells, np.maximum(1, np.rint(share * 255)), 0).astype(np.uint8)
        widths, odd = cells * np.uint16(UNTILED), np.zeros(cells.shape, dtype=bool)
    partial = window_partials(layout, *where, view.step)
    payload = head_payload(cells, widths, odd, partial)
    payload["density"] = "" if density is None else deflated_base64(density.tobytes())
    payload["window"] = {
        "row0": view.row0, "col0": view.col0, "rows": view.rows, "cols": view.cols,
        "step": view.step,
    }  # fmt: skip
    payload["full_rows"], payload["full_cols"] = layout.n_q_blocks, layout.n_k_blocks
    payload["max_window_cells"] = MAX_WINDOW_CELLS
    return payload
