"""The backward kernel's look-up table: the forward's tiles and masks, listed per key tile.

The backward owns one key tile per CTA and walks the query tiles that attend to it, so the
table is the transpose of ``gpu.forward.lut``'s: the same mask words and flags (bit ``r ·
cells_per_row + c`` is query cell r, key cell c), grouped per (layout head, key tile) instead
of per (layout head, query tile). Token tiles (``gpu.partials``) carry their token masks with
rows over keys, numbered in this table's walk order. The plan builds it on the first backward
call.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from designer.run_arrays import RunArrays
from gpu.forward.lut import cell_sizes, entries_on, grouped_entries, masked_tiles
from gpu.forward.run_lut import (
    tile_entries_of_runs,
    token_entries,
    token_tiles_of_entries,
    transpose_entries,
)
from gpu.partials import Partials


@dataclass(frozen=True)
class BackwardLut:
    """The backward kernel's walk: per key tile, the query tiles that attend to it (CPU int32)."""

    lists: torch.Tensor  # [H · n_k_tiles, 2]: first entry, n entries, per (layout head, k_tile)
    entries: torch.Tensor  # [n_entries, 4]: q_tile, flags, mask bits 0-31 or token tile, 32-63
    token_words: torch.Tensor  # int32 [token tiles, block_n, ceil(block_m / 32)]: key rows
    order: torch.Tensor  # [n_k_tiles]: key tiles by descending work over all heads
    n_q_tiles: int
    n_k_tiles: int
    sub_rows: int
    sub_cols: int
    n_tiles: int  # tile pairs computed per batch element and layout head set

    def to(self, device: torch.device) -> BackwardLut:
        """The table with its tensors on ``device``."""
        return replace(
            self, lists=self.lists.to(device), entries=entries_on(self.entries, device),
            order=self.order.to(device), token_words=entries_on(self.token_words, device),
        )  # fmt: skip


def build_backward_lut(
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
) -> BackwardLut:
    """The transposed table: ``build_fused_lut``'s tiles and masks, listed per key tile.

    The mask words and flags are the forward's (bit ``r · cells_per_row + c`` is query cell r,
    key cell c); only the grouping changes. Every key tile is in ``order``, visited or not, so
    the kernel writes zero gradients for keys no query attends to.

    >>> lut = build_backward_lut(torch.ones(1, 2, 2, dtype=torch.bool), 64, block_m=64,
    ...                          block_n=64, causal=True)
    >>> lut.lists.tolist(), lut.entries[:, :2].tolist(), lut.order.tolist()
    ([[0, 2], [2, 1]], [[0, 2], [1, 0], [1, 2]], [0, 1])
    """
    words, flags, token_ids, token_words = masked_tiles(
        blocks, block_size, block_m=block_m, block_n=block_n, causal=causal,
        causal_offset=causal_offset, seq_q=seq_q, seq_k=seq_k, partials=partials,
        by_key_tile=True,
    )  # fmt: skip
    n_heads, n_q_tiles, n_k_tiles = words.shape
    # [H, k_tile, q_tile]: grouped per (head, k_tile), query order
    counts, starts, entries = grouped_entries(
        *(grid.transpose(0, 2, 1) for grid in (words, flags, token_ids))
    )
    return backward_lut(counts, starts, entries, token_words, n_heads, n_q_tiles, n_k_tiles,
                        cell_sizes(block_size, block_m, block_n))  # fmt: skip


def build_backward_lut_runs(
    runs: RunArrays,
    block_size: int,
    *,
    block_m: int,
    block_n: int,
    causal: bool,
    causal_offset: int = 0,
    seq_q: int | None = None,
    seq_k: int | None = None,
    partials: Partials | None = None,
) -> BackwardLut:
    """``build_backward_lut`` of the layout that ``runs`` holds (with its ``partials``, if
    any), from the forward's tiles (``gpu.forward.run_lut``) regrouped per key tile: no
    ``[H, M, N]`` grid."""
    options = {"block_m": block_m, "block_n": block_n, "causal": causal,
               "causal_offset": causal_offset, "seq_q": seq_q, "seq_k": seq_k}  # fmt: skip
    counts, entries, n_q_tiles, n_k_tiles = tile_entries_of_runs(runs, block_size, **options)
    n_heads = runs.shape[0]
    token_words = torch.zeros(0, block_n, -(-block_m // 32), dtype=torch.int32)
    tokens = None
    if partials is not None:
        tokens = token_tiles_of_entries(partials, runs, counts, entries, n_q_tiles, n_k_tiles,
                                        **options, by_key_tile=True)  # fmt: skip
    counts, starts, entries = transpose_entries(counts, entries, n_heads, n_q_tiles, n_k_tiles)
    if tokens is not None:
        groups = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        heads, k_tiles = np.divmod(groups, n_k_tiles)
        keys = (heads * n_q_tiles + entries[:, 0]) * n_k_tiles + k_tiles
        counts, entries = token_entries(counts, entries, keys, tokens)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        token_words = tokens.words
    return backward_lut(counts, starts, torch.from_numpy(entries), token_words, n_heads,
                        n_q_tiles, n_k_tiles, cell_sizes(block_size, block_m, block_n))  # fmt: skip


def backward_lut(
    counts: np.ndarray,
    starts: np.ndarray,
    entries: torch.Tensor,
    token_words: torch.Tensor,
    n_heads: int,
    n_q_tiles: int,
    n_k_tiles: int,
    cells: tuple[int, int],
) -> BackwardLut:
    """The table of the entries grouped per (head, k_tile), each group's ``counts`` and
    ``starts`` (head-major), with the key tiles by descending work; ``cells`` is
    ``cell_sizes(...)``."""
    work = counts.reshape(n_heads, n_k_tiles).sum(0)
    return BackwardLut(
        lists=torch.from_numpy(np.stack([starts, counts], axis=1).astype(np.int32)),
        entries=entries,
        token_words=token_words,
        order=torch.from_numpy(np.argsort(-work, kind="stable").astype(np.int32)),
        n_q_tiles=n_q_tiles,
        n_k_tiles=n_k_tiles,
        sub_rows=cells[0],
        sub_cols=cells[1],
        n_tiles=int(counts.sum()),
    )
