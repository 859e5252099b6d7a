"""A window of one head of a layout held as row runs: its blocks, or their density per bucket.

What a viewer shows of a head too large to send whole (a 16,384^2-block head is 268M cells):
``window_blocks`` gives the bool blocks of a ``rows x cols`` window at full detail, and
``window_density`` the share of active blocks in each ``step x step`` bucket of it (the picture
when zoomed out, a pixel a bucket), and ``window_tile_maps`` the width of each block's tile
(from the segmentation's ``RunTileMaps``). All read only the runs of the window's rows: time and
memory follow those runs plus the output, never the head's grid.

The density of a bucket row comes from each run's coverage function ``F(x) = clip(x - start,
0, stop - start)`` (blocks of the run left of ``x``), summed over runs at the bucket edges
``x = b·step``: the runs starting (stopping) at or before an edge add ``x·count - sum`` of their
starts (stops), so one histogram of starts and one of stops per bucket row gives every bucket.

>>> import torch
>>> runs = BlockRuns.from_dense(torch.tensor([[[1, 1, 0, 0], [0, 1, 1, 1]]], dtype=torch.bool))
>>> window_blocks(runs, 0, 0, 1, 2, 3).astype(int).tolist()
[[1, 0, 0], [1, 1, 1]]
>>> window_density(runs, 0, 0, 0, 2, 4, 2).tolist()
[[0.75, 0.5]]
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from designer.block_runs import BlockRuns
from designer.segment_runs import ODD_CODE, RunTileMaps
from designer.segment_stats import UNTILED
from designer.validate import check_int


class WindowRuns(NamedTuple):
    """The runs of a window, clipped to it: local row, first and past-last local column, and
    the index of each among the layout's runs."""

    rows: np.ndarray
    starts: np.ndarray
    stops: np.ndarray
    index: np.ndarray


def check_window(
    shape: tuple[int, int, int], head: int, row0: int, col0: int, rows: int, cols: int
) -> None:
    """Raise ``ValueError`` naming the first window coordinate outside a layout of ``shape``."""
    n_heads, n_rows, n_cols = shape
    check_int("head", head, low=0, high=n_heads - 1)
    check_int("window row0", row0, low=0, high=n_rows - 1)
    check_int("window col0", col0, low=0, high=n_cols - 1)
    check_int("window rows", rows, low=1, high=n_rows - row0)
    check_int("window cols", cols, low=1, high=n_cols - col0)


def window_runs(
    runs: BlockRuns, head: int, row0: int, col0: int, rows: int, cols: int
) -> WindowRuns:
    """The runs of head ``head`` crossing the window, clipped to it, in local coordinates."""
    check_window(runs.shape, head, row0, col0, rows, cols)
    first_row = head * runs.shape[1] + row0
    ptr = runs.row_ptr.numpy()[first_row : first_row + rows + 1]
    local_rows = np.repeat(np.arange(rows, dtype=np.int64), np.diff(ptr))
    starts = runs.starts.numpy()[ptr[0] : ptr[-1]].astype(np.int64) - col0
    stops = runs.stops.numpy()[ptr[0] : ptr[-1]].astype(np.int64) - col0
    np.clip(starts, 0, cols, out=starts)
    np.clip(stops, 0, cols, out=stops)
    keep = np.flatnonzero(starts < stops)
    return WindowRuns(local_rows[keep], starts[keep], stops[keep], ptr[0] + keep)


def window_blocks(
    runs: BlockRuns, head: int, row0: int, col0: int, rows: int, cols: int
) -> np.ndarray:
    """Bool ``[rows, cols]``: the blocks of head ``head`` in the window at ``(row0, col0)``."""
    found = window_runs(runs, head, row0, col0, rows, cols)
    edges = np.zeros((rows, cols + 1), dtype=np.int8)
    edges[found.rows, found.starts] = 1  # runs never touch: no edge is written twice
    edges[found.rows, found.stops] = -1
    return np.cumsum(edges, axis=1, dtype=np.int8)[:, :cols].astype(bool)


def window_density(
    runs: BlockRuns, head: int, row0: int, col0: int, rows: int, cols: int, step: int
) -> np.ndarray:
    """Float32 ``[ceil(rows / step), ceil(cols / step)]``: the share of active blocks in each
    ``step x step`` bucket of the window (edge buckets: of their blocks inside it)."""
    step = check_int("window step", step, low=1)
    found = window_runs(runs, head, row0, col0, rows, cols)
    bucket_rows, bucket_cols = -(-rows // step), -(-cols // step)
    edges = bucket_cols + 1
    bucket_row = found.rows // step
    coverage = np.zeros((bucket_rows, edges))
    for ends, sign in ((found.starts, 1), (found.stops, -1)):
        at = bucket_row * edges - (-ends // step)  # the first edge at or right of each end
        count = np.bincount(at, minlength=bucket_rows * edges).reshape(bucket_rows, edges)
        total = np.bincount(at, ends, minlength=bucket_rows * edges).reshape(bucket_rows, edges)
        x = np.arange(edges) * step
        coverage += sign * (x * np.cumsum(count, axis=1) - np.cumsum(total, axis=1))
    active = np.diff(coverage, axis=1)
    inside_rows = np.minimum(step, rows - np.arange(bucket_rows) * step)
    inside_cols = np.minimum(step, cols - np.arange(bucket_cols) * step)
    return (active / np.outer(inside_rows, inside_cols)).astype(np.float32)


def window_tile_maps(
    runs: BlockRuns, maps: RunTileMaps, head: int, row0: int, col0: int, rows: int, cols: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(widths uint16, odd bool)`` ``[rows, cols]`` of the window, as
    ``segment_stats.head_tile_maps`` gives them for the whole head: each block's tile width
    (0 where inactive, ``UNTILED`` where in no tile) and whether its tile is an odd one, from
    ``maps`` (``tile_maps_runs`` of these runs)."""
    if maps.codes.size != runs.nnz or maps.offsets.size != runs.n_runs + 1:
        raise ValueError(
            f"maps must be of these runs ({runs.nnz:,} blocks in {runs.n_runs:,} runs), got "
            f"{maps.codes.size:,} blocks in {maps.offsets.size - 1:,} runs"
        )
    found = window_runs(runs, head, row0, col0, rows, cols)
    lengths = found.stops - found.starts
    run_of = np.repeat(np.arange(lengths.size), lengths)
    within = np.arange(run_of.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    skipped = found.starts + col0 - runs.starts.numpy()[found.index]  # blocks left of the window
    codes = maps.codes[(maps.offsets[found.index] + skipped)[run_of] + within]
    width_of_code = np.array([UNTILED, *maps.widths.tolist()], dtype=np.uint16)
    flat = found.rows[run_of] * cols + found.starts[run_of] + within
    widths = np.zeros(rows * cols, dtype=np.uint16)
    widths[flat] = width_of_code[codes & (ODD_CODE - 1)]
    odd = np.zeros(rows * cols, dtype=bool)
    odd[flat] = codes >= ODD_CODE
    return widths.reshape(rows, cols), odd.reshape(rows, cols)
