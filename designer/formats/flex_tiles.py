"""A layout seen in FlexAttention's tiles: which ``BLOCK_SIZE`` tiles are full, partial or absent.

Compiled ``flex_attention`` walks a ``BlockMask`` tile by tile, and its kernels need the tile
divisible by their own (128 tokens by default; with torch 2.11 the compiled backward refuses
64-token tiles). So a layout is seen at ``flex_tile_size(block_size)``: its own blocks when they
are a multiple of 128 tokens, else ``FLEX_BLOCK`` = 128-token tiles, each of them

- **full** when every token pair in it is active under the layout (and ``k_idx <= q_idx + d``
  when causal, ``d`` the causal offset: 0 top-left, ``Sk - Sq`` bottom-right): the kernel skips
  ``mask_mod`` there; a tile covering a partial block is never full;
- **partial** when some pairs are: ``mask_mod`` decides pair by pair;
- absent otherwise.

The lengths may end inside the last block row or column (``Sq <= M·block``), and a length that
is not a multiple of the tile leaves the last tile row or column short; "every pair" means every
pair that exists. The classes come from the blocks alone, never from the ``Sq·Sk`` token pairs:
a tile covers a range of block rows and columns (a block may straddle two tiles), and it is full
when all of them are active, reached when one is. Causal tiles are aligned at token 0 on both
axes: tile ``(i, j)`` is wholly causal when its last key is at most its first query plus ``d``
and never reached when its first key is past its last query plus ``d``; in a tile between the
two, a covered block ``(r, c)`` holds a causal pair exactly when the first of its keys in the
tile is at most the last of its queries there plus ``d``. A short tile can be wholly causal too.

>>> full, partial = tile_classes(torch.ones(1, 8, 8, dtype=torch.bool), 32, causal=True)
>>> full[0].int().tolist(), partial[0].int().tolist()
([[0, 0], [1, 0]], [[1, 0], [0, 1]])
>>> full, partial = tile_classes(
...     torch.ones(1, 8, 8, dtype=torch.bool), 32, causal=True, seq_lengths=(200, 256),
...     causal_offset=56)  # bottom-right: keys up to 56 past each query
>>> full[0].int().tolist(), partial[0].int().tolist()
([[0, 0], [1, 0]], [[1, 1], [0, 1]])
"""

from __future__ import annotations

import torch

from designer.layout import Layout
from designer.validate import MAX_LAYOUT_CELLS

#: Flex's default tile, in tokens: the ``BLOCK_SIZE`` its compiled kernels are built around.
FLEX_BLOCK = 128


def flex_tile_size(block_size: int) -> int:
    """Tokens per ``BlockMask`` tile for a layout of ``block_size``-token blocks.

    >>> flex_tile_size(16), flex_tile_size(96), flex_tile_size(128), flex_tile_size(256)
    (128, 128, 128, 256)
    """
    return block_size if block_size % FLEX_BLOCK == 0 else FLEX_BLOCK


def tile_classes(
    blocks: torch.Tensor,
    block_size: int,
    *,
    causal: bool,
    tile_size: int = FLEX_BLOCK,
    seq_lengths: tuple[int, int] | None = None,
    causal_offset: int = 0,
    partial: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(full, partial)`` bool ``[H, ceil(Sq / tile), ceil(Sk / tile)]`` for bool ``[H, M, N]``.

    ``seq_lengths`` is ``(Sq, Sk)`` (default: whole blocks; the caller checks that the blocks
    cover them), ``causal_offset`` the ``d`` of ``k_idx <= q_idx + d``, ``partial`` the bool
    ``[H, M, N]`` partial blocks (``Layout.partial_grid``), which make their tiles partial.
    Memory stays within a few times the layout's cells for blocks under a tile, and the tile
    grid is refused above ``MAX_LAYOUT_CELLS`` (blocks far larger than a tile).
    """
    heads, n_q, n_k = blocks.shape
    seq_q, seq_k = seq_lengths or (n_q * block_size, n_k * block_size)
    rows = _spans(seq_q, block_size, tile_size)
    cols = _spans(seq_k, block_size, tile_size)
    tiles = heads * rows.shape[0] * cols.shape[0]
    if tiles > MAX_LAYOUT_CELLS:
        raise ValueError(
            f"a BlockMask of {tile_size}-token tiles for {heads} heads x {seq_q} x "
            f"{seq_k} tokens needs {tiles:,} tiles, more than the limit of "
            f"{MAX_LAYOUT_CELLS:,}"
        )
    tile_any = _reduce(blocks, rows, cols, torch.any)
    tile_all = _reduce(blocks if partial is None else blocks & ~partial, rows, cols, torch.all)
    if causal:
        first_q = torch.arange(rows.shape[0])[:, None] * tile_size
        first_k = torch.arange(cols.shape[0])[None, :] * tile_size
        last_q = (first_q + tile_size).clamp(max=seq_q) - 1
        last_k = (first_k + tile_size).clamp(max=seq_k) - 1
        wholly = last_k <= first_q + causal_offset
        reached = first_k <= last_q + causal_offset
        tile_all &= wholly
        tile_any &= wholly
        i, j = (reached & ~wholly).nonzero(as_tuple=True)  # tiles the causal edge crosses
        tile_any[:, i, j] = _causal_reach(blocks, block_size, rows[i], cols[j],
                                          last_q[i, 0], first_k[0, j], causal_offset)  # fmt: skip
    return tile_all, tile_any & ~tile_all


def _causal_reach(blocks, block_size, rows, cols, last_q, first_k, causal_offset) -> torch.Tensor:
    """Bool ``[H, T]``: whether each of ``T`` tiles (covering block ``rows`` ``[T, wq]`` and
    ``cols`` ``[T, wk]``, its last query ``last_q`` and first key ``first_k`` ``[T]``) holds an
    active block with a causal pair: its first key in the tile at most its last query plus d."""
    block_last_q = torch.minimum((rows + 1) * block_size - 1, last_q[:, None])  # [T, wq]
    block_first_k = torch.maximum(cols * block_size, first_k[:, None])  # [T, wk]
    holds = block_first_k[:, None, :] <= block_last_q[:, :, None] + causal_offset
    active = blocks[:, rows[:, :, None], cols[:, None, :]]  # [H, T, wq, wk]
    return (active & holds).flatten(2).any(dim=2)


def _spans(seq: int, block_size: int, tile_size: int) -> torch.Tensor:
    """``[tiles, width]`` indices of the blocks each tile of a ``seq``-token axis covers, the
    last one repeated to fill the row (``any`` and ``all`` do not mind a repeat)."""
    starts = torch.arange(-(-seq // tile_size)) * tile_size
    first = starts // block_size
    last = ((starts + tile_size).clamp(max=seq) - 1) // block_size
    width = int((last - first).max()) + 1
    return torch.minimum(first[:, None] + torch.arange(width), last[:, None])


def _reduce(blocks: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, op) -> torch.Tensor:
    """``op`` (``torch.any`` or ``torch.all``) over the blocks each tile covers."""
    per_row = op(blocks[:, rows, :], dim=2)  # [H, tiles_q, N]
    return op(per_row[:, :, cols], dim=3)  # [H, tiles_q, tiles_k]


def kv_lists(tiles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Bool ``[H, M, N]`` tiles as int32 ``(num [1, H, M], indices [1, H, M, N])``, the
    ``BlockMask.from_kv_blocks`` form: each row's listed tiles first, in column order."""
    num = tiles.sum(dim=-1, dtype=torch.int32)
    indices = torch.argsort((~tiles).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return num[None], indices[None]


def listed_tiles(num: torch.Tensor, indices: torch.Tensor, n: int) -> torch.Tensor:
    """Bool ``[..., M, n]`` on the CPU: the tiles a ``(num [..., M], indices [..., M, K])`` pair
    lists (the inverse of ``kv_lists``). Raises ``ValueError`` for an index outside ``[0, n)``."""
    num, indices = num.to("cpu", torch.int64), indices.to("cpu", torch.int64)
    listed = torch.arange(indices.shape[-1]) < num[..., None]
    chosen = indices[listed]
    if chosen.numel() and (int(chosen.min()) < 0 or int(chosen.max()) >= n):
        raise ValueError(
            f"tile indices must be in [0, {n - 1}], got [{int(chosen.min())}, {int(chosen.max())}]"
        )
    dense = torch.zeros(*num.shape, n, dtype=torch.bool)
    dense[(*listed.nonzero(as_tuple=True)[:-1], chosen)] = True
    return dense


def layout_tiles(
    layout: Layout, causal: bool, tile_size: int, seq_lengths: tuple[int, int], causal_offset: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``tile_classes`` of ``layout``'s blocks and partial blocks."""
    partial = None if layout.partials is None else layout.partial_grid()
    return tile_classes(
        layout.blocks, layout.block_size, causal=causal, tile_size=tile_size,
        seq_lengths=seq_lengths, causal_offset=causal_offset, partial=partial,
    )  # fmt: skip


def check_tile_geometry(
    layout: Layout, tile_size: int, seq_lengths: tuple[int, int], what: str
) -> tuple[int, int]:
    """``seq_lengths`` as a tuple, once ``tile_size`` is ``layout``'s Flex tile and the lengths
    are its own (whole blocks or a partial last block); else ``ValueError`` naming ``what``."""
    expected_tile = flex_tile_size(layout.block_size)
    lengths = tuple(seq_lengths)
    whole = (layout.seq_len_q, layout.seq_len_k)
    covered = all(w - layout.block_size < n <= w for n, w in zip(lengths, whole, strict=True))
    if tile_size != expected_tile or not covered:
        raise ValueError(
            f"{what} has {tile_size}-token tiles over {lengths[0]} x {lengths[1]} tokens, but "
            f"its layout ({layout.block_size}-token blocks) has {expected_tile}-token tiles over "
            f"{whole[0]} x {whole[1]} tokens (or a partial last block of them)"
        )
    return lengths


def check_tiles(
    layout: Layout,
    causal: bool,
    tile_size: int,
    seq_lengths: tuple[int, int],
    full: torch.Tensor,
    partial: torch.Tensor,
    what: str,
    *,
    causal_offset: int = 0,
) -> None:
    """Raise ``ValueError`` naming ``what`` unless ``tile_size``, ``seq_lengths`` (whole blocks or
    a partial last block) and the bool ``[H, M, N]`` ``full`` and ``partial`` tiles are exactly
    those of ``layout`` (causal with ``causal_offset`` when ``causal``)."""
    lengths = check_tile_geometry(layout, tile_size, seq_lengths, what)
    want_full, want_partial = layout_tiles(layout, causal, tile_size, lengths, causal_offset)
    if full.shape != want_full.shape:
        raise ValueError(
            f"{what} lists tiles for [heads, rows, columns] {list(full.shape)}, but its layout "
            f"has {list(want_full.shape)}"
        )
    if not torch.equal(full, want_full) or not torch.equal(partial, want_partial):
        raise ValueError(f"{what} tile lists are not the tiles of its layout")
