"""Numbers about a segmentation: the tiles it makes, what they cover, what the SDD computes.

Pure functions of a ``Layout`` and ``sdd_segment``'s output, returning small frozen dataclasses
(``dataclasses.asdict`` gives a table row). ``unsegmented_stats`` gives the same numbers for
one 1 x 1 tile per block, so a view can show what segmentation buys; ``deepspeed_defects`` says
whether DeepSpeed's own segmentation of a layout emits phantom or duplicate blocks.

FLOPs count the SDD's QKᵀ per batch element: a tile of width ``w`` at block size ``b`` is a
``(w·b) x (w·b)`` product over the head dimension ``D``, ``2·(w·b)²·D`` FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from designer.layout import Layout
from designer.segment import Segments, deepspeed_repeats, scan_head, sdd_segment
from designer.segment_runs import tile_counts_runs
from designer.validate import check_int

Cell = tuple[int, int, int]
#: The width map's mark for an active block in no tile (above any real width, so max-pooling
#: keeps it visible).
UNTILED = np.iinfo(np.uint16).max
#: Rows whose map indices ``head_tile_maps`` works out at once (16 bytes each, for two arrays).
_MAP_CHUNK_ROWS = 1 << 20


@dataclass(frozen=True)
class WidthStats:
    """The tiles of one width (one SDD launch).

    ``blocks`` counts the block entries the tiles hold (``tiles · width²``), ``coverage`` their
    share of the layout's active blocks, ``flops`` the launch's QKᵀ FLOPs per batch element.
    """

    width: int
    tiles: int
    blocks: int
    coverage: float
    tile_tokens: int
    flops: int


@dataclass(frozen=True)
class SegmentStats:
    """Totals of a segmentation, and one ``WidthStats`` per width, widest first.

    ``coverage`` is 1.0 when every active block is in exactly one tile; DeepSpeed's phantom and
    duplicate blocks push it above 1. ``dense_flops`` is QKᵀ over every block, for comparison.
    """

    block_size: int
    head_dim: int
    active_blocks: int
    tiles: int
    blocks: int
    coverage: float
    mean_tile_blocks: float
    mean_tile_tokens2: float
    flops: int
    dense_flops: int
    widths: tuple[WidthStats, ...]


@dataclass(frozen=True)
class DeepSpeedDefects:
    """What DeepSpeed's segmentation of a layout at ``start_width`` gets wrong.

    ``phantom_rows`` entries name a block absent from the layout (DeepSpeed computes it and
    writes it over packed block 0); ``duplicate_rows`` entries repeat an active block emitted
    before. The cell tuples list each such ``(head, row, col)`` once, sorted.
    """

    start_width: int
    phantom_rows: int
    duplicate_rows: int
    phantom_cells: tuple[Cell, ...]
    duplicate_cells: tuple[Cell, ...]

    @property
    def found(self) -> bool:
        return bool(self.phantom_rows or self.duplicate_rows)

    @property
    def heads(self) -> tuple[int, ...]:
        return tuple(sorted({cell[0] for cell in self.phantom_cells + self.duplicate_cells}))


def segment_stats(layout: Layout, segments: Segments, *, head_dim: int) -> SegmentStats:
    """Tiles, coverage, mean tile area and SDD FLOPs of ``segments`` (``sdd_segment(layout, …)``).

    >>> layout = Layout(torch.ones(1, 4, 4, dtype=torch.bool), 64)
    >>> stats = segment_stats(layout, sdd_segment(layout, 2), head_dim=64)
    >>> stats.tiles, stats.mean_tile_blocks, stats.flops == 2 * 256**2 * 64
    (4, 4.0, True)
    """
    _check_layout(layout)
    active = np.count_nonzero(layout.to_numpy())  # numpy: torch's threads would spin after it
    tiles: dict[int, int] = {}
    for width, rows in _checked_segments(segments):
        tiles[width] = tiles.get(width, 0) + len(rows) // (width * width)
    return tile_count_stats(layout, tiles, active, head_dim=head_dim)


def run_segment_stats(layout: Layout, start_width: int, *, head_dim: int) -> SegmentStats:
    """``segment_stats`` of ``layout`` segmented at ``start_width``, from its tile counts on
    runs alone (``tile_counts_runs``): no segmentation rows and no grid are built, so a
    long-context layout is measured in memory that follows a head's blocks.

    >>> run_segment_stats(Layout(torch.ones(1, 4, 4, dtype=torch.bool), 64), 4, head_dim=64).tiles
    1
    """
    _check_layout(layout)
    counts = tile_counts_runs(layout.to_runs(), start_width)
    tiles = {width: int(per_head.sum()) for width, per_head in counts.items()}
    return tile_count_stats(layout, tiles, layout.nnz, head_dim=head_dim)


def tile_count_stats(
    layout: Layout, tiles: dict[int, int], active: int, *, head_dim: int
) -> SegmentStats:
    """The same numbers from the tile count of each width and the active block count, for
    callers that segment head by head and add the counts up.

    >>> layout = Layout(torch.ones(1, 4, 4, dtype=torch.bool), 64)
    >>> tile_count_stats(layout, {2: 4}, 16, head_dim=64).coverage
    1.0
    """
    _check_layout(layout)
    head_dim = check_int("head_dim", head_dim, low=1)
    b = layout.block_size
    rows = []
    for width in sorted(tiles, reverse=True):
        tokens = width * b
        rows.append(
            WidthStats(
                width=width,
                tiles=tiles[width],
                blocks=tiles[width] * width * width,
                coverage=_share(tiles[width] * width * width, active),
                tile_tokens=tokens,
                flops=2 * tokens * tokens * head_dim * tiles[width],
            )
        )
    n_tiles = sum(row.tiles for row in rows)
    blocks = sum(row.blocks for row in rows)
    mean_tile_blocks = _share(blocks, n_tiles)
    return SegmentStats(
        block_size=b,
        head_dim=head_dim,
        active_blocks=active,
        tiles=n_tiles,
        blocks=blocks,
        coverage=_share(blocks, active),
        mean_tile_blocks=mean_tile_blocks,
        mean_tile_tokens2=mean_tile_blocks * b * b,
        flops=sum(row.flops for row in rows),
        dense_flops=2 * layout.n_heads * layout.seq_len_q * layout.seq_len_k * head_dim,
        widths=tuple(rows),
    )


def unsegmented_stats(layout: Layout, *, head_dim: int) -> SegmentStats:
    """The same numbers with every active block its own 1 x 1 tile (start width 1)."""
    return segment_stats(layout, sdd_segment(layout, 1), head_dim=head_dim)


def deepspeed_defects(layout: Layout, start_width: int) -> DeepSpeedDefects:
    """Phantom and duplicate blocks in DeepSpeed's segmentation of ``layout`` at ``start_width``.

    >>> blocks = torch.tensor([[[0, 1, 1, 1], [1, 1, 1, 1], [1, 0, 1, 1]]])
    >>> deepspeed_defects(Layout(blocks, 32), 3).phantom_cells
    ((0, 0, 0),)
    """
    _check_layout(layout)
    start_width = check_int("start_width", start_width, low=0)
    repeats = deepspeed_repeats(layout, start_width).reshape(-1)
    found = np.flatnonzero(repeats)  # few: work on these cells only, not the whole grid
    present = layout.to_numpy().reshape(-1)[found].astype(bool)
    phantoms, copies = found[~present], found[present]
    return DeepSpeedDefects(
        start_width=start_width,
        phantom_rows=int(repeats[phantoms].sum()),
        duplicate_rows=int(repeats[copies].sum()),
        phantom_cells=_cells(phantoms, layout.shape),
        duplicate_cells=_cells(copies, layout.shape),
    )


def deepspeed_start_width(block_size: int) -> int:
    """DeepSpeed's default start width for a block size: 0 (no tiles at all) from block 256.

    >>> [deepspeed_start_width(b) for b in (8, 16, 32, 64, 128, 256)]
    [4, 2, 4, 2, 1, 0]
    """
    block_size = check_int("block_size", block_size, low=1)
    return (128 if block_size > 16 else 32) // block_size


def _check_layout(layout: Layout) -> None:
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a Layout, got {type(layout).__name__}")


def _checked_segments(segments: Segments) -> Segments:
    """``segments`` if it has ``sdd_segment``'s shape: ``(width, int [k·width², 4])`` pairs."""
    if not isinstance(segments, list):
        raise TypeError(f"segments must be sdd_segment's list, got {type(segments).__name__}")
    for i, item in enumerate(segments):
        if not (isinstance(item, tuple) and len(item) == 2):
            raise ValueError(f"segments[{i}] must be a (width, rows) pair, got {item!r}")
        width, rows = item
        check_int(f"segments[{i}] width", width, low=1)
        if not isinstance(rows, torch.Tensor) or rows.dim() != 2 or rows.shape[1] != 4:
            shape = list(rows.shape) if isinstance(rows, torch.Tensor) else type(rows).__name__
            raise ValueError(f"segments[{i}] rows must be a [k·width², 4] tensor, got {shape}")
        if len(rows) % (width * width):
            raise ValueError(
                f"segments[{i}] rows must be whole {width}x{width} tiles "
                f"(a multiple of {width * width} rows), got {len(rows)}"
            )
    return segments


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _cells(flat: np.ndarray, shape: tuple[int, int, int]) -> tuple[Cell, ...]:
    """The ``(head, row, col)`` of each flat index into ``shape`` (ascending: row-major)."""
    heads, rows, cols = np.unravel_index(flat, shape)
    return tuple(zip(heads.tolist(), rows.tolist(), cols.tolist(), strict=True))


def tile_maps(blocks: np.ndarray, segments: Segments) -> tuple[np.ndarray, np.ndarray]:
    """Per block: the width of its tile and whether its tile is an odd one.

    ``blocks`` is the ``[H, M, N]`` layout and ``segments`` its ``sdd_segment`` output:
    ``(width, rows)`` with rows ``(head, row, col, idx)`` in groups of ``width²``. Returns
    ``(width [H, M, N] uint16, odd [H, M, N] bool)``; width is 0 where inactive and ``UNTILED``
    where active but in no tile.
    """
    shape = blocks.shape
    n_heads, n_rows, n_cols = shape
    widths = (np.asarray(blocks).reshape(-1) != 0) * np.uint16(UNTILED)
    odd = np.zeros(n_heads * n_rows * n_cols, dtype=bool)
    for width, rows in segments:
        cells = rows.numpy() if isinstance(rows, torch.Tensor) else np.asarray(rows)
        flat = (cells[:, 0] * n_rows + cells[:, 1]) * n_cols + cells[:, 2]
        widths[flat] = width
        odd[flat] = (np.arange(len(cells)) // (width * width)) & 1
    return widths.reshape(shape), odd.reshape(shape)


def head_tile_maps(
    blocks: np.ndarray, start_width: int
) -> tuple[np.ndarray, np.ndarray, tuple[tuple[int, int], ...]]:
    """``tile_maps`` of one ``[M, N]`` head at ``start_width`` and its ``(width, tiles)``
    counts, widest first, from ``scan_head``'s compact rows (one head's memory: the maps, the
    rows, and indices for ``_MAP_CHUNK_ROWS`` rows at a time)."""
    n_cols = blocks.shape[1]
    widths = np.zeros(blocks.shape, dtype=np.uint16)
    widths[np.asarray(blocks) != 0] = UNTILED
    odd = np.zeros(blocks.shape, dtype=bool)
    flat_widths, flat_odd = widths.reshape(-1), odd.reshape(-1)
    tiles = []
    for width, rows in scan_head(blocks, start_width):
        for first in range(0, len(rows), _MAP_CHUNK_ROWS):
            chunk = rows[first : first + _MAP_CHUNK_ROWS]
            flat = chunk[:, 0].astype(np.int64) * n_cols + chunk[:, 1]
            flat_widths[flat] = width
            flat_odd[flat] = (np.arange(first, first + len(chunk)) // (width * width)) & 1
        tiles.append((width, len(rows) // (width * width)))
    return widths, odd, tuple(tiles)
