"""Look-up tables that tell the fused kernel which key tiles each query tile must visit.

The kernel computes ``BLOCK_M x BLOCK_N`` token tiles whatever the layout's block size, so that
small layout blocks still give full-size tensor-core tiles. For each (head, query tile) the table
lists the key tiles that contain any active layout block, in CSR form, each with a 64-bit mask
saying which layout blocks inside the tile are active:

- The tile is cut into ``sub_rows x sub_cols``-token cells, ``sub_rows = min(block_size,
  block_m)`` and ``sub_cols = min(block_size, block_n)``: one cell is one layout block, or the
  part of one that lies in the tile (a 128-block spans two 64-wide key tiles). Mask bit
  ``r * cells_per_row + c`` is cell (r, c). With block 16 and 128 x 128 tiles that is 8 x 8 = 64.
- ``FLAG_PARTIAL`` is set when some cell is off (the kernel then masks); a full tile costs
  nothing extra. ``FLAG_DIAGONAL`` is set, when causal, for tiles holding a kept cell with some
  ``q_idx < k_idx`` (top-left aligned); cells wholly above the diagonal are dropped first.
- Work items ``(head, q_tile, first_entry, n_entries)`` are sorted by descending ``n_entries``
  (stable, so head-major then query order among equals): long rows start first and short ones
  fill the tail. Query tiles with no entry are kept, so the kernel writes their zeros.

>>> lut = build_fused_lut(torch.ones(1, 2, 2, dtype=torch.bool), 64, block_m=128, block_n=64,
...                       causal=True)
>>> lut.items.tolist(), lut.entries[:, :2].tolist()
([[0, 0, 0, 2]], [[0, 2], [1, 3]])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from designer.validate import as_block_tensor, check_bool, check_choice

#: Entry flag: some cells of the tile are inactive, apply the mask bits.
FLAG_PARTIAL = 1
#: Entry flag: the tile crosses the causal diagonal, apply ``q_idx >= k_idx``.
FLAG_DIAGONAL = 2

BLOCK_SIZES = (16, 32, 64, 128)
TILE_SIZES = (16, 32, 64, 128)
MAX_MASK_BITS = 64


@dataclass(frozen=True)
class FusedLut:
    """The kernel's work list and per-tile entries (CPU int32 tensors), and the tile geometry."""

    items: torch.Tensor  # [n_items, 4]: head, q_tile, first entry, n entries; heaviest first
    entries: torch.Tensor  # [n_entries, 4]: k_tile, flags, mask bits 0-31, mask bits 32-63
    n_q_tiles: int
    n_k_tiles: int
    sub_rows: int  # query tokens per mask cell
    sub_cols: int  # key tokens per mask cell

    @property
    def n_tiles(self) -> int:
        """Key tiles computed per batch element (the kernel's work, in BLOCK_M x BLOCK_N tiles)."""
        return int(self.items[:, 3].sum())


def cell_sizes(block_size: int, block_m: int, block_n: int) -> tuple[int, int]:
    """Tokens per mask cell along queries and keys: a layout block clipped to the tile."""
    return min(block_size, block_m), min(block_size, block_n)


def tile_masks(
    blocks: torch.Tensor, block_size: int, *, block_m: int, block_n: int, causal: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Per (head, q_tile, k_tile): the uint64 mask word and the int32 flags (0 where no cell).

    ``blocks`` is a ``[H, M, N]`` 0/1 layout; see the module docstring for the bit order.
    """
    blocks = as_block_tensor("blocks", blocks)
    block_size = check_choice("block_size", block_size, BLOCK_SIZES)
    block_m = check_choice("block_m", block_m, TILE_SIZES)
    block_n = check_choice("block_n", block_n, TILE_SIZES)
    causal = check_bool("causal", causal)
    sub_rows, sub_cols = cell_sizes(block_size, block_m, block_n)
    rows_per_tile, cols_per_tile = block_m // sub_rows, block_n // sub_cols
    if rows_per_tile * cols_per_tile > MAX_MASK_BITS:
        raise ValueError(
            f"block_m x block_n = {block_m} x {block_n} holds {rows_per_tile * cols_per_tile} "
            f"cells of block_size {block_size}; the mask word allows at most {MAX_MASK_BITS}"
        )
    n_heads, n_q_blocks, n_k_blocks = blocks.shape
    seq_q, seq_k = n_q_blocks * block_size, n_k_blocks * block_size
    n_q_tiles, n_k_tiles = -(-seq_q // block_m), -(-seq_k // block_n)

    cells = blocks.numpy()
    cells = np.repeat(np.repeat(cells, block_size // sub_rows, 1), block_size // sub_cols, 2)
    diagonal = np.zeros_like(cells)
    if causal:
        q_first = np.arange(cells.shape[1])[:, None] * sub_rows
        k_first = np.arange(cells.shape[2])[None, :] * sub_cols
        cells = cells & (q_first + sub_rows - 1 >= k_first)  # some q_idx >= k_idx
        diagonal = cells & (q_first < k_first + sub_cols - 1)  # some q_idx < k_idx

    def per_tile(grid: np.ndarray) -> np.ndarray:  # [H, rows, cols] -> [H, qt, kt, cell]
        padded = np.zeros(
            (n_heads, n_q_tiles * rows_per_tile, n_k_tiles * cols_per_tile), dtype=bool
        )
        padded[:, : grid.shape[1], : grid.shape[2]] = grid
        tiles = padded.reshape(n_heads, n_q_tiles, rows_per_tile, n_k_tiles, cols_per_tile)
        return tiles.transpose(0, 1, 3, 2, 4).reshape(n_heads, n_q_tiles, n_k_tiles, -1)

    bits = per_tile(cells)
    n_bits = bits.shape[-1]
    padded_bits = np.zeros((*bits.shape[:3], MAX_MASK_BITS), dtype=bool)
    padded_bits[..., :n_bits] = bits
    words = np.packbits(padded_bits, axis=-1, bitorder="little").view("<u8")[..., 0]
    full = np.uint64((1 << n_bits) - 1)
    active = words != 0
    flags = np.where(active & (words != full), FLAG_PARTIAL, 0)
    flags |= np.where(active & per_tile(diagonal).any(-1), FLAG_DIAGONAL, 0)
    return words, flags.astype(np.int32)


def build_fused_lut(
    blocks: torch.Tensor, block_size: int, *, block_m: int, block_n: int, causal: bool
) -> FusedLut:
    """The CSR work list of the fused kernel for a ``[H, M, N]`` layout (see the module doc)."""
    words, flags = tile_masks(blocks, block_size, block_m=block_m, block_n=block_n, causal=causal)
    _, n_q_tiles, n_k_tiles = words.shape
    active = words != 0
    counts = active.sum(-1).reshape(-1)  # per (head, q_tile), head-major
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    order = np.argsort(-counts, kind="stable")
    heads, q_tiles = np.divmod(np.arange(counts.size), n_q_tiles)
    items = np.stack([heads, q_tiles, starts, counts], axis=1)[order]

    head_idx, q_idx, k_idx = np.nonzero(active)  # row-major: grouped per (head, q_tile)
    word = words[head_idx, q_idx, k_idx]
    entries = np.stack(
        [
            k_idx.astype(np.int64),
            flags[head_idx, q_idx, k_idx].astype(np.int64),
            (word & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32).astype(np.int64),
            (word >> np.uint64(32)).astype(np.uint32).view(np.int32).astype(np.int64),
        ],
        axis=1,
    ).reshape(-1, 4)
    sub_rows, sub_cols = cell_sizes(block_size, block_m, block_n)
    return FusedLut(
        items=torch.from_numpy(items.astype(np.int32)),
        entries=torch.from_numpy(entries.astype(np.int32)),
        n_q_tiles=n_q_tiles,
        n_k_tiles=n_k_tiles,
        sub_rows=sub_rows,
        sub_cols=sub_cols,
    )
