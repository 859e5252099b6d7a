"""Host-side tables for the SDD pipeline: segments → group tables, CSR rows, heaviest-first order.

``sdd_segment`` returns, per width ``w``, ``k·w²`` rows ``(head, row, col, orig_idx)``: ``k``
groups one after the other, row-major inside a group. A group's sub-rows need not be contiguous
query blocks (nor its sub-columns contiguous key blocks), so the SDD kernel reads one row index per
sub-row and one column index per sub-column. ``group_table`` packs each group as one int32 entry
``[head, rows[0..w), cols[0..w), orig[0..w²)]`` and checks that the rows really form a
Cartesian product (a malformed segmentation would otherwise compute wrong blocks silently).

Everything here is pure torch on the CPU, so it is tested in CI.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from designer.design import default_start_width
from designer.run_arrays import RunArrays, run_offsets
from designer.segment import sdd_segment
from designer.segment_runs import sdd_segment_runs
from designer.validate import check_int

#: Square pieces one SDD CTA computes, largest first (each is a multiple of 16 for mma.sync).
PIECE_SIZES = (128, 64, 32, 16)


@dataclass(frozen=True)
class WidthTable:
    """The groups of one segment width: one SDD launch."""

    width: int
    piece: int  # tokens per side of one CTA's piece of a group tile
    groups: torch.Tensor  # int32 [n_groups, 1 + 2·width + width²]

    @property
    def n_groups(self) -> int:
        return self.groups.shape[0]

    def splits(self, block_size: int) -> int:
        """Pieces per side of one group's ``width·block_size`` tile."""
        return self.width * block_size // self.piece


@dataclass(frozen=True)
class SddTables:
    """Everything the three kernels read, on the CPU."""

    widths: list[WidthTable]
    row_ptr: torch.Tensor  # int32 [H·M + 1]: packed blocks of block row (h, m)
    col_idx: torch.Tensor  # int32 [nnz]: key block of each packed block
    row_order: torch.Tensor  # int32 [H·M]: block rows, most active blocks first
    nnz: int


def build_tables(
    blocks: torch.Tensor | RunArrays, block_size: int, start_width: int | None
) -> SddTables:
    """Segment ``blocks`` (bool ``[H, M, N]``, or the checked row runs of one) and build every
    table the pipeline needs.

    ``start_width`` None means 128-token tiles (``default_start_width``).

    >>> tables = build_tables(torch.ones(1, 4, 4, dtype=torch.bool), 16, None)
    >>> [(t.width, t.piece, t.n_groups) for t in tables.widths], tables.nnz
    ([(4, 64, 1)], 16)
    """
    if start_width is None:
        start_width = default_start_width(block_size)
    start_width = check_int("start_width", start_width, low=1)  # 0 would compute no block
    runs = isinstance(blocks, RunArrays)
    widths = [
        WidthTable(width, piece_size(width, block_size), group_table(width, rows))
        for width, rows in (sdd_segment_runs if runs else sdd_segment)(blocks, start_width)
    ]
    row_ptr, col_idx = csr_of_runs(blocks) if runs else csr_rows(blocks)
    return SddTables(widths, row_ptr, col_idx, heaviest_first(row_ptr), int(col_idx.numel()))


def piece_size(width: int, block_size: int) -> int:
    """The largest of ``PIECE_SIZES`` that divides the ``width·block_size`` group tile.

    >>> piece_size(8, 16), piece_size(5, 16), piece_size(2, 128), piece_size(3, 64)
    (128, 16, 128, 64)
    """
    tile = width * block_size
    for piece in PIECE_SIZES:
        if tile % piece == 0:
            return piece
    raise ValueError(f"width·block_size must be a multiple of 16, got {width}·{block_size}")


def group_table(width: int, rows: torch.Tensor) -> torch.Tensor:
    """Pack ``k·width²`` segment rows into int32 ``[k, 1 + 2·width + width²]`` group entries."""
    if rows.dim() != 2 or rows.shape[1] != 4 or rows.shape[0] % (width * width):
        raise ValueError(
            f"segment rows for width {width} must be [k·{width * width}, 4], got {list(rows.shape)}"
        )
    cells = rows.reshape(-1, width, width, 4)  # [group, sub-row, sub-col, field]
    heads, block_rows, block_cols = cells[..., 0], cells[..., 1], cells[..., 2]
    consistent = (
        (heads == heads[:, :1, :1]).all()
        and (block_rows == block_rows[:, :, :1]).all()
        and (block_cols == block_cols[:, :1, :]).all()
    )
    if not consistent:
        raise ValueError(f"segment rows for width {width} do not form w×w Cartesian groups")
    table = torch.cat(
        [
            heads[:, 0, :1],
            block_rows[:, :, 0],
            block_cols[:, 0, :],
            cells[..., 3].reshape(-1, width * width),
        ],
        dim=1,
    )
    return table.to(torch.int32).contiguous()


def csr_rows(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row pointers over the ``H·M`` block rows and the key block of every packed block.

    Packed order is ``blocks.nonzero()`` order, so a block row's blocks are contiguous.
    """
    counts = blocks.reshape(-1, blocks.shape[-1]).sum(dim=1)
    row_ptr = torch.zeros(counts.numel() + 1, dtype=torch.int64)
    row_ptr[1:] = torch.cumsum(counts, 0)
    col_idx = blocks.nonzero()[:, 2]
    return row_ptr.to(torch.int32), col_idx.to(torch.int32).contiguous()


def csr_of_runs(runs: RunArrays) -> tuple[torch.Tensor, torch.Tensor]:
    """``csr_rows`` of the layout that ``runs`` holds, from its runs alone."""
    offsets = run_offsets(runs)
    row_ptr = torch.from_numpy(offsets[runs.row_ptr].astype(np.int32))
    lengths = np.diff(offsets)
    col_idx = np.repeat(runs.starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    return row_ptr, torch.from_numpy(col_idx.astype(np.int32))


def heaviest_first(row_ptr: torch.Tensor) -> torch.Tensor:
    """Block rows sorted by their number of active blocks, most first (ties by index)."""
    counts = (row_ptr[1:] - row_ptr[:-1]).to(torch.int64)
    return torch.sort(-counts, stable=True).indices.to(torch.int32)
