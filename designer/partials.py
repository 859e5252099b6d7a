"""Partial blocks: the token mask inside each block that is neither full nor empty.

A layout's block is empty, full or partial. ``PartialBlocks`` holds the partial ones only:

- ``index`` int32 ``[P, 3]``: ``(head, q_block, k_block)`` of each, sorted and unique;
- ``bits`` uint8 ``[P, block, ceil(block / 8)]``: row ``r`` is query token ``r`` of the block,
  bit ``k % 8`` of byte ``k // 8`` (little-endian, as ``numpy.packbits(..., bitorder="little")``)
  says key token ``k`` of the block may be attended.

At block 64 a partial block is 512 bytes, so a design keeps masks only where they say
something. Memory is bounded: at most ``MAX_PARTIAL_BYTES`` of bits and ``MAX_PARTIALS``
blocks, refused with the count and the limit beyond.

The helpers below work on the packed bytes and on sorted keys (``(head << 32) | (row << 16) |
col``), never on a dense ``[H, M, N]`` table of slots, so their cost follows the partial blocks.

>>> masks = torch.tril(torch.ones(4, 4, dtype=torch.bool))[None]
>>> partials = PartialBlocks.of_masks(torch.tensor([[0, 1, 1]]), masks)
>>> partials.bits[0, :, 0].tolist(), partials.unpack().equal(masks)
([1, 3, 7, 15], True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from designer.block_runs import BlockRuns
from designer.units import bytes_text

#: Most bytes of partial-block bits a layout may hold (65,536 blocks of 64 tokens: a
#: 1,000-token window over 65,536 tokens and 16 heads takes 48,656). Each head keeps its own.
MAX_PARTIAL_BYTES = 32 << 20
#: Most partial blocks a layout may hold (at block 16 a block's bits are 32 bytes).
MAX_PARTIALS = 1 << 20
#: Bits set in each byte value.
POPCOUNT = np.array([bin(v).count("1") for v in range(256)], dtype=np.int64)
_ROW, _HEAD = 16, 32


def row_bytes(block_size: int) -> int:
    """Bytes of one token row of a block's mask: ``ceil(block_size / 8)``."""
    return -(-block_size // 8)


def pack_masks(masks: torch.Tensor) -> torch.Tensor:
    """Bool ``[..., b, b]`` token masks as uint8 ``[..., b, ceil(b / 8)]`` little-endian bits."""
    packed = np.packbits(masks.numpy(), axis=-1, bitorder="little")
    return torch.from_numpy(packed)


def unpack_bits(bits: torch.Tensor, block_size: int) -> torch.Tensor:
    """The bool ``[..., b, b]`` masks of uint8 ``[..., b, ceil(b / 8)]`` bits."""
    unpacked = np.unpackbits(bits.numpy(), axis=-1, count=block_size, bitorder="little")
    return torch.from_numpy(unpacked.view(np.bool_))


def keys_of(index: torch.Tensor) -> torch.Tensor:
    """int64 ``[P]`` sort keys of ``(head, row, col)`` rows: ordered as the rows are."""
    index = index.to(torch.int64)
    return (index[:, 0] << _HEAD) | (index[:, 1] << _ROW) | index[:, 2]


def index_of(keys: torch.Tensor) -> torch.Tensor:
    """int32 ``[P, 3]`` ``(head, row, col)`` of sort keys (the inverse of ``keys_of``)."""
    mask = (1 << _ROW) - 1
    return torch.stack([keys >> _HEAD, (keys >> _ROW) & mask, keys & mask], dim=1).to(torch.int32)


@dataclass(frozen=True, eq=False)
class PartialBlocks:
    """The token masks of a layout's partial blocks (see the module docstring)."""

    index: torch.Tensor
    bits: torch.Tensor

    def __post_init__(self) -> None:
        index, bits = self.index, self.bits
        for name, value in (("index", index), ("bits", bits)):
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"partial {name} must be a torch tensor, got {type(value).__name__}"
                )
        if index.dtype != torch.int32 or index.dim() != 2 or index.shape[1] != 3:
            raise ValueError(
                f"partial index must be int32 [P, 3] (head, q_block, k_block), got "
                f"{index.dtype} {list(index.shape)}"
            )
        if bits.dtype != torch.uint8 or bits.dim() != 3 or bits.shape[1] < 1:
            raise ValueError(
                f"partial bits must be uint8 [P, block, ceil(block / 8)], got {bits.dtype} "
                f"{list(bits.shape)}"
            )
        block = bits.shape[1]
        if bits.shape[0] != index.shape[0] or bits.shape[2] != row_bytes(block):
            raise ValueError(
                f"partial bits must be [{index.shape[0]}, {block}, {row_bytes(block)}] for "
                f"{index.shape[0]} blocks of {block} tokens, got {list(bits.shape)}"
            )
        check_partial_size(index.shape[0], block)
        index, bits = index.cpu().contiguous(), bits.cpu().contiguous()
        if index.numel():
            low = int(index.min())
            if low < 0 or int(index[:, 1:].max()) >= 1 << _ROW or int(index[:, 0].max()) >= 1 << 15:
                raise ValueError(f"partial index must hold block indices >= 0, got {low}")
            keys = keys_of(index)
            if bool((keys[1:] <= keys[:-1]).any()):
                raise ValueError("partial index must be sorted by (head, q_block, k_block), unique")
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "bits", bits)

    @classmethod
    def of_masks(cls, index: torch.Tensor, masks: torch.Tensor) -> PartialBlocks:
        """Partial blocks from ``(head, q_block, k_block)`` rows and bool ``[P, b, b]`` masks."""
        return cls(index.to(torch.int32), pack_masks(masks.to(torch.bool)))

    @classmethod
    def empty(cls, block_size: int) -> PartialBlocks:
        """No partial blocks, at ``block_size``."""
        zeros = torch.zeros(0, block_size, row_bytes(block_size), dtype=torch.uint8)
        return cls(torch.zeros(0, 3, dtype=torch.int32), zeros)

    @property
    def block_size(self) -> int:
        return self.bits.shape[1]

    @property
    def count(self) -> int:
        return self.index.shape[0]

    @property
    def nbytes(self) -> int:
        return self.index.nbytes + self.bits.nbytes

    @property
    def keys(self) -> torch.Tensor:
        return keys_of(self.index)

    def unpack(self) -> torch.Tensor:
        """Bool ``[P, block, block]``: each partial block's token mask."""
        return unpack_bits(self.bits, self.block_size)

    def allowed_tokens(self) -> int:
        """Token pairs the partial blocks allow, all together."""
        return int(POPCOUNT[self.bits.numpy()].sum())

    def take(self, keep: torch.Tensor) -> PartialBlocks:
        """The partial blocks where bool ``keep`` ``[P]`` is set (still sorted)."""
        return PartialBlocks(self.index[keep], self.bits[keep])

    def head_range(self, head: int) -> slice:
        """The rows of ``head``'s partial blocks (rows are sorted by head first)."""
        heads = self.index[:, 0].contiguous()
        first = int(torch.searchsorted(heads, head))
        last = int(torch.searchsorted(heads, head, right=True))
        return slice(first, last)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PartialBlocks):
            return NotImplemented
        return torch.equal(self.index, other.index) and torch.equal(self.bits, other.bits)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PartialBlocks(count={self.count}, block_size={self.block_size})"


def distinct_masks(partials: PartialBlocks) -> tuple[torch.Tensor, torch.Tensor]:
    """``(masks, slots)``: bool ``[1 + U, b, b]``, an all-true slot 0 then each distinct token
    mask of the partial blocks once, and int32 ``[P]``, each partial block's slot in it (a
    ``mask_mod``'s table: slot 0 for a token pair in no partial block).

    One byte a token pair, eight times the bits: FlexAttention's FLASH backend compiles no bit
    shift in a ``mask_mod`` (``tools/probes/flash_token_mask.py``). Stored once per distinct
    mask, which keeps it small: the blocks a window's or a document's edge crosses repeat a few
    masks over every head and row.
    """
    bits = partials.bits.numpy()
    rows = bits.reshape(partials.count, -1).view(f"V{bits[0].size}").reshape(-1)  # one per block
    found, which = np.unique(rows, return_inverse=True)  # 100x faster than np.unique(axis=0)
    block = partials.block_size
    masks = unpack_bits(torch.from_numpy(found.view(np.uint8).reshape(-1, *bits.shape[1:])), block)
    ones = torch.ones((1, block, block), dtype=torch.bool)
    return torch.cat([ones, masks]), torch.from_numpy(which.reshape(-1).astype(np.int32) + 1)


def check_partial_size(count: int, block_size: int) -> None:
    """Raise ``ValueError`` giving the size and the limit when ``count`` partial blocks of
    ``block_size`` tokens would pass what a layout may hold."""
    size = count * block_size * row_bytes(block_size)
    if count > MAX_PARTIALS or size > MAX_PARTIAL_BYTES:
        # A mask's edges cross about as many of its tokens at any block size: fewer, larger
        # partial blocks take about the same bytes.
        advice = ("use larger blocks" if count > MAX_PARTIALS else
                  "the block size changes them little (a mask's edges hold about as many "
                  "tokens at any size): use fewer heads or shorter sequences")  # fmt: skip
        raise ValueError(
            f"{count:,} partial blocks of {block_size} tokens would take {bytes_text(size)} of "
            f"token masks, more than the limit of {MAX_PARTIALS:,} blocks and "
            f"{bytes_text(MAX_PARTIAL_BYTES)}; {advice}, or a mask with fewer partial blocks"
        )


def concat(parts: list[PartialBlocks], block_size: int) -> PartialBlocks:
    """Partial blocks joined in order (each part's keys above the previous part's)."""
    if not parts:
        return PartialBlocks.empty(block_size)
    check_partial_size(sum(part.count for part in parts), block_size)
    return PartialBlocks(
        torch.cat([part.index for part in parts]), torch.cat([part.bits for part in parts])
    )


def sorted_blocks(index: torch.Tensor, bits: torch.Tensor) -> PartialBlocks:
    """Partial blocks from unsorted (but unique) rows."""
    order = torch.argsort(keys_of(index))
    return PartialBlocks(index[order].to(torch.int32), bits[order].contiguous())


def valid_bits(index: torch.Tensor, block_size: int, seq_q: int, seq_k: int) -> torch.Tensor:
    """uint8 ``[P, b, ceil(b / 8)]``: the bits of the tokens inside the sequence lengths (and
    inside the block) for each partial block, the mask normal bits must lie in."""
    b = block_size
    rows_in = torch.clamp(seq_q - index[:, 1].to(torch.int64) * b, max=b)  # [P]
    cols_in = torch.clamp(seq_k - index[:, 2].to(torch.int64) * b, max=b)
    row_mask = torch.arange(b)[None, :] < rows_in[:, None]  # [P, b]
    limits, which = torch.unique(cols_in, return_inverse=True)
    col_bytes = pack_masks(torch.arange(b)[None, :] < limits[:, None])  # [L, nb]
    return col_bytes[which][:, None, :] * row_mask[:, :, None].to(torch.uint8)


Blocks = torch.Tensor | BlockRuns


def active_at(blocks: Blocks, index: torch.Tensor) -> torch.Tensor:
    """Bool ``[P]``: whether the ``(head, q_block, k_block)`` rows of ``index`` are active in a
    dense grid or in runs."""
    if isinstance(blocks, BlockRuns):
        return blocks.contains(index)
    return blocks[tuple(index.to(torch.int64).T)]


def set_cells(blocks: Blocks, index: torch.Tensor, value: bool) -> Blocks:
    """``blocks`` with the cells of ``index`` made active (``value``) or inactive: a dense grid
    in place, runs as new runs."""
    if isinstance(blocks, BlockRuns):
        cells = BlockRuns.from_cells(blocks.shape, index)
        return blocks.union(cells) if value else blocks.difference(cells)
    blocks[tuple(index.to(torch.int64).T)] = value
    return blocks


def normalise(
    blocks: Blocks, partials: PartialBlocks, seq_q: int, seq_k: int
) -> tuple[Blocks, PartialBlocks | None]:
    """``(blocks, partials)`` in normal form: bits outside the lengths cleared, a partial block
    that allows every token it holds stored as full, one that allows none made inactive.

    ``blocks`` is copied only when a block becomes inactive. Raises ``ValueError`` for a
    partial block outside the grid or not active in it.
    """
    b = partials.block_size
    if not partials.count:
        return blocks, None
    index = partials.index
    h, m, n = blocks.shape
    limits = torch.tensor([h, m, n], dtype=torch.int32)
    outside = (index >= limits).any(dim=1)
    if bool(outside.any()):
        first = index[outside][0].tolist()
        raise ValueError(f"partial block {tuple(first)} is outside the layout's {[h, m, n]} blocks")
    inactive = ~active_at(blocks, index)
    if bool(inactive.any()):
        first = index[inactive][0].tolist()
        raise ValueError(f"partial block {tuple(first)} must be an active block of the layout")
    valid = valid_bits(index, b, seq_q, seq_k)
    bits = partials.bits & valid
    full = (bits == valid).flatten(1).all(dim=1)
    empty = (bits == 0).flatten(1).all(dim=1)
    if bool(empty.any()):
        dense = not isinstance(blocks, BlockRuns)
        blocks = set_cells(blocks.clone() if dense else blocks, index[empty], False)
    keep = ~(full | empty)
    if not bool(keep.any()):
        return blocks, None
    if bool(keep.all()) and torch.equal(bits, partials.bits):
        return blocks, partials
    return blocks, PartialBlocks(index[keep], bits[keep])


def lookup(partials: PartialBlocks | None, keys: torch.Tensor, block_size: int) -> tuple:
    """``(found [K] bool, bits [K, b, nb])``: the partial blocks at ``keys`` (zeros if none)."""
    nb = row_bytes(block_size)
    bits = torch.zeros(len(keys), block_size, nb, dtype=torch.uint8)
    if partials is None or not partials.count:
        return torch.zeros(len(keys), dtype=torch.bool), bits
    own = partials.keys
    at = torch.searchsorted(own, keys).clamp(max=len(own) - 1)
    found = own[at] == keys
    bits[found] = partials.bits[at[found]]
    return found, bits


def cell_bits(
    blocks: Blocks, partials: PartialBlocks | None, keys: torch.Tensor, block_size: int
) -> torch.Tensor:
    """uint8 ``[K, b, nb]`` token bits of the cells at ``keys``: a partial block's own bits, all
    ones for a full block, zeros for an empty one (``blocks`` may have one head for all)."""
    lookup_keys = keys if blocks.shape[0] > 1 else keys & ((1 << _HEAD) - 1)
    found, bits = lookup(partials, lookup_keys, block_size)
    index = index_of(lookup_keys).to(torch.int64)
    full = active_at(blocks, index) & ~found
    bits[full] = 0xFF
    return bits


def grid_keys(partials: PartialBlocks | None, own_heads: int, n_heads: int) -> torch.Tensor:
    """The sort keys of the ``partials`` of an ``own_heads``-head layout over ``n_heads`` heads
    (a one-head layout's repeated for each)."""
    if partials is None:
        return torch.zeros(0, dtype=torch.int64)
    keys = partials.keys
    if own_heads == n_heads:
        return keys
    heads = torch.arange(n_heads, dtype=torch.int64)[:, None] << _HEAD
    return (heads | keys[None, :]).reshape(-1)


_OPERATIONS = {"or": torch.bitwise_or, "and": torch.bitwise_and,
               "andnot": lambda a, b: a & ~b}  # fmt: skip
_RUN_OPERATIONS = {"or": BlockRuns.union, "and": BlockRuns.intersection,
                   "andnot": BlockRuns.difference}  # fmt: skip


def _combined(a_blocks: Blocks, b_blocks: Blocks, how: str) -> Blocks:
    """The block-level operation, on runs when either side is runs (the other made runs)."""
    if isinstance(a_blocks, BlockRuns) or isinstance(b_blocks, BlockRuns):
        a, b = (x if isinstance(x, BlockRuns) else BlockRuns.from_dense(x)
                for x in (a_blocks, b_blocks))  # fmt: skip
        return _RUN_OPERATIONS[how](a, b)
    return _OPERATIONS[how](a_blocks, b_blocks)


def combine(
    a_blocks: Blocks,
    a_partials: PartialBlocks | None,
    b_blocks: Blocks,
    b_partials: PartialBlocks | None,
    how: str,
    block_size: int,
) -> tuple[Blocks, PartialBlocks | None]:
    """Token-level union (``"or"``), intersection (``"and"``) or difference (``"andnot"``) of
    two layouts' blocks and partial blocks (``b`` may have one head for all), before
    ``normalise``: a cell partial on either side gets the bytes of the operation, the others
    the block-level result."""
    op = _OPERATIONS[how]  # the same on block flags and on token bits
    blocks = _combined(a_blocks, b_blocks, how)
    n_heads = blocks.shape[0]
    keys = torch.unique(torch.cat([
        grid_keys(a_partials, a_blocks.shape[0], n_heads),
        grid_keys(b_partials, b_blocks.shape[0], n_heads),
    ]))  # fmt: skip
    if not len(keys):
        return blocks, None
    a_bits = cell_bits(a_blocks, a_partials, keys, block_size)
    b_bits = cell_bits(b_blocks, b_partials, keys, block_size)
    bits = op(a_bits, b_bits)
    index = index_of(keys)
    blocks = set_cells(blocks, index, True)
    check_partial_size(len(keys), block_size)
    return blocks, PartialBlocks(index, bits)


def drop_cells(
    partials: PartialBlocks | None, heads: list[int] | None, mask: torch.Tensor
) -> PartialBlocks | None:
    """``partials`` less those in ``heads`` (``None``: all) whose cell is set in bool ``[M, N]``
    ``mask``: an edit paints whole blocks full or empty."""
    if partials is None:
        return None
    index = partials.index.to(torch.int64)
    hit = mask[index[:, 1], index[:, 2]]
    if heads is not None:
        hit &= torch.isin(index[:, 0], torch.tensor(heads, dtype=torch.int64))
    return partials.take(~hit) if bool(hit.any()) else partials


def transposed(partials: PartialBlocks | None) -> PartialBlocks | None:
    """``partials`` of the transposed layout: rows and columns swapped, each mask transposed."""
    if partials is None:
        return None
    masks = partials.unpack().transpose(1, 2)
    return sorted_blocks(partials.index[:, [0, 2, 1]], pack_masks(masks.contiguous()))


def head_map(partials: PartialBlocks | None, sources: list[int | None], own: PartialBlocks | None,
             block_size: int) -> PartialBlocks | None:  # fmt: skip
    """Partial blocks of a layout whose head ``j`` is head ``sources[j]`` of ``partials``, or
    its own head ``j`` of ``own`` where ``sources[j]`` is ``None``."""
    parts = []
    for j, source in enumerate(sources):
        taken, head = (own, j) if source is None else (partials, source)
        if taken is None or not taken.count:
            continue
        rows = taken.head_range(head)
        if rows.start == rows.stop:
            continue
        index = taken.index[rows].clone()
        index[:, 0] = j
        parts.append(PartialBlocks(index, taken.bits[rows]))
    joined = concat(parts, block_size)
    return joined if joined.count else None


def repeated(partials: PartialBlocks | None, n_heads: int) -> PartialBlocks | None:
    """The partial blocks of a one-head layout copied to ``n_heads`` heads."""
    if partials is None:
        return None
    check_partial_size(partials.count * n_heads, partials.block_size)
    index = partials.index.repeat(n_heads, 1)
    index[:, 0] = torch.arange(n_heads, dtype=torch.int32).repeat_interleave(partials.count)
    return PartialBlocks(index, partials.bits.repeat(n_heads, 1, 1))


def causal_rows(partials: PartialBlocks | None) -> PartialBlocks | None:
    """``partials`` less those above the diagonal (``col > row``)."""
    if partials is None:
        return None
    keep = partials.index[:, 2] <= partials.index[:, 1]
    return partials.take(keep) if not bool(keep.all()) else partials
