"""``sdd_segment`` of a layout held by its row runs, without its ``[H, M, N]`` grid.

``sdd_segment_runs(runs, start_width, mode=...)`` returns exactly what
``designer.segment.sdd_segment`` returns for the same layout (same widths, rows, row order and
``orig_idx``, both modes), in time and memory that grow with the active blocks: the scan
(``designer.segment_runs_scan``) keeps its state per active block and per key column, so a
32-head design of 16,384² blocks segments as fast as its blocks allow. The runs are the arrays
``designer.run_arrays`` describes. Views need less than the rows: ``tile_counts_runs`` gives
the tiles per head and width, ``tile_maps_runs`` the tile of every block, one byte each.

>>> runs = RunArrays((1, 3, 3), np.array([0, 1, 2, 3]), np.zeros(3, np.int32),
...                  np.full(3, 3, np.int32))
>>> [(w, rows.shape) for w, rows in sdd_segment_runs(runs, 2)]
[(2, torch.Size([4, 4])), (1, torch.Size([5, 4]))]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from designer.run_arrays import RunArrays, check_runs, run_offsets
from designer.segment import (
    MODES,
    Segments,
    on_scan_threads,
    segments_from_scan,
    width_chain,
)
from designer.segment_runs_scan import segment_run_heads, write_tile_codes
from designer.validate import check_choice, check_int

#: Below this many active blocks a layout is segmented on the calling thread.
_THREADED_MIN_BLOCKS = 1 << 14
#: Ranks in a head are int32.
_MAX_HEAD_BLOCKS = (1 << 31) - 1
#: Active blocks whose rows ``tile_maps_runs`` holds at once (12 bytes each: 48 MiB).
_MAP_GROUP_BLOCKS = 1 << 22
#: The odd-tile flag in a ``RunTileMaps`` code.
ODD_CODE = 128

__all__ = ["RunArrays", "RunTileMaps", "sdd_segment_runs", "tile_counts_runs", "tile_maps_runs"]


def sdd_segment_runs(runs: Any, start_width: int, *, mode: str = "safe") -> Segments:
    """``designer.segment.sdd_segment`` of the layout that ``runs`` holds.

    Args:
        runs: an object with ``shape``, ``row_ptr``, ``starts`` and ``stops`` (see
            ``designer.run_arrays``), e.g. a ``RunArrays``; checked, never modified.
        start_width, mode: as for ``sdd_segment``.

    Returns:
        ``sdd_segment``'s ``[(width, int64 rows [k·width², 4] of (head, row, col, orig_idx))]``.
    """
    scan = _Scan(runs, start_width, mode)
    if scan.empty:
        return []
    return segments_from_scan(scan.per_head, scan.widths, scan.safe, scan.rows)


def tile_counts_runs(runs: Any, start_width: int, *, mode: str = "safe") -> dict[int, np.ndarray]:
    """How many tiles of each width ``sdd_segment_runs`` cuts from each head, without its rows:
    ``{width: int64 [H]}`` for the widths that cut any.

    Statistics need only these counts, and the rows are 32 bytes a block (1.1 GB for 32 heads of
    1M tokens at 0.4 % density); this scan's memory is one head's blocks per thread. In
    ``"deepspeed"`` mode phantom blocks count, as they do in the rows.

    >>> runs = RunArrays((1, 3, 3), np.array([0, 1, 2, 3]), np.zeros(3, np.int32),
    ...                  np.full(3, 3, np.int32))
    >>> {w: n.tolist() for w, n in tile_counts_runs(runs, 2).items()}
    {2: [1], 1: [5]}
    """
    scan = _Scan(runs, start_width, mode)
    if scan.empty:
        return {}
    _, counts = scan.rows(np.zeros(scan.per_head.size, dtype=np.int64))
    return {
        width: counts[:, p] // (width * width)
        for p, width in enumerate(scan.widths.tolist())
        if counts[:, p].any()
    }


@dataclass(frozen=True, eq=False)
class RunTileMaps:
    """The tile of every active block of a layout held as runs, one byte a block.

    ``codes`` uint8 ``[nnz]`` in ``layout.nonzero()`` order: 0 for a block in no tile, ``p + 1``
    for one in a tile of ``widths[p]``, plus ``ODD_CODE`` when that tile is an odd one of its
    width in its head (``segment_stats.head_tile_maps``' ``odd``). ``offsets`` is
    ``run_offsets`` (the rank of each run's first block), so a window's blocks find their codes
    from its runs alone; ``tiles`` int64 ``[H, len(widths)]`` counts each head's tiles per width
    and ``active`` int64 ``[H]`` its blocks. Arrays are read-only.
    """

    widths: np.ndarray
    codes: np.ndarray
    offsets: np.ndarray
    tiles: np.ndarray
    active: np.ndarray

    @property
    def nbytes(self) -> int:
        arrays = (self.widths, self.codes, self.offsets, self.tiles, self.active)
        return sum(a.nbytes for a in arrays)

    def totals(self) -> dict[int, int]:
        """``{width: tiles}`` over every head, for the widths that cut any."""
        total = self.tiles.sum(axis=0)
        return {int(w): int(n) for w, n in zip(self.widths, total, strict=True) if n}

    def head_tiles(self, head: int) -> list[tuple[int, int]]:
        """``(width, tiles)`` of one head, widest first, for the widths that cut any."""
        return [(int(w), int(n)) for w, n in zip(self.widths, self.tiles[head], strict=True) if n]


def tile_maps_runs(runs: Any, start_width: int) -> RunTileMaps:
    """The tile of every active block of ``sdd_segment_runs(runs, start_width)`` (safe mode,
    as views draw it), without its int64 rows: the scan's compact rows are held for
    ``_MAP_GROUP_BLOCKS`` blocks of heads at a time, so memory is one byte a block beyond that.

    >>> runs = RunArrays((1, 3, 3), np.array([0, 1, 2, 3]), np.zeros(3, np.int32),
    ...                  np.full(3, 3, np.int32))
    >>> maps = tile_maps_runs(runs, 2)
    >>> maps.codes.tolist(), maps.head_tiles(0)
    ([1, 1, 2, 1, 1, 130, 2, 130, 2], [(2, 1), (1, 5)])
    """
    scan = _Scan(runs, start_width, "safe")
    offsets = run_offsets(scan.runs)
    codes = np.zeros(int(offsets[-1]), dtype=np.uint8)
    tiles = np.zeros((scan.n_heads, scan.widths.size), dtype=np.int64)
    active = np.diff(offsets[scan.runs.row_ptr[:: max(scan.n_rows, 1)]])
    if not scan.empty:
        first_rank = np.concatenate(([0], np.cumsum(active)[:-1]))
        for heads in _head_groups(active, _MAP_GROUP_BLOCKS):
            capacity = np.zeros(scan.n_heads, dtype=np.int64)
            capacity[heads] = active[heads]
            rows, counts = scan.rows(capacity, heads)
            slot = np.concatenate(([0], np.cumsum(capacity)))
            for h in heads.tolist():
                write_tile_codes(rows[slot[h] : slot[h + 1]], counts[h], scan.widths,
                                 first_rank[h], ODD_CODE, codes)  # fmt: skip
            tiles[heads] = counts[heads] // (scan.widths * scan.widths)
    for array in (codes, offsets, tiles, active):
        array.flags.writeable = False
    return RunTileMaps(scan.widths, codes, offsets, tiles, active)


def _head_groups(active: np.ndarray, max_blocks: int) -> list[np.ndarray]:
    """The heads in groups of consecutive heads holding at most ``max_blocks`` blocks each (a
    head larger than that on its own)."""
    groups, first, held = [], 0, 0
    for h, n in enumerate(active.tolist()):
        if h > first and held + n > max_blocks:
            groups.append(np.arange(first, h))
            first, held = h, 0
        held += n
    groups.append(np.arange(first, active.size))
    return groups


class _Scan:
    """The checked arguments of a segmentation on runs and its scan, for either result."""

    def __init__(self, runs: Any, start_width: int, mode: str) -> None:
        self.runs = runs = check_runs(runs)
        start_width = check_int("start_width", start_width, low=0)
        self.safe = check_choice("mode", mode, MODES) == "safe"
        self.n_heads, self.n_rows, self.n_cols = runs.shape
        self.widths = width_chain(start_width, min(self.n_rows, self.n_cols))
        self.empty = not self.widths.size or not runs.starts.size
        if self.empty:
            return
        self.per_head = np.diff(run_offsets(runs)[runs.row_ptr[:: max(self.n_rows, 1)]])
        if self.per_head.max() > _MAX_HEAD_BLOCKS:
            raise ValueError(
                f"a head may hold at most {_MAX_HEAD_BLOCKS:,} active blocks to be segmented, "
                f"got {int(self.per_head.max()):,}"
            )
        self.threaded = int(self.per_head.sum()) >= _THREADED_MIN_BLOCKS

    def rows(
        self, capacity: np.ndarray, heads: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The scan of ``heads`` (all by default) with room for ``capacity`` rows a head (none:
        it only counts)."""
        runs, widths = self.runs, self.widths
        heads = np.arange(self.n_heads) if heads is None else heads
        rows = np.empty((int(capacity.sum()), 3), dtype=np.int32)
        counts = np.zeros((self.n_heads, widths.size), dtype=np.int64)
        row_offsets = np.concatenate(([0], np.cumsum(capacity)))

        def run(share: np.ndarray) -> None:
            segment_run_heads(runs.row_ptr, runs.starts, runs.stops, self.n_rows, self.n_cols,
                              heads[share], widths, self.safe, row_offsets, rows,
                              counts)  # fmt: skip

        on_scan_threads(heads.size, run, threaded=self.threaded)
        return rows, counts
