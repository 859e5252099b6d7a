"""Row runs of a block layout as plain arrays, checked once for the functions that read them.

A ``[H, M, N]`` layout is held by its maximal runs of active key blocks over the ``H·M`` block
rows (row ``r = h·M + m``): ``row_ptr`` int64 ``[H·M + 1]`` (row ``r``'s runs are
``row_ptr[r]:row_ptr[r + 1]``), and int32 ``starts`` / ``stops`` ``[R]`` (a run covers key
blocks ``start <= n < stop``). Within a row runs are sorted, inside ``[0, N]``, and neither
overlap nor touch, so equal layouts have equal arrays. Memory is the runs', never the grid's.

Any object with ``shape``, ``row_ptr``, ``starts`` and ``stops`` attributes (torch tensors or
numpy arrays) is taken; ``check_runs`` turns it into ``RunArrays`` of numpy arrays.

>>> runs = check_runs(RunArrays((1, 2, 4), np.array([0, 1, 3]), np.array([0, 0, 3]),
...                             np.array([2, 1, 4])))
>>> run_offsets(runs).tolist(), row_counts(runs).tolist()
([0, 2, 3, 4], [2, 2])
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from designer.validate import check_int


class RunArrays(NamedTuple):
    """Checked row runs: ``shape`` ``(H, M, N)``, ``row_ptr`` int64 ``[H·M + 1]``, ``starts``
    and ``stops`` int32 ``[R]`` (numpy, C-contiguous)."""

    shape: tuple[int, int, int]
    row_ptr: np.ndarray
    starts: np.ndarray
    stops: np.ndarray


def check_runs(runs: Any) -> RunArrays:
    """``runs`` (an object with ``shape``, ``row_ptr``, ``starts`` and ``stops``) as checked
    numpy arrays; raises ``TypeError`` / ``ValueError`` naming what is wrong. O(runs)."""
    missing = [name for name in RunArrays._fields if not hasattr(runs, name)]
    if missing:
        raise TypeError(
            f"runs must have shape, row_ptr, starts and stops attributes; "
            f"{type(runs).__name__} lacks {', '.join(missing)}"
        )
    shape = tuple(runs.shape)
    if len(shape) != 3:
        raise ValueError(f"runs shape must be (H, M, N), got {shape}")
    n_heads, n_rows, n_cols = (check_int(f"runs shape[{i}]", v, low=0) for i, v in enumerate(shape))
    row_ptr = _integer_vector("runs row_ptr", runs.row_ptr, np.int64)
    starts = _integer_vector("runs starts", runs.starts, np.int32)
    stops = _integer_vector("runs stops", runs.stops, np.int32)
    if row_ptr.size != n_heads * n_rows + 1:
        raise ValueError(
            f"runs row_ptr must have H·M + 1 = {n_heads * n_rows + 1} entries, got {row_ptr.size}"
        )
    if row_ptr[0] != 0 or (row_ptr.size > 1 and (np.diff(row_ptr) < 0).any()):
        raise ValueError("runs row_ptr must start at 0 and never decrease")
    if starts.size != row_ptr[-1] or stops.size != row_ptr[-1]:
        raise ValueError(
            f"runs starts and stops must have row_ptr[-1] = {int(row_ptr[-1])} entries, got "
            f"{starts.size} and {stops.size}"
        )
    if starts.size:
        if starts.min() < 0 or stops.max() > n_cols or (starts >= stops).any():
            raise ValueError(f"every run must satisfy 0 <= start < stop <= N = {n_cols}")
        same_row = np.diff(np.repeat(np.arange(n_heads * n_rows), np.diff(row_ptr))) == 0
        if (stops[:-1][same_row] >= starts[1:][same_row]).any():
            raise ValueError("runs of a row must be sorted, disjoint and not touching")
    return RunArrays((n_heads, n_rows, n_cols), row_ptr, starts, stops)


def run_offsets(runs: RunArrays) -> np.ndarray:
    """int64 ``[R + 1]``: the rank of each run's first block in ``layout.nonzero()`` order
    (the last entry is the number of active blocks)."""
    offsets = np.zeros(runs.starts.size + 1, dtype=np.int64)
    np.cumsum(runs.stops.astype(np.int64) - runs.starts, out=offsets[1:])
    return offsets


def row_counts(runs: RunArrays) -> np.ndarray:
    """int64 ``[H·M]``: active blocks per block row."""
    return np.diff(run_offsets(runs)[runs.row_ptr])


def _integer_vector(name: str, value: Any, dtype: type) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iu" or value.ndim != 1:
        kind = getattr(value, "dtype", type(value).__name__)
        raise TypeError(f"{name} must be a 1-D integer tensor or array, got {kind}")
    info = np.iinfo(dtype)
    if value.size and (value.min() < info.min or value.max() > info.max):
        raise ValueError(f"{name} must fit in {np.dtype(dtype).name}")
    return np.ascontiguousarray(value, dtype=dtype)


def dense_blocks(runs: RunArrays, max_cells: int) -> torch.Tensor:
    """The bool ``[H, M, N]`` grid of ``runs``, for the few uses that need every cell (a dense
    reference); refuses grids above ``max_cells`` cells."""
    n_heads, n_rows, n_cols = runs.shape
    cells = n_heads * n_rows * n_cols
    if cells > max_cells:
        raise ValueError(
            f"a dense copy of this {list(runs.shape)} layout would hold {cells:,} cells; at most "
            f"{max_cells:,} are allowed"
        )
    offsets = run_offsets(runs)
    lengths = np.diff(offsets)
    row_of_run = np.repeat(np.arange(n_heads * n_rows, dtype=np.int64), np.diff(runs.row_ptr))
    first = row_of_run * n_cols + runs.starts
    flat = np.repeat(first - offsets[:-1], lengths) + np.arange(offsets[-1], dtype=np.int64)
    grid = np.zeros(cells, dtype=bool)
    grid[flat] = True
    return torch.from_numpy(grid.reshape(runs.shape))


def run_keys(runs: RunArrays) -> np.ndarray:
    """int64 ``[R]``: each run's ``row·(N + 1) + start``, sorted over all runs (what
    ``contains`` searches)."""
    rows = np.repeat(np.arange(len(runs.row_ptr) - 1, dtype=np.int64), np.diff(runs.row_ptr))
    return rows * (runs.shape[2] + 1) + runs.starts


def contains(
    runs: RunArrays, keys: np.ndarray, head: np.ndarray, q_block: np.ndarray, k_block: np.ndarray
) -> np.ndarray:
    """Bool: whether each block ``(head, q_block, k_block)`` (integer arrays that broadcast,
    inside the shape) is active; ``keys`` is ``run_keys(runs)``. A binary search per block.

    >>> runs = check_runs(RunArrays((1, 1, 4), np.array([0, 1]), np.array([1]), np.array([3])))
    >>> contains(runs, run_keys(runs), np.array(0), np.array(0), np.arange(4)).tolist()
    [False, True, True, False]
    """
    head, q_block, k_block = np.broadcast_arrays(head, q_block, k_block)
    row = head.astype(np.int64) * runs.shape[1] + q_block
    wanted = row * (runs.shape[2] + 1) + k_block
    at = np.searchsorted(keys, wanted, side="right") - 1
    run = np.maximum(at, 0)
    inside = (at >= runs.row_ptr[row]) & (k_block < runs.stops[run] if len(keys) else False)
    return inside & (at >= 0)


def repeat_heads(runs: RunArrays, n_heads: int) -> RunArrays:
    """A one-head ``runs`` repeated as ``n_heads`` equal heads."""
    if runs.shape[0] != 1:
        raise ValueError(f"only a one-head layout repeats over heads, got {runs.shape[0]} heads")
    row_ptr = runs.row_ptr[1:] + (np.arange(n_heads, dtype=np.int64) * runs.row_ptr[-1])[:, None]
    return RunArrays(
        (n_heads, *runs.shape[1:]),
        np.concatenate(([0], row_ptr.reshape(-1))),
        np.tile(runs.starts, n_heads),
        np.tile(runs.stops, n_heads),
    )
