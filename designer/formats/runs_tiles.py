"""A layout held as row runs seen in FlexAttention's tiles, without its dense grid.

``flex_tiles.tile_classes`` reduces a dense ``[H, M, N]`` grid to full, partial and absent
tiles; a long-context layout (32 heads x 2,048^2 blocks and past) has no grid to reduce. Here
the same classes come from the runs, as runs of tiles (``BlockRuns`` of ``[H, Mt, Nt]``), in
time and memory proportional to the runs and tile rows:

- a tile is *reached* when one of its block rows has a run entering its key blocks: each run
  ``[s, e)`` of a block row reaches tiles ``[s // r, ceil(e / r))`` of its tile row (``r`` blocks
  a tile), and the union over a tile row's block rows is one ``from_intervals``;
- it is *full* when every one of its block rows covers all of its key blocks: a row covers tiles
  ``[ceil(s / r), e // r)`` of each run (to the last, short tile when the run ends at ``N``), and
  the tiles every row of a group covers are the complement of the union of each row's gaps;
- a partial block (a token mask) never makes its tile full; causal keeps ``k_idx <= q_idx + d``
  as ``tile_classes`` does: a full tile must be wholly causal, and a reached tile must hold an
  active block with a causal pair, which is the block runs clipped at each block row's last
  causal key block.

Tiles are the layout's own blocks grouped ``r = tile / block`` to a side, so ``tile_size`` must
be a multiple of ``block_size`` (``flex_tile_size`` is, for blocks dividing 128 tokens or
multiples of it); other block sizes straddle tiles and are refused here.

``kv_lists_of_runs`` turns tile runs into ``BlockMask`` lists ``(num [1, H, Mt], indices [1, H,
Mt, K])`` as compact as the longest row allows (``K`` its tiles plus one: Flex's kernels read
one index past a row's last while prefetching) or ``width`` wide (FA4 checks that its lists
have one entry per key tile).

>>> from designer.block_runs import BlockRuns
>>> runs = BlockRuns.from_dense(torch.ones(1, 8, 8, dtype=torch.bool))
>>> full, partial = tile_runs(runs, 32, causal=True, tile_size=128)
>>> full.to_dense()[0].int().tolist(), partial.to_dense()[0].int().tolist()
([[0, 0], [1, 0]], [[1, 0], [0, 1]])
>>> num, indices = kv_lists_of_runs(full)
>>> num.tolist(), indices.tolist()
([[[0, 1]]], [[[[0, 0], [0, 0]]]])
"""

from __future__ import annotations

import torch

from designer.block_runs import BlockRuns
from designer.validate import check_int


def tile_runs(
    runs: BlockRuns,
    block_size: int,
    *,
    causal: bool,
    tile_size: int,
    seq_lengths: tuple[int, int] | None = None,
    causal_offset: int = 0,
    partial_cells: torch.Tensor | None = None,
) -> tuple[BlockRuns, BlockRuns]:
    """``(full, partial)`` tiles of ``runs`` as ``BlockRuns`` of ``[H, ceil(Sq / tile),
    ceil(Sk / tile)]``, equal to ``tile_classes`` of the dense grid (see the module doc).

    ``seq_lengths`` is ``(Sq, Sk)`` (default: whole blocks; the caller checks that the blocks
    cover them), ``causal_offset`` the ``d`` of ``k_idx <= q_idx + d``, ``partial_cells`` the
    int ``[P, 3]`` ``(head, q_block, k_block)`` of partial blocks, which are never full.
    """
    block = check_int("block_size", block_size, low=1)
    tile = check_int("tile_size", tile_size, low=1)
    if tile % block:
        raise ValueError(
            f"tile_size must be a multiple of block_size {block} for tiles from runs, got {tile}"
        )
    heads, n_q, n_k = runs.shape
    seq_q, seq_k = seq_lengths or (n_q * block, n_k * block)
    ratio = tile // block
    shape = (heads, -(-n_q // ratio), -(-n_k // ratio))
    rows = runs.run_rows()
    tile_rows = rows // n_q * shape[1] + rows % n_q // ratio

    covering = runs
    if partial_cells is not None and len(partial_cells):
        covering = runs.difference(BlockRuns.from_cells(runs.shape, partial_cells))
    full = _covered_by_every_row(covering, ratio, shape)
    reaching = runs
    if causal:
        last_q = torch.clamp((torch.arange(n_q) + 1) * block, max=seq_q) - 1  # per block row
        causal_stop = torch.div(last_q + causal_offset, block, rounding_mode="floor") + 1
        stops = torch.minimum(runs.stops.to(torch.int64), causal_stop[rows % n_q])
        reaching = BlockRuns.from_intervals(runs.shape, rows, runs.starts, stops)
        rows = reaching.run_rows()
        tile_rows = rows // n_q * shape[1] + rows % n_q // ratio
        first_q = torch.arange(shape[1]) * tile
        last_k = torch.clamp((torch.arange(shape[2]) + 1) * tile, max=seq_k) - 1
        wholly = torch.searchsorted(last_k, first_q + causal_offset, right=True)
        wholly_tiles = BlockRuns.from_intervals(
            (1, *shape[1:]), torch.arange(shape[1]), torch.zeros_like(wholly), wholly
        )
        full = full.intersection(wholly_tiles)
    starts = reaching.starts.to(torch.int64) // ratio
    stops = -(-reaching.stops.to(torch.int64) // ratio)
    reached = BlockRuns.from_intervals(shape, tile_rows, starts, stops)
    return full, reached.difference(full)


def _covered_by_every_row(runs: BlockRuns, ratio: int, shape: tuple[int, int, int]) -> BlockRuns:
    """The tiles of ``shape`` all of whose ``ratio`` block rows (fewer in a last, short tile
    row) cover every key block: the complement of the union of each block row's gaps."""
    heads, n_q, n_k = runs.shape
    n_tiles = shape[2]
    starts = -(-runs.starts.to(torch.int64) // ratio)
    stops = runs.stops.to(torch.int64) // ratio
    stops[runs.stops.to(torch.int64) == n_k] = n_tiles  # the last tile may be short
    covered = BlockRuns.from_intervals((heads, n_q, n_tiles), runs.run_rows(), starts, stops)
    gaps = covered.complement()
    rows = gaps.run_rows()
    tile_rows = rows // n_q * shape[1] + rows % n_q // ratio
    return BlockRuns.from_intervals(shape, tile_rows, gaps.starts, gaps.stops).complement()


def kv_lists_of_runs(
    tiles: BlockRuns, width: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``tiles`` (``[H, Mt, Nt]`` runs) as int32 ``(num [1, H, Mt], indices [1, H, Mt, K])``,
    the ``BlockMask.from_kv_blocks`` form, each row's tiles first in column order and the rest
    0: ``K`` is ``width`` (at least the longest row) or the longest row plus one."""
    heads, n_rows, _ = tiles.shape
    counts = tiles.row_counts().reshape(-1)
    longest = int(counts.max()) if counts.numel() else 0
    if width is None:
        width = longest + 1
    elif check_int("width", width, low=1) < longest:
        raise ValueError(f"width must hold the longest row's {longest} tiles, got {width}")
    columns = tiles.columns()
    row_of = torch.repeat_interleave(torch.arange(heads * n_rows), counts)
    first = torch.cumsum(counts, 0) - counts
    position = torch.arange(len(columns)) - first[row_of]
    indices = torch.zeros(heads * n_rows, width, dtype=torch.int32)
    indices[row_of, position] = columns.to(torch.int32)
    return counts.to(torch.int32).view(1, heads, n_rows), indices.view(1, heads, n_rows, width)
