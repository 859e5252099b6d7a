"""Look-up tables that tell the forward kernels which key tiles each query tile must visit.

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
  ``k_idx > q_idx + causal_offset`` (0: top-left aligned, ``seq_k - seq_q``: bottom-right);
  cells wholly past the diagonal are dropped first.
- Lengths that are not whole blocks: cells starting at or past ``seq_q`` / ``seq_k`` are dropped,
  and ``FLAG_KEY_BOUND`` marks the tile whose cell straddles ``seq_k`` (the kernel then masks
  ``k_idx >= seq_k``).
- Partial blocks (``gpu.partials``): a tile holding an active part of one is a *token tile*,
  flagged ``FLAG_TOKENS`` alone, its entry's third word the number of its token mask (the
  table's ``token_words``, numbered in the order the kernel walks the table) and its fourth
  word 0. Its token mask holds everything (blocks, bits, the causal limit, ``seq_k``), so the
  kernel reads that mask instead of the cell bits and the flags above. A token tile that lets
  nothing through is dropped.
- Work items ``(head, q_tile, first_entry, n_entries)`` are sorted by descending ``n_entries``
  (stable, so head-major then query order among equals): long rows start first and short ones
  fill the tail. Query tiles with no entry are kept, so the kernel writes their zeros.

The plan builds them (``gpu.plan``, which checks the layout first) and keeps them uploaded.

>>> lut = build_fused_lut(torch.ones(1, 2, 2, dtype=torch.bool), 64, block_m=128, block_n=64,
...                       causal=True)
>>> lut.items.tolist(), lut.entries[:, :2].tolist()
([[0, 0, 0, 2]], [[0, 2], [1, 3]])
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from designer.validate import check_choice
from gpu.partials import Partials, token_tiles

#: Entry flag: some cells of the tile are inactive, apply the mask bits.
FLAG_PARTIAL = 1
#: Entry flag: the tile crosses the causal diagonal, apply ``k_idx <= q_idx + causal_offset``.
FLAG_DIAGONAL = 2
#: Entry flag: a cell of the tile straddles ``seq_k``, apply ``k_idx < seq_k``.
FLAG_KEY_BOUND = 4
#: Entry flag: a token tile, apply its token mask (and nothing else).
FLAG_TOKENS = 8

#: Tile sides (tokens) a table can be built for.
TILE_SIZES = (16, 32, 64, 128)
MAX_MASK_BITS = 64


@dataclass(frozen=True)
class FusedLut:
    """The kernel's work list and per-tile entries (CPU int32 tensors), and the tile geometry."""

    items: torch.Tensor  # [n_items, 4]: head, q_tile, first entry, n entries; heaviest first
    entries: torch.Tensor  # [n_entries, 4]: k_tile, flags, mask bits 0-31 or token tile, 32-63
    token_words: torch.Tensor  # int32 [token tiles, block_m, ceil(block_n / 32)]: query rows
    n_q_tiles: int
    n_k_tiles: int
    sub_rows: int  # query tokens per mask cell
    sub_cols: int  # key tokens per mask cell
    n_tiles: int  # key tiles computed per batch element (the work, in BLOCK_M x BLOCK_N tiles)

    @property
    def work(self) -> tuple[int, int]:
        """Key tiles and work items (query tiles, empty ones too) per batch element and head
        set: what a kernel build's cost is counted in (``gpu.forward.builds.choose_config``)."""
        return self.n_tiles, len(self.items)

    def to(self, device: torch.device) -> FusedLut:
        """The table with its tensors on ``device``."""
        return replace(
            self, items=self.items.to(device), entries=entries_on(self.entries, device),
            token_words=entries_on(self.token_words, device),
        )  # fmt: skip


def entries_on(entries: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A table's entries (or token words) on ``device``: one dummy row of zeros when there is
    none (no null pointer)."""
    return (entries if len(entries) else entries.new_zeros(1, *entries.shape[1:])).to(device)


def group_heads(items: torch.Tensor, heads_per_group: int) -> torch.Tensor:
    """``items`` (heaviest first) stably reordered into groups of ``heads_per_group`` layout
    heads, heaviest first inside each: the Hopper kernel's unit order, whose running units then
    read the K and V of a few heads at a time."""
    group = items[:, 0].long() // heads_per_group
    return items[torch.sort(group, stable=True).indices]


def cell_sizes(block_size: int, block_m: int, block_n: int) -> tuple[int, int]:
    """Tokens per mask cell along queries and keys: a layout block clipped to the tile."""
    return min(block_size, block_m), min(block_size, block_n)


def tile_cells(block_size: int, block_m: int, block_n: int) -> tuple[int, int, int, int]:
    """The checked cell geometry of ``block_m x block_n`` tiles: tokens per cell along queries
    and keys, and cells per tile along each."""
    block_m = check_choice("block_m", block_m, TILE_SIZES)
    block_n = check_choice("block_n", block_n, TILE_SIZES)
    sub_rows, sub_cols = cell_sizes(block_size, block_m, block_n)
    rows_per_tile, cols_per_tile = block_m // sub_rows, block_n // sub_cols
    if rows_per_tile * cols_per_tile > MAX_MASK_BITS:
        raise ValueError(
            f"block_m x block_n = {block_m} x {block_n} holds {rows_per_tile * cols_per_tile} "
            f"cells of block_size {block_size}; the mask word allows at most {MAX_MASK_BITS}"
        )
    return sub_rows, sub_cols, rows_per_tile, cols_per_tile


def tile_masks(
    blocks: torch.Tensor,
    block_size: int,
    *,
    block_m: int,
    block_n: int,
    causal: bool,
    causal_offset: int = 0,
    seq_q: int | None = None,
    seq_k: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per (head, q_tile, k_tile): the uint64 mask word and the int32 flags (0 where no cell).

    ``blocks`` is a ``[H, M, N]`` bool layout and ``block_size`` one of
    ``gpu.support.BLOCK_SIZES``, as ``gpu.plan`` checked them (the table checks only its
    tiles); see the module docstring for the bit order. ``seq_q`` / ``seq_k``
    default to whole blocks (``M · block_size``, ``N · block_size``).
    """
    sub_rows, sub_cols, rows_per_tile, cols_per_tile = tile_cells(block_size, block_m, block_n)
    n_heads, n_q_blocks, n_k_blocks = blocks.shape
    seq_q = n_q_blocks * block_size if seq_q is None else seq_q
    seq_k = n_k_blocks * block_size if seq_k is None else seq_k
    n_q_tiles, n_k_tiles = -(-seq_q // block_m), -(-seq_k // block_n)

    cells = blocks.numpy()
    cells = np.repeat(np.repeat(cells, block_size // sub_rows, 1), block_size // sub_cols, 2)
    q_first = np.arange(cells.shape[1])[:, None] * sub_rows
    k_first = np.arange(cells.shape[2])[None, :] * sub_cols
    q_last = np.minimum(q_first + sub_rows, seq_q) - 1
    k_last = np.minimum(k_first + sub_cols, seq_k) - 1
    cells = cells & (q_first < seq_q) & (k_first < seq_k)
    diagonal = np.zeros_like(cells)
    if causal:
        cells = cells & (k_first <= q_last + causal_offset)  # some key within the limit
        diagonal = cells & (k_last > q_first + causal_offset)  # some key past it

    def per_tile(grid: np.ndarray) -> np.ndarray:  # [H, rows, cols] -> [H, qt, kt, cell]
        padded = np.zeros(
            (n_heads, n_q_tiles * rows_per_tile, n_k_tiles * cols_per_tile), dtype=bool
        )
        rows, cols = min(grid.shape[1], padded.shape[1]), min(grid.shape[2], padded.shape[2])
        padded[:, :rows, :cols] = grid[:, :rows, :cols]  # cut cells lie past seq_q / seq_k
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
    if seq_k % sub_cols:  # a column of cells straddles seq_k (cells past it were dropped)
        straddling = np.zeros_like(cells)
        straddling[:, :, seq_k // sub_cols] = cells[:, :, seq_k // sub_cols]
        flags |= np.where(per_tile(straddling).any(-1), FLAG_KEY_BOUND, 0)
    return words, flags.astype(np.int32)


def masked_tiles(
    blocks: torch.Tensor,
    block_size: int,
    *,
    block_m: int,
    block_n: int,
    causal: bool,
    causal_offset: int = 0,
    seq_q: int | None = None,
    seq_k: int | None = None,
    partials: Partials | None = None,
    by_key_tile: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, torch.Tensor]:
    """``tile_masks`` with the token tiles of ``partials``: per (head, q_tile, k_tile) the mask
    word, the flags and the token tile (-1: none), and the token words (``by_key_tile``: the
    backward's, numbered per key tile and with rows over keys; see ``gpu.partials``)."""
    words, flags = tile_masks(
        blocks, block_size, block_m=block_m, block_n=block_n, causal=causal,
        causal_offset=causal_offset, seq_q=seq_q, seq_k=seq_k,
    )  # fmt: skip
    if partials is None:
        row_words = -(-(block_m if by_key_tile else block_n) // 32)
        rows = block_n if by_key_tile else block_m
        none = np.full(words.shape, -1, dtype=np.int32)
        return words, flags, none, torch.zeros(0, rows, row_words, dtype=torch.int32)
    _, n_q_blocks, n_k_blocks = blocks.shape
    tokens = token_tiles(
        partials, blocks, words, block_m=block_m, block_n=block_n, causal=causal,
        causal_offset=causal_offset, seq_q=n_q_blocks * block_size if seq_q is None else seq_q,
        seq_k=n_k_blocks * block_size if seq_k is None else seq_k, by_key_tile=by_key_tile,
    )  # fmt: skip
    words = np.where(tokens.dropped, np.uint64(0), words)
    flags = np.where(tokens.ids >= 0, FLAG_TOKENS, flags).astype(np.int32)
    return words, flags, tokens.ids, tokens.words


def build_fused_lut(
    blocks: torch.Tensor,
    block_size: int,
    *,
    block_m: int,
    block_n: int,
    causal: bool,
    causal_offset: int = 0,
    seq_q: int | None = None,
    seq_k: int | None = None,
    partials: Partials | None = None,
) -> FusedLut:
    """The CSR work list of the fused kernel for a ``[H, M, N]`` layout (see the module doc)."""
    words, flags, token_ids, token_words = masked_tiles(
        blocks, block_size, block_m=block_m, block_n=block_n, causal=causal,
        causal_offset=causal_offset, seq_q=seq_q, seq_k=seq_k, partials=partials,
    )  # fmt: skip
    _, n_q_tiles, n_k_tiles = words.shape
    counts, starts, entries = grouped_entries(words, flags, token_ids)  # per (head, q_tile)
    return fused_lut(counts, starts, entries, token_words, n_q_tiles, n_k_tiles,
                     cell_sizes(block_size, block_m, block_n))  # fmt: skip


def fused_lut(
    counts: np.ndarray,
    starts: np.ndarray,
    entries: torch.Tensor,
    token_words: torch.Tensor,
    n_q_tiles: int,
    n_k_tiles: int,
    cells: tuple[int, int],
) -> FusedLut:
    """The table of the entries grouped per (head, q_tile), each group's ``counts`` and
    ``starts`` (head-major), with the work items heaviest first; ``cells`` is
    ``cell_sizes(...)``."""
    order = np.argsort(-counts, kind="stable")
    heads, q_tiles = np.divmod(np.arange(counts.size), n_q_tiles)
    items = np.stack([heads, q_tiles, starts, counts], axis=1)[order]
    return FusedLut(
        items=torch.from_numpy(items.astype(np.int32)),
        entries=entries,
        token_words=token_words,
        n_q_tiles=n_q_tiles,
        n_k_tiles=n_k_tiles,
        sub_rows=cells[0],
        sub_cols=cells[1],
        n_tiles=int(counts.sum()),
    )


def grouped_entries(
    words: np.ndarray, flags: np.ndarray, token_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
    """The CSR of the active tiles of ``[H, rows, cols]`` mask words, grouped per (head, row):
    each group's entry count and first entry (flat, head-major), and the int32 entries ``(col,
    flags, mask bits 0-31, mask bits 32-63)``, or ``(col, FLAG_TOKENS, token tile, 0)`` where
    ``token_ids`` names a token tile."""
    active = words != 0
    counts = active.sum(-1).reshape(-1)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    head_idx, row_idx, col_idx = np.nonzero(active)  # row-major: grouped per (head, row)
    word = words[head_idx, row_idx, col_idx]
    token = token_ids[head_idx, row_idx, col_idx].astype(np.int64)
    low = (word & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32).astype(np.int64)
    high = (word >> np.uint64(32)).astype(np.uint32).view(np.int32).astype(np.int64)
    entries = np.stack(
        [
            col_idx.astype(np.int64),
            flags[head_idx, row_idx, col_idx].astype(np.int64),
            np.where(token >= 0, token, low),
            np.where(token >= 0, 0, high),
        ],
        axis=1,
    ).reshape(-1, 4)
    return counts, starts, torch.from_numpy(entries.astype(np.int32))
