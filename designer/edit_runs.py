"""Paint edits of a layout held as row runs, without its dense grid.

``edit.apply_edit`` paints a dense layout by masking its grid; a layout past the dense grid's
size (``Layout.runs``) is painted here instead. The edit's region becomes the runs of one head
(``region_runs``: one interval per row it crosses, its cells' runs for ``Cells`` and
``Bitmap``), and the painted heads are combined with it by the runs' own algebra: ``set`` is a
union, ``clear`` a difference, ``toggle`` both ways. Time and memory follow the runs of the
painted heads and the region's rows, never the grid: a click on one block of a 32 x 2048^2
layout costs milliseconds. Partial blocks inside the region are dropped (an edit paints whole
blocks), as on a dense layout.

>>> box = region_runs(Rect(1, 1, 2, 3), 4, 4)
>>> painted_runs(BlockRuns.empty(2, 4, 4), "set", box).head_counts().tolist()
[6, 6]
"""

from __future__ import annotations

import numpy as np
import torch

from designer.block_runs import BlockRuns
from designer.layout import Layout
from designer.partials import PartialBlocks
from designer.regions import Band, Bitmap, Cells, Column, Rect, Region, Row


def region_runs(region: Region, n_rows: int, n_cols: int) -> BlockRuns:
    """The blocks of ``region`` on an ``n_rows x n_cols`` grid as the runs of one head; raises
    if the region does not fit. Costs the region's rows (its cells for ``Cells``/``Bitmap``)."""
    region.check_fits(n_rows, n_cols)
    shape = (1, n_rows, n_cols)
    if isinstance(region, Rect):
        rows = torch.arange(region.row0, region.row1 + 1)
        return _intervals(shape, rows, region.col0, region.col1 + 1)
    if isinstance(region, Row):
        return _intervals(shape, torch.tensor([region.row]), 0, n_cols)
    if isinstance(region, Column):
        return _intervals(shape, torch.arange(n_rows), region.col, region.col + 1)
    if isinstance(region, Band):
        rows = torch.arange(max(0, region.low), min(n_rows, n_cols + region.high))
        return BlockRuns.from_intervals(shape, rows, rows - region.high, rows - region.low + 1)
    if isinstance(region, Cells):
        cells = torch.from_numpy(region.array.copy())
    elif isinstance(region, Bitmap):
        rows, cols = np.nonzero(region.box_mask().numpy())
        cells = torch.from_numpy(np.stack([rows + region.row0, cols + region.col0], axis=1))
    else:
        raise TypeError(f"region must be a Rect, Row, Column, Band, Cells or Bitmap, got "
                        f"{type(region).__name__}")  # fmt: skip
    index = torch.cat([torch.zeros(len(cells), 1, dtype=torch.int64), cells.to(torch.int64)], 1)
    return BlockRuns.from_cells(shape, index)


def _intervals(shape: tuple[int, int, int], rows: torch.Tensor, start: int, stop: int) -> BlockRuns:
    return BlockRuns.from_intervals(
        shape, rows, torch.full_like(rows, start), torch.full_like(rows, stop)
    )


def painted_runs(runs: BlockRuns, action: str, region: BlockRuns) -> BlockRuns:
    """``runs`` (any heads) with the one-head ``region`` set, cleared or toggled in each head."""
    if action == "set":
        return runs.union(region)
    if action == "clear":
        return runs.difference(region)
    every = region.select_heads([0] * runs.shape[0])
    return runs.difference(every).union(every.difference(runs))


def apply_edit_runs(layout: Layout, op) -> Layout:
    """``layout`` (held as runs) with the ``EditOp`` ``op`` applied (``op`` already checked to
    fit it: ``apply_edit`` does)."""
    runs = layout.runs
    region = region_runs(op.region, layout.n_q_blocks, layout.n_k_blocks)
    if op.heads is None:
        new = painted_runs(runs, op.action, region)
    else:
        heads = sorted(op.heads)
        new = replaced_heads(runs, heads, painted_runs(runs.select_heads(heads), op.action, region))
    partials = _partials_outside(layout.partials, op.heads, region)
    return Layout(new, layout.block_size, partials, layout.seq_q, layout.seq_k)


def replaced_heads(runs: BlockRuns, heads: list[int], part: BlockRuns) -> BlockRuns:
    """``runs`` with its sorted ``heads`` replaced by the heads of ``part``, in order: the
    arrays spliced, so the heads left alone are copied, never recombined."""
    m = runs.shape[1]
    ptr, part_ptr = runs.row_ptr, part.row_ptr
    sizes, part_sizes = ptr[1:] - ptr[:-1], part_ptr[1:] - part_ptr[:-1]
    size_parts, start_parts, stop_parts = [], [], []
    done = 0  # the first head not yet copied
    for i, head in enumerate([*heads, runs.shape[0]]):
        first, last = int(ptr[done * m]), int(ptr[head * m])
        size_parts.append(sizes[done * m : head * m])
        start_parts.append(runs.starts[first:last])
        stop_parts.append(runs.stops[first:last])
        if i == len(heads):
            break
        first, last = int(part_ptr[i * m]), int(part_ptr[(i + 1) * m])
        size_parts.append(part_sizes[i * m : (i + 1) * m])
        start_parts.append(part.starts[first:last])
        stop_parts.append(part.stops[first:last])
        done = head + 1
    row_ptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(torch.cat(size_parts), 0)])
    return BlockRuns(runs.shape, row_ptr, torch.cat(start_parts), torch.cat(stop_parts))


def paints_any_runs(layout: Layout, op) -> bool:
    """Whether the ``EditOp`` ``op`` would change a block of ``layout`` (held as runs)."""
    if op.action == "toggle":
        return True
    region = region_runs(op.region, layout.n_q_blocks, layout.n_k_blocks)
    heads = list(range(layout.n_heads)) if op.heads is None else list(op.heads)
    painted = layout.runs.select_heads(heads)
    every = region.select_heads([0] * len(heads))
    changed = every.difference(painted) if op.action == "set" else every.intersection(painted)
    return changed.n_runs > 0


def _partials_outside(
    partials: PartialBlocks | None, heads: tuple[int, ...] | None, region: BlockRuns
) -> PartialBlocks | None:
    """``partials`` less those of ``heads`` (``None``: all) inside the one-head ``region``."""
    if partials is None:
        return None
    index = partials.index.to(torch.int64)
    hit = region.contains(torch.cat([torch.zeros_like(index[:, :1]), index[:, 1:]], 1))
    if heads is not None:
        hit &= torch.isin(index[:, 0], torch.tensor(heads, dtype=torch.int64))
    return partials.take(~hit) if bool(hit.any()) else partials
