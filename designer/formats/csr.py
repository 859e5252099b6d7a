"""Compressed sparse rows (CSR) of a layout, all heads in one index array.

Convention (int64):

- ``col_idx [nnz]``: the key block of every active block, in ``layout.blocks.nonzero()`` order
  (head, then row, then column), so ``col_idx[i]`` belongs to the block at rank ``i`` of a packed
  ``[B, nnz, block, block]`` tensor, the ``orig_idx`` of the segmentation;
- ``row_ptr [H, M + 1]``: global offsets into ``col_idx``: row ``m`` of head ``h`` holds
  ``col_idx[row_ptr[h, m] : row_ptr[h, m + 1]]``, ascending. ``row_ptr[h, M] == row_ptr[h + 1, 0]``
  and ``row_ptr[H - 1, M] == nnz``.

A layout held as row runs (past a dense grid's size) converts both ways without its grid.

``from_csr`` needs the number of key blocks (empty trailing columns leave no trace) and the block
size, and accepts only this canonical form.

>>> row_ptr, col_idx = to_csr(Layout(torch.tensor([[[1, 0], [1, 1]], [[0, 1], [0, 0]]]), 16))
>>> row_ptr.tolist(), col_idx.tolist()
([[0, 1, 3], [3, 4, 4]], [0, 0, 1, 1])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from designer.block_runs import BlockRuns
from designer.layout import Layout
from designer.validate import MAX_LAYOUT_CELLS, check_int, check_runs_shape

#: Most blocks ``from_csr`` reads: its checks take about 40 bytes a block (320 MiB here).
MAX_CSR_BLOCKS = 1 << 23


def to_csr(
    layout: Layout, *, dtype: torch.dtype = torch.int64
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(row_ptr [H, M + 1], col_idx [nnz])`` of ``layout`` (see the module docstring), int64
    or, for a smaller file, ``dtype=torch.int32``. Works a head at a time: the memory is the
    result's and one head's indices."""
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a Layout, got {type(layout).__name__}")
    if dtype not in (torch.int64, torch.int32):
        raise ValueError(f"dtype must be torch.int64 or torch.int32, got {dtype}")
    h, m, n = layout.shape
    counts = layout.row_counts().reshape(-1)  # [H * M]
    offsets = np.zeros(h * m + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    rows = np.arange(h)[:, None] * m + np.arange(m + 1)[None, :]
    index_type = np.int64 if dtype == torch.int64 else np.int32
    if layout.runs is not None:
        col_idx = layout.runs.columns().numpy().astype(index_type)
        return torch.from_numpy(offsets[rows].astype(index_type)), torch.from_numpy(col_idx)
    blocks = layout.to_numpy()
    col_idx = np.empty(int(offsets[-1]), dtype=index_type)
    for head in range(h):
        start, stop = offsets[head * m], offsets[(head + 1) * m]
        col_idx[start:stop] = np.flatnonzero(blocks[head]) % n
    return torch.from_numpy(offsets[rows].astype(col_idx.dtype)), torch.from_numpy(col_idx)


def _index_tensor(name: str, value: Any, rank: int) -> torch.Tensor:
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(value)
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch tensor or numpy array, got {type(value).__name__}")
    if value.dtype == torch.bool or value.is_floating_point() or value.is_complex():
        raise TypeError(f"{name} must hold integers, got dtype {value.dtype}")
    if value.dim() != rank:
        raise ValueError(f"{name} must have rank {rank}, got shape {list(value.shape)}")
    return value.detach().to("cpu", torch.int64)


def from_csr(row_ptr: Any, col_idx: Any, n_k_blocks: int, block_size: int) -> Layout:
    """The layout that ``to_csr`` would turn into ``(row_ptr, col_idx)``; checks everything.

    At most ``MAX_CSR_BLOCKS`` blocks: the checks take about 40 bytes a block.
    """
    n_k_blocks = check_int("n_k_blocks", n_k_blocks, low=1, high=1 << 16)
    if hasattr(col_idx, "shape") and len(col_idx.shape) == 1 and col_idx.shape[0] > MAX_CSR_BLOCKS:
        raise ValueError(
            f"col_idx lists {col_idx.shape[0]:,} blocks, more than the {MAX_CSR_BLOCKS:,} read "
            f"here (load the design file instead)"
        )
    row_ptr = _index_tensor("row_ptr", row_ptr, 2)
    col_idx = _index_tensor("col_idx", col_idx, 1)
    h, m = row_ptr.shape[0], row_ptr.shape[1] - 1
    if h < 1 or m < 1:
        raise ValueError(f"row_ptr must have shape [H >= 1, M + 1 >= 2], got {list(row_ptr.shape)}")
    as_runs = h * m * n_k_blocks > MAX_LAYOUT_CELLS  # held as runs: its shape's limits
    if as_runs:
        check_runs_shape(h, m, n_k_blocks)
    if int(row_ptr[0, 0]) != 0:
        raise ValueError(f"row_ptr[0, 0] must be 0, got {int(row_ptr[0, 0])}")
    if h > 1 and not torch.equal(row_ptr[1:, 0], row_ptr[:-1, -1]):
        head = int((row_ptr[1:, 0] != row_ptr[:-1, -1]).nonzero()[0]) + 1
        raise ValueError(
            f"row_ptr[{head}, 0] must equal row_ptr[{head - 1}, {m}] "
            f"({int(row_ptr[head - 1, -1])}), got {int(row_ptr[head, 0])}"
        )
    steps = row_ptr.diff(dim=1)
    if (steps < 0).any() or (steps > n_k_blocks).any():
        head, row = (((steps < 0) | (steps > n_k_blocks)).nonzero()[0]).tolist()
        raise ValueError(
            f"row_ptr[{head}] must grow by 0 to n_k_blocks={n_k_blocks} per row, got "
            f"{int(steps[head, row])} at row {row}"
        )
    if int(row_ptr[-1, -1]) != len(col_idx):
        raise ValueError(
            f"row_ptr[{h - 1}, {m}] must be len(col_idx) = {len(col_idx)}, "
            f"got {int(row_ptr[-1, -1])}"
        )
    if len(col_idx) and (int(col_idx.min()) < 0 or int(col_idx.max()) >= n_k_blocks):
        raise ValueError(
            f"col_idx must be in [0, {n_k_blocks - 1}], got values in "
            f"[{int(col_idx.min())}, {int(col_idx.max())}]"
        )
    row_of = torch.repeat_interleave(torch.arange(h * m), steps.flatten())  # [nnz]
    unsorted = (row_of[1:] == row_of[:-1]) & (col_idx[1:] <= col_idx[:-1])
    if unsorted.any():
        i = int(unsorted.nonzero()[0]) + 1
        raise ValueError(
            f"col_idx must ascend strictly within each row, got {int(col_idx[i - 1])} then "
            f"{int(col_idx[i])} at col_idx[{i - 1}:{i + 1}] (head {int(row_of[i]) // m}, "
            f"row {int(row_of[i]) % m})"
        )
    if as_runs:
        shape = (h, m, n_k_blocks)
        return Layout(BlockRuns.from_intervals(shape, row_of, col_idx, col_idx + 1), block_size)
    blocks = torch.zeros(h, m, n_k_blocks, dtype=torch.bool)
    blocks[row_of // m, row_of % m, col_idx] = True
    return Layout(blocks, block_size)
