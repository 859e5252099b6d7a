"""Partial blocks: a layout's token masks inside blocks, checked once and cut into kernel tiles.

A block is empty, full or partial. A partial block carries the tokens it lets through:
``index`` int32 ``[P, 3]`` rows ``(head, q_block, k_block)``, sorted and unique, each an active
block of the layout; ``bits`` uint8 ``[P, block, ceil(block / 8)]``, row r for query token r of
the block, bit ``k % 8`` of byte ``k // 8`` for key token k (``numpy.packbits(...,
bitorder="little")``). Full blocks have no entry. The token rule::

    allowed(h, q, k) = block active AND (no entry OR bit set) AND (not causal OR causal rule)
                       AND q < seq_q AND k < seq_k

A layout of one head serves every query head; its entries then name head 0.

The kernels compute ``block_m x block_n`` tiles whatever the block size, so a tile may hold
several blocks (blocks of 16 or 32 in a 64- or 128-token tile) or part of one (a 128-block in
64-token tiles). Each table therefore cuts the token masks along its own tiles
(``token_tiles``): every tile holding an active part of a partial block becomes a *token tile*
whose whole mask (its blocks' activity, their bits, the causal limit and ``seq_k`` folded in)
is stored as rows of 32-bit words, in the orientation of the kernel's score accumulators: the
forward's rows are queries, each ``ceil(block_n / 32)`` words over keys; the backward's rows are
keys, each ``ceil(block_m / 32)`` words over queries. A kernel then reads one word per
accumulator row and 32 columns from a single index (no lookup per block inside the tile), and a
full tile reads nothing. A token tile that lets nothing through is dropped from the table.

>>> blocks = torch.ones(1, 2, 2, dtype=torch.bool)
>>> bits = torch.full((1, 64, 8), 0xFF, dtype=torch.uint8)
>>> found = check_partials((torch.tensor([[0, 1, 0]], dtype=torch.int32), bits), blocks, 64)
>>> found.count, found.block_size
(1, 64)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from designer.run_arrays import RunArrays, contains, run_keys
from designer.validate import check_int
from gpu.runtime import is_cupy

#: The most bytes of partial-block bits a plan takes (2 ** 28: e.g. 524,288 blocks of 64).
MAX_PARTIAL_BYTES = 1 << 28
#: The most bytes of token-tile words one kernel table may hold.
MAX_TOKEN_TILE_BYTES = 1 << 30
#: Token tiles expanded at once (bounds the expansion's scratch to ~2 ** 24 cells a pass).
_CELLS_PER_PASS = 1 << 24
#: The byte whose first ``n`` keys (low bits) are set, for ``n`` in 0..8.
LOW_BITS = np.array([(1 << n) - 1 for n in range(9)], dtype=np.uint8)


@dataclass(frozen=True)
class Partials:
    """Checked partial blocks on the CPU: ``index`` int64 ``[P, 3]`` numpy, ``bits`` uint8
    ``[P, block, ceil(block / 8)]`` numpy, the block size, and the int64 sort keys
    ``(head · M + q_block) · N + k_block``."""

    index: np.ndarray
    bits: np.ndarray
    block_size: int
    keys: np.ndarray

    @property
    def count(self) -> int:
        return len(self.index)

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Copies of ``(index int32, bits uint8)`` in the contract's format."""
        return (torch.from_numpy(self.index.astype(np.int32)), torch.from_numpy(self.bits.copy()))

    def same_as(self, other: Partials) -> bool:
        return np.array_equal(self.index, other.index) and np.array_equal(self.bits, other.bits)


def check_partials(
    partials: Any, blocks: torch.Tensor | RunArrays, block_size: int
) -> Partials | None:
    """The checked ``partials`` of a bool ``[H, M, N]`` layout or of its checked row runs
    (``designer.run_arrays``), or None when there are none.

    ``partials`` is ``(index, bits)`` (torch tensors, numpy or CuPy arrays) or an object with
    ``index`` and ``bits`` attributes (a ``designer`` ``PartialBlocks``). Every check names what
    is wrong: types, dtypes, shapes, the block size, the memory cap (checked before anything
    is copied), index ranges, order and uniqueness, and that every entry is an active block.
    """
    if partials is None:
        return None
    if hasattr(partials, "index") and hasattr(partials, "bits"):
        index, bits = partials.index, partials.bits
    elif isinstance(partials, (tuple, list)) and len(partials) == 2:
        index, bits = partials
    else:
        raise TypeError(
            "partials must be (index, bits) or an object with index and bits attributes, got "
            f"{type(partials).__name__}"
        )
    index, bits = _as_array("partials index", index), _as_array("partials bits", bits)
    if index.dtype != np.int32:
        raise TypeError(f"partials index must be int32, got {index.dtype}")
    if bits.dtype != np.uint8:
        raise TypeError(f"partials bits must be uint8, got {bits.dtype}")
    if index.ndim != 2 or index.shape[1] != 3:
        raise ValueError(
            f"partials index must be [P, 3] (head, q_block, k_block), got {list(index.shape)}"
        )
    row_bytes = -(-block_size // 8)
    count = index.shape[0]
    if bits.shape != (count, block_size, row_bytes):
        raise ValueError(
            f"partials bits must be [P, block, ceil(block / 8)] = {[count, block_size, row_bytes]}"
            f" for {count} entries of the layout's block_size {block_size}, got {list(bits.shape)}"
        )
    n_bytes = count * block_size * row_bytes
    if n_bytes > MAX_PARTIAL_BYTES:
        raise ValueError(
            f"partials hold {n_bytes:,} bytes of token bits ({count:,} blocks of {block_size}); "
            f"a plan takes at most {MAX_PARTIAL_BYTES:,}: use fewer partial blocks or larger "
            "full ones"
        )
    if count == 0:
        return None
    index = index.astype(np.int64)
    names = ("head", "q_block", "k_block")
    for column, (name, size) in enumerate(zip(names, blocks.shape, strict=True)):
        low, high = int(index[:, column].min()), int(index[:, column].max())
        if low < 0 or high >= size:
            value = low if low < 0 else high
            raise ValueError(
                f"partials index {name} must be in [0, {size - 1}] (the layout's "
                f"{list(blocks.shape)}), got {value}"
            )
    _, n_q_blocks, n_k_blocks = blocks.shape
    keys = (index[:, 0] * n_q_blocks + index[:, 1]) * n_k_blocks + index[:, 2]
    if count > 1 and not (np.diff(keys) > 0).all():
        at = int(np.flatnonzero(np.diff(keys) <= 0)[0]) + 1
        raise ValueError(
            "partials index must be sorted by (head, q_block, k_block) and unique; row "
            f"{at} {index[at].tolist()} follows {index[at - 1].tolist()}"
        )
    if isinstance(blocks, RunArrays):
        active = contains(blocks, run_keys(blocks), index[:, 0], index[:, 1], index[:, 2])
    else:
        active = blocks.numpy()[index[:, 0], index[:, 1], index[:, 2]]
    if not active.all():
        at = int(np.flatnonzero(~active)[0])
        raise ValueError(
            f"partials index row {at} {index[at].tolist()} names an inactive block; a partial "
            "block must be active in the layout"
        )
    return Partials(index, np.ascontiguousarray(bits), block_size, keys)


def split_token_mask(
    mask: torch.Tensor, block_size: int, *, implied: torch.Tensor | None = None
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """``(blocks, (index, bits))`` of a bool ``[H, Sq, Sk]`` token mask: a block is active where
    it lets some token through, full where it lets through every token that ``implied`` (a bool
    ``[Sq, Sk]`` rule the plan applies anyway, such as the causal limit; default all) keeps,
    partial otherwise. Lengths that are not whole blocks pad with masked tokens.

    >>> mask = torch.ones(1, 64, 64, dtype=torch.bool).tril()
    >>> blocks, (index, bits) = split_token_mask(mask, 32)
    >>> blocks[0].int().tolist(), index.tolist()
    ([[1, 0], [1, 1]], [[0, 0, 0], [0, 1, 1]])
    """
    block_size = check_int("block_size", block_size, low=1)
    n_heads, seq_q, seq_k = mask.shape
    n_q, n_k = -(-seq_q // block_size), -(-seq_k // block_size)
    padded = torch.zeros(n_heads, n_q * block_size, n_k * block_size, dtype=torch.bool)
    padded[:, :seq_q, :seq_k] = mask.cpu()
    kept = torch.zeros_like(padded[0])
    kept[:seq_q, :seq_k] = True if implied is None else implied.cpu()
    tiles = padded.view(n_heads, n_q, block_size, n_k, block_size).transpose(2, 3)
    kept = kept.view(n_q, block_size, n_k, block_size).transpose(1, 2)
    blocks = tiles.any((3, 4))
    full = (tiles | ~kept).all((3, 4))
    index = (blocks & ~full).nonzero()
    cells = tiles[index[:, 0], index[:, 1], index[:, 2]].numpy()
    bits = np.packbits(cells, axis=-1, bitorder="little")
    return blocks, (index.to(torch.int32), torch.from_numpy(bits))


def check_token_path(layout: Any, config: Any) -> None:
    """Refuse a Hopper kernel build (``config``: a forward, backward or dQ config) without the
    token-tile path (``config.tokens``) for a plan (``layout``) with partial blocks: it would
    compute their tiles unmasked. A plan chooses such builds itself."""
    if layout.n_partials and not config.tokens:
        raise ValueError(
            f"the plan has {layout.n_partials} partial blocks, which {type(config).__name__} "
            "masks only with tokens=True (the builds a plan chooses for partial blocks have it), "
            "got tokens=False"
        )


def _as_array(name: str, value: Any) -> np.ndarray:
    if is_cupy(value):
        value = torch.from_dlpack(value)
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    raise TypeError(
        f"{name} must be a torch tensor, numpy or CuPy array, got {type(value).__name__}"
    )


@dataclass(frozen=True)
class TokenTiles:
    """One table's token tiles: ``ids`` int32 ``[H, q_tiles, k_tiles]`` (-1: none; else the
    tile's row of ``words`` in the order the kernel walks its table), ``words`` int32 ``[T,
    rows, row_words]`` (see the module doc), and ``dropped``: token tiles that let nothing
    through (bool ``[H, q_tiles, k_tiles]``)."""

    ids: np.ndarray
    words: torch.Tensor
    dropped: np.ndarray


def token_tiles(
    partials: Partials,
    blocks: torch.Tensor,
    cell_words: np.ndarray,
    *,
    block_m: int,
    block_n: int,
    causal: bool,
    causal_offset: int,
    seq_q: int,
    seq_k: int,
    by_key_tile: bool,
) -> TokenTiles:
    """The token tiles of a table of ``block_m x block_n`` tiles whose cell mask words are
    ``cell_words`` (``gpu.forward.lut.tile_masks``). ``by_key_tile`` gives the backward's form:
    tiles numbered in (head, key tile, query tile) order, rows over keys."""
    head, q_tile, k_tile, cell = _pieces(partials, block_m, block_n, seq_q, seq_k)
    word = cell_words[head, q_tile, k_tile]
    live = (word >> cell.astype(np.uint64)) & np.uint64(1) == 1  # the cell is computed
    grid = np.zeros(cell_words.shape, dtype=bool)
    grid[head[live], q_tile[live], k_tile[live]] = True
    order = grid.transpose(0, 2, 1) if by_key_tile else grid
    found = np.nonzero(order)  # the kernel's walk order
    tiles = np.stack(found, axis=1)
    if by_key_tile:
        tiles = tiles[:, [0, 2, 1]]  # back to (head, q_tile, k_tile)
    context = _Expansion(partials, blocks.numpy(), block_m, block_n, causal, causal_offset,
                         seq_q, seq_k)  # fmt: skip
    packed, empty = context.words(tiles, by_key_tile)
    ids = np.full(cell_words.shape, -1, dtype=np.int32)
    kept = ~empty
    ids[tuple(tiles[kept].T)] = np.arange(int(kept.sum()), dtype=np.int32)
    dropped = np.zeros(cell_words.shape, dtype=bool)
    dropped[tuple(tiles[empty].T)] = True
    return TokenTiles(ids, packed, dropped)


@dataclass(frozen=True)
class RunTokenTiles:
    """``TokenTiles`` of a table built from row runs, by the tiles' keys ``(head · q_tiles +
    q_tile) · k_tiles + k_tile`` (int64) instead of grids: ``keys`` of the token tiles kept,
    in the order the kernel walks its table (row ``i`` of ``words`` is token tile ``i``), and
    ``dropped``, the sorted keys of those that let nothing through."""

    keys: np.ndarray
    words: torch.Tensor
    dropped: np.ndarray


def run_token_tiles(
    partials: Partials,
    runs: RunArrays,
    tile_keys: np.ndarray,
    tile_words: np.ndarray,
    *,
    n_q_tiles: int,
    n_k_tiles: int,
    block_m: int,
    block_n: int,
    causal: bool,
    causal_offset: int,
    seq_q: int,
    seq_k: int,
    by_key_tile: bool,
) -> RunTokenTiles:
    """``token_tiles`` of a layout held as ``runs``, whose active tiles are the sorted int64
    ``tile_keys`` (as ``RunTokenTiles``) with uint64 cell mask words ``tile_words``: the same
    token tiles, numbered alike, their words equal, with no grid of tiles or blocks."""
    head, q_tile, k_tile, cell = _pieces(partials, block_m, block_n, seq_q, seq_k)
    keys = (head * n_q_tiles + q_tile) * n_k_tiles + k_tile
    at = np.minimum(np.searchsorted(tile_keys, keys), max(len(tile_keys) - 1, 0))
    found = tile_keys[at] == keys if len(tile_keys) else np.zeros(len(keys), dtype=bool)
    word = np.where(found, tile_words[at] if len(tile_keys) else 0, np.uint64(0))
    live = found & ((word >> cell.astype(np.uint64)) & np.uint64(1) == 1)
    unique = np.unique(keys[live])  # (head, q_tile, k_tile) order
    rows, k_tiles = np.divmod(unique, n_k_tiles)
    tiles = np.stack([*np.divmod(rows, n_q_tiles), k_tiles], axis=1)
    if by_key_tile:  # (head, k_tile, q_tile) order
        order = np.lexsort((tiles[:, 1], tiles[:, 2], tiles[:, 0]))
        tiles, unique = tiles[order], unique[order]
    context = _Expansion(partials, runs, block_m, block_n, causal, causal_offset, seq_q, seq_k)
    packed, empty = context.words(tiles, by_key_tile)
    return RunTokenTiles(unique[~empty], packed, np.sort(unique[empty]))


def _pieces(
    partials: Partials, block_m: int, block_n: int, seq_q: int, seq_k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(head, q_tile, k_tile, cell)`` of every (partial block, tile) piece inside the
    lengths: a block covers one cell of a tile, or one in each tile it spans."""
    block = partials.block_size
    sub_rows, sub_cols = min(block, block_m), min(block, block_n)
    per_row = block_n // sub_cols
    span_q, span_k = max(1, block // block_m), max(1, block // block_n)
    head = np.repeat(partials.index[:, 0], span_q * span_k)
    q_first = np.repeat(partials.index[:, 1] * block, span_q * span_k)
    k_first = np.repeat(partials.index[:, 2] * block, span_q * span_k)
    q_first += np.tile(np.repeat(np.arange(span_q) * block_m, span_k), partials.count)
    k_first += np.tile(np.arange(span_k) * block_n, span_q * partials.count)
    inside = (q_first < seq_q) & (k_first < seq_k)
    head, q_first, k_first = head[inside], q_first[inside], k_first[inside]
    q_tile, k_tile = q_first // block_m, k_first // block_n
    cell = ((q_first % block_m) // sub_rows) * per_row + (k_first % block_n) // sub_cols
    return head, q_tile, k_tile, cell


@dataclass(frozen=True)
class _Expansion:
    """What ``token_tiles`` needs to expand a batch of tiles into their token masks."""

    partials: Partials
    blocks: np.ndarray | RunArrays
    block_m: int
    block_n: int
    causal: bool
    causal_offset: int
    seq_q: int
    seq_k: int

    @functools.cached_property
    def _run_keys(self) -> np.ndarray:
        return run_keys(self.blocks)

    def words(self, tiles: np.ndarray, by_key_tile: bool) -> tuple[torch.Tensor, np.ndarray]:
        """``(words, empty)`` of token tiles ``(head, q_tile, k_tile)`` ``[T, 3]``: int32
        ``[kept, rows, row_words]`` token masks of the tiles that let something through (the
        module doc gives the form), and bool ``[T]``, those that let nothing through."""
        rows, columns = self.block_m, self.block_n
        if by_key_tile:
            rows, columns = columns, rows
        row_words = -(-columns // 32)
        n_bytes = len(tiles) * rows * row_words * 4
        if n_bytes > MAX_TOKEN_TILE_BYTES:
            raise ValueError(
                f"the partial blocks touch {len(tiles):,} kernel tiles of {self.block_m} x "
                f"{self.block_n}, {n_bytes:,} bytes of token masks; a table holds at most "
                f"{MAX_TOKEN_TILE_BYTES:,}"
            )
        words = np.zeros((len(tiles), rows, row_words * 4), dtype=np.uint8)
        chunk = max(1, _CELLS_PER_PASS // (self.block_m * self.block_n))
        empty = np.zeros(len(tiles), dtype=bool)
        for first in range(0, len(tiles), chunk):
            mask = self.mask_bytes(tiles[first : first + chunk])  # [C, block_m, block_n / 8]
            empty[first : first + chunk] = ~mask.any((1, 2))
            if not by_key_tile:  # the bytes are the rows' words already
                words[first : first + chunk, :, : mask.shape[2]] = mask
                continue
            masks = np.unpackbits(mask, axis=2, bitorder="little").transpose(0, 2, 1)
            padded = np.zeros((*masks.shape[:2], row_words * 32), dtype=np.uint8)
            padded[..., : masks.shape[2]] = masks
            words[first : first + chunk] = np.packbits(padded, axis=-1, bitorder="little")
        kept = ~empty
        none = np.zeros((0, rows, row_words), np.int32)
        packed = words[kept].view("<i4") if kept.any() else none
        return torch.from_numpy(np.ascontiguousarray(packed)), empty

    def mask_bytes(self, tiles: np.ndarray) -> np.ndarray:
        """uint8 ``[C, block_m, block_n / 8]``: the token rule on tiles ``(head, q_tile,
        k_tile)``, each query row's keys as little-endian bits, 8 keys a byte.

        Blocks are looked up once per cell of the tile (a block or the part of one in it),
        their bits read a byte at a time, then the lengths and the causal limit applied a byte
        at a time too (the keys of a byte kept are its first ``n``: ``LOW_BITS[n]``).
        """
        block, bits = self.partials.block_size, self.partials.bits
        _, n_q_blocks, n_k_blocks = self.blocks.shape
        sub_rows, sub_cols = min(block, self.block_m), min(block, self.block_n)
        head, q_tile, k_tile = tiles[:, 0:1], tiles[:, 1:2], tiles[:, 2:3]
        q_block = (q_tile * self.block_m + np.arange(0, self.block_m, sub_rows)) // block
        k_block = (k_tile * self.block_n + np.arange(0, self.block_n, sub_cols)) // block
        inside = (q_block < n_q_blocks)[:, :, None] & (k_block < n_k_blocks)[:, None, :]
        q_block, k_block = np.minimum(q_block, n_q_blocks - 1), np.minimum(k_block, n_k_blocks - 1)
        at_cells = (head[:, :, None], q_block[:, :, None], k_block[:, None, :])
        if isinstance(self.blocks, RunArrays):
            active = contains(self.blocks, self._run_keys, *at_cells) & inside
        else:
            active = self.blocks[at_cells] & inside
        keys = ((head * n_q_blocks + q_block) * n_k_blocks)[:, :, None] + k_block[:, None, :]
        at = np.minimum(np.searchsorted(self.partials.keys, keys), self.partials.count - 1)
        partial = self.partials.keys[at] == keys  # [C, cells down, cells across]

        def per_byte(cells: np.ndarray) -> np.ndarray:  # -> [C, block_m, block_n / 8]
            return np.repeat(np.repeat(cells, sub_rows, 1), sub_cols // 8, 2)

        q = q_tile * self.block_m + np.arange(self.block_m)  # [C, block_m]
        k = k_tile * self.block_n + np.arange(self.block_n)  # [C, block_n]
        row_bytes = bits.shape[2]
        at_byte = (per_byte(at) * block + (q % block)[:, :, None]) * row_bytes
        byte = bits.reshape(-1)[at_byte + ((k[:, ::8] % block) // 8)[:, None, :]]
        byte = np.where(per_byte(partial), byte, np.uint8(0xFF)) & np.where(
            per_byte(active), np.uint8(0xFF), np.uint8(0)
        )
        first_key = k[:, None, ::8]  # [C, 1, block_n / 8]
        kept = np.clip(self.seq_k - first_key, 0, 8)
        if self.causal:  # keys k <= q + offset
            reach = q[:, :, None] + (self.causal_offset + 1) - first_key
            kept = np.minimum(kept, np.clip(reach, 0, 8))
        rows = np.where(q < self.seq_q, np.uint8(0xFF), np.uint8(0))[:, :, None]
        return byte & LOW_BITS[kept] & rows
