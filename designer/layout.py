"""The block layout: which key blocks each query block of each head attends to.

A layout is a ``[H, M, N]`` 0/1 grid (heads, query blocks, key blocks) plus ``block_size``, the
number of tokens on each side of a block, so ``seq_len_q = M * block_size`` and
``seq_len_k = N * block_size`` unless the last block row or column is cut short: ``seq_q`` and
``seq_k`` give token lengths ``(M - 1)·block < seq_q <= M·block`` (``None``: whole blocks).
``M != N`` is allowed (cross-attention).

An active block is full, or partial when ``partials`` (``designer.partials``) holds its token
mask. Token ``(q, k)`` of head ``h`` is attended when its block is active, its block is full or
its bit is set, and ``q < seq_q``, ``k < seq_k`` (a design's ``causal`` rule comes on top).
Layouts are kept in a normal form, so equal attention means equal layouts: a partial block
that allows every token it holds is full, one that allows none is inactive, and bits past the
lengths are 0; a block-level layout has none at all (``partials is None``).

Query rows run top to bottom, keys left to right; causal attention lives on and below the
diagonal (``col <= row``), aligned at the top-left corner as in ``q_idx >= k_idx``. Where a
layout is run at other lengths (``Sq != Sk``, a partial last block), causal can also align at
the bottom-right corner, as in FlashAttention >= 2.1 and KV-cache prefill: ``causal_offset``
says how.

A layout of at most ``MAX_LAYOUT_CELLS`` cells holds its dense grid (``blocks``); a larger one
(long contexts: 32 heads x 1M tokens) holds its row runs (``runs``, ``designer.block_runs``),
whose memory follows the runs, and has no ``blocks``. Every operation here works on either.

Layouts are immutable values: every operation returns a new one, so an editor can keep an undo
history by reference and the app can cache on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from designer import partials as tokens
from designer.block_runs import BlockRuns
from designer.partials import PartialBlocks, unpack_bits
from designer.partials import lookup as tokens_lookup
from designer.validate import (
    MAX_LAYOUT_CELLS,
    as_block_tensor,
    check_int,
    check_int_list,
    check_layout_shape,
    check_run_counts,
    check_runs_shape,
    token_length,
)

#: Runs of at most this many cells are held as their dense grid: the largest grid accepted
#: (``MAX_LAYOUT_CELLS``), so every layout that could be made before is made, drawn,
#: segmented and planned as before (a 16 x 2048 x 2048 grid is 64 MiB and its lints take
#: 1.5-3.8 s; its runs would take under 1 MiB); larger ones are held as runs.
DENSE_CELLS = MAX_LAYOUT_CELLS
#: Block sizes a layout may use (tokens per block side).
MAX_BLOCK_SIZE = 4096
#: Where causal attention is anchored: ``k_idx <= q_idx`` or ``k_idx <= q_idx + Sk - Sq``.
CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")
#: Most cells of a dense token mask ``Layout.token_mask`` makes (bool: 256 MiB).
MAX_TOKEN_MASK_CELLS = 1 << 28


def causal_offset(causal_alignment: str, seq_q: int, seq_k: int) -> int:
    """The ``d`` of the causal rule ``k_idx <= q_idx + d`` at these lengths: 0 for ``top_left``,
    ``seq_k - seq_q`` for ``bottom_right`` (already checked to be one of ``CAUSAL_ALIGNMENTS``).

    >>> causal_offset("top_left", 3, 5), causal_offset("bottom_right", 3, 5)
    (0, 2)
    """
    return seq_k - seq_q if causal_alignment == "bottom_right" else 0


@dataclass(frozen=True)
class HeadStats:
    """Numbers about one head: how much it attends and how evenly."""

    head: int
    active_blocks: int
    density: float
    empty_rows: int
    min_row_blocks: int
    max_row_blocks: int
    mean_row_blocks: float


@dataclass(frozen=True)
class TokenStats:
    """A layout's blocks by kind and what its tiles compute at the token level (before a
    design's causal rule): ``computed`` token pairs of the active blocks inside the lengths,
    ``allowed`` those attended, ``masked_fraction`` the share of computed scores that partial
    blocks mask away, ``token_density`` allowed pairs over all ``H·Sq·Sk``."""

    full_blocks: int
    partial_blocks: int
    empty_blocks: int
    computed: int
    allowed: int
    masked_fraction: float
    token_density: float


@dataclass(frozen=True, eq=False, init=False)
class Layout:
    """A validated ``[H, M, N]`` block layout, its block size, its partial blocks' token masks
    and its token lengths, in normal form (see the module docstring).

    ``blocks`` is a 0/1 ``[H, M, N]`` tensor or array, or ``BlockRuns``: runs of at most
    ``DENSE_CELLS`` cells are held as their dense grid, so a layout's form follows its shape.

    >>> layout = Layout(torch.ones(2, 4, 4, dtype=torch.int64), 64)
    >>> layout.shape, layout.seq_len_q, layout.density
    ((2, 4, 4), 256, 1.0)
    >>> Layout(torch.ones(1, 4, 4, dtype=torch.bool), 64, seq_q=200).seq_len_q
    200
    """

    block_size: int
    partials: PartialBlocks | None
    seq_q: int | None
    seq_k: int | None
    runs: BlockRuns | None

    def __init__(self, blocks: Any, block_size: int, partials: PartialBlocks | None = None,
                 seq_q: int | None = None, seq_k: int | None = None) -> None:  # fmt: skip
        runs = None
        if isinstance(blocks, BlockRuns):
            h, m, n = check_runs_shape(*blocks.shape)
            if h * m * n <= DENSE_CELLS:
                blocks = blocks.to_dense()
            else:
                check_run_counts(blocks.nnz, blocks.n_runs)
                runs, blocks = blocks, None
        else:
            blocks = as_block_tensor("layout", blocks)
            if 0 in blocks.shape:
                raise ValueError(
                    f"layout must have at least one head and block, got {list(blocks.shape)}"
                )
        object.__setattr__(self, "_grid", blocks)
        object.__setattr__(self, "runs", runs)
        object.__setattr__(self, "partials", partials)
        for name, value in (("seq_q", seq_q), ("seq_k", seq_k)):
            object.__setattr__(self, name, value)
        block = check_int("block_size", block_size, low=1, high=MAX_BLOCK_SIZE)
        object.__setattr__(self, "block_size", block)
        _, m, n = self.shape
        for name, count in (("seq_q", m), ("seq_k", n)):
            text = f"{name} (the layout's {count} blocks of {block} tokens)"
            length = token_length(text, getattr(self, name), count, block)
            object.__setattr__(self, name, None if length == count * block else length)
        partials = self.partials
        if partials is not None:
            if not isinstance(partials, PartialBlocks):
                raise TypeError(
                    f"partials must be PartialBlocks or None, got {type(partials).__name__}"
                )
            if partials.block_size != block:
                raise ValueError(
                    f"partials must have masks of the block size {block}, got {partials.block_size}"
                )
            held = self._held
            held, partials = tokens.normalise(held, partials, self.seq_len_q, self.seq_len_k)
            object.__setattr__(self, "runs" if self.runs is not None else "_grid", held)
        object.__setattr__(self, "partials", partials)

    @property
    def blocks(self) -> torch.Tensor:
        """The bool ``[H, M, N]`` grid (contiguous CPU); a layout held as runs has none."""
        if self._grid is None:
            h, m, n = self.shape
            raise ValueError(
                f"this layout of {h} x {m} x {n} blocks ({h * m * n:,} cells, more than the "
                f"{MAX_LAYOUT_CELLS:,} a dense grid may have) is held as row runs and has no "
                f"dense blocks: use layout.runs (designer.block_runs.BlockRuns: row_ptr, starts, "
                f"stops), layout.to_runs(), or the layout's own counts and algebra"
            )
        return self._grid

    @property
    def _held(self) -> torch.Tensor | BlockRuns:
        """What the layout holds: its dense grid, or its runs."""
        return self._grid if self.runs is None else self.runs

    def to_runs(self) -> BlockRuns:
        """The layout's row runs (made from the grid when it holds one)."""
        return self.runs if self.runs is not None else BlockRuns.from_dense(self._grid)

    def _with(self, blocks: torch.Tensor | BlockRuns, partials: PartialBlocks | None = None,
              transpose: bool = False, normal: bool = False) -> Layout:  # fmt: skip
        """A layout of these lengths (swapped by ``transpose``) with new blocks and partials.

        ``normal``: the partials are already in normal form for the blocks (copied, moved or
        dropped from this normal layout), so they are not checked again.
        """
        seq_q, seq_k = (self.seq_k, self.seq_q) if transpose else (self.seq_q, self.seq_k)
        if not normal or partials is None:
            return Layout(blocks, self.block_size, partials, seq_q, seq_k)
        layout = Layout(blocks, self.block_size, None, seq_q, seq_k)
        object.__setattr__(layout, "partials", partials if partials.count else None)
        return layout

    @classmethod
    def from_array(cls, array: Any, block_size: int) -> Layout:
        """Build a layout from a ``[H, M, N]`` or DeepSpeed-style ``[M, N]`` 0/1 array."""
        return cls(as_block_tensor("layout", array, allow_2d=True), block_size)

    @classmethod
    def zeros(cls, n_heads: int, n_q_blocks: int, n_k_blocks: int, block_size: int) -> Layout:
        """An empty layout of the given shape (held as runs past ``MAX_LAYOUT_CELLS`` cells)."""
        shape = check_runs_shape(n_heads, n_q_blocks, n_k_blocks)
        if shape[0] * shape[1] * shape[2] > DENSE_CELLS:
            return cls(BlockRuns.empty(*shape), block_size)
        shape = check_layout_shape(*shape)
        return cls(torch.zeros(shape, dtype=torch.bool), block_size)

    # ----------------------------------------------------------------- shape and sizes
    @property
    def shape(self) -> tuple[int, int, int]:
        return self.runs.shape if self.runs is not None else tuple(self._grid.shape)  # type: ignore[return-value]

    @property
    def n_heads(self) -> int:
        return self.shape[0]

    @property
    def n_q_blocks(self) -> int:
        return self.shape[1]

    @property
    def n_k_blocks(self) -> int:
        return self.shape[2]

    @property
    def cells(self) -> int:
        """Blocks of the grid, active or not: ``H * M * N``."""
        h, m, n = self.shape
        return h * m * n

    @property
    def seq_len_q(self) -> int:
        """Query tokens: ``seq_q``, or whole blocks."""
        return self.n_q_blocks * self.block_size if self.seq_q is None else self.seq_q

    @property
    def seq_len_k(self) -> int:
        """Key tokens: ``seq_k``, or whole blocks."""
        return self.n_k_blocks * self.block_size if self.seq_k is None else self.seq_k

    @property
    def whole_blocks(self) -> bool:
        """Whether the lengths are whole blocks and no block is partial (a block-level layout)."""
        return self.partials is None and self.seq_q is None and self.seq_k is None

    @property
    def n_partial(self) -> int:
        """Number of partial blocks over all heads."""
        return 0 if self.partials is None else self.partials.count

    # ----------------------------------------------------------------- statistics
    @property
    def nnz(self) -> int:
        """Number of active blocks over all heads (numpy: no torch thread pool for a count)."""
        if self.runs is not None:
            return self.runs.nnz
        return int(np.count_nonzero(self._grid.numpy()))

    @property
    def density(self) -> float:
        """Active blocks over all blocks (0.0 for an empty shape)."""
        cells = self.cells
        return self.nnz / cells if cells else 0.0

    def row_counts(self) -> np.ndarray:
        """int64 ``[H, M]``: active blocks in each query block row."""
        if self.runs is not None:
            return self.runs.row_counts().numpy()
        return np.count_nonzero(self.to_numpy(), axis=2)

    def head_stats(self) -> list[HeadStats]:
        """Per-head density and per-row spread of active blocks (numpy counts: no int64 copy
        of the grid)."""
        row_counts = self.row_counts()  # [H, M]
        cells = self.n_q_blocks * self.n_k_blocks
        stats = []
        for h, rows in enumerate(row_counts):
            active = int(rows.sum())
            stats.append(
                HeadStats(
                    head=h,
                    active_blocks=active,
                    density=active / cells,
                    empty_rows=int(np.count_nonzero(rows == 0)),
                    min_row_blocks=int(rows.min()),
                    max_row_blocks=int(rows.max()),
                    mean_row_blocks=float(rows.mean()),
                )
            )
        return stats

    def token_stats(self) -> TokenStats:
        """Full, partial and empty block counts and the token-level numbers of ``TokenStats``."""
        h, m, n = self.shape
        b, nnz, partial = self.block_size, self.nnz, self.n_partial
        last_q, last_k = self.seq_len_q - (m - 1) * b, self.seq_len_k - (n - 1) * b
        if self.runs is not None:
            in_last_row = int(self.runs.row_counts()[:, m - 1].sum())
            in_last_col = int(self.runs.column_counts(n - 1).sum())
            corners = torch.tensor([[head, m - 1, n - 1] for head in range(h)])
            corner = int(self.runs.contains(corners).sum())
        else:
            grid = self.to_numpy()
            in_last_row = int(np.count_nonzero(grid[:, m - 1, :]))
            in_last_col = int(np.count_nonzero(grid[:, :, n - 1]))
            corner = int(np.count_nonzero(grid[:, m - 1, n - 1]))
        # every active block computes b x b pairs, less what the cut last row and column drop
        computed = nnz * b * b - in_last_row * (b - last_q) * b - in_last_col * (b - last_k) * b
        computed += corner * (b - last_q) * (b - last_k)
        allowed = computed
        if self.partials is not None:
            index = self.partials.index
            rows = torch.clamp(self.seq_len_q - index[:, 1].to(torch.int64) * b, max=b)
            cols = torch.clamp(self.seq_len_k - index[:, 2].to(torch.int64) * b, max=b)
            allowed -= int((rows * cols).sum()) - self.partials.allowed_tokens()
        return TokenStats(
            full_blocks=nnz - partial,
            partial_blocks=partial,
            empty_blocks=h * m * n - nnz,
            computed=computed,
            allowed=allowed,
            masked_fraction=(computed - allowed) / computed if computed else 0.0,
            token_density=allowed / (h * self.seq_len_q * self.seq_len_k),
        )

    def block_tokens(self, head: int, q_block: int, k_block: int) -> torch.Tensor:
        """Bool ``[block, block]``: the token pairs one block attends (none past the lengths)."""
        head = check_int("head", head, low=0, high=self.n_heads - 1)
        row = check_int("q_block", q_block, low=0, high=self.n_q_blocks - 1)
        col = check_int("k_block", k_block, low=0, high=self.n_k_blocks - 1)
        b = self.block_size
        pairs = torch.zeros(b, b, dtype=torch.bool)
        if bool(tokens.active_at(self._held, torch.tensor([[head, row, col]]))[0]):
            pairs[: self.seq_len_q - row * b, : self.seq_len_k - col * b] = True
            if self.partials is not None:
                key = torch.tensor([(head << 32) | (row << 16) | col])
                found, bits = tokens_lookup(self.partials, key, b)
                if bool(found[0]):
                    pairs = unpack_bits(bits, b)[0]
        return pairs

    def partial_grid(self) -> torch.Tensor:
        """Bool ``[H, M, N]``: the partial blocks (all False for a block-level layout)."""
        grid = torch.zeros_like(self.blocks)
        if self.partials is not None:
            grid[tuple(self.partials.index.to(torch.int64).T)] = True
        return grid

    def to_numpy(self) -> np.ndarray:
        """The blocks as a read-only ``uint8`` numpy array (for pictures and numba code)."""
        array = self.blocks.numpy().view(np.uint8)
        array.flags.writeable = False
        return array

    def to_int64(self) -> torch.Tensor:
        """The blocks as the ``int64`` tensor DeepSpeed-style APIs expect."""
        return self.blocks.to(torch.int64)

    # ----------------------------------------------------------------- algebra
    # Token-level when partial blocks are involved: a union of a partial and an empty block is
    # the partial one, of two partial ones the union of their masks, and so on.
    def union(self, other: Layout) -> Layout:
        """Token pairs attended in either layout."""
        return self._combine(other, "or", "union")

    def intersection(self, other: Layout) -> Layout:
        """Token pairs attended in both layouts."""
        return self._combine(other, "and", "intersection")

    def difference(self, other: Layout) -> Layout:
        """Token pairs attended here but not in ``other``."""
        return self._combine(other, "andnot", "difference")

    def complement(self) -> Layout:
        """Every token pair inside the lengths attended here is not, and vice versa."""
        partials = self.partials
        blocks = self.runs.complement() if self.runs is not None else ~self._grid
        if partials is not None:
            blocks = tokens.set_cells(blocks, partials.index, True)
            partials = PartialBlocks(partials.index, ~partials.bits)
        return self._with(blocks, partials)

    def causal_clip(self) -> Layout:
        """Drop blocks wholly above the diagonal (``col > row``): no query there may attend."""
        held = self.runs.causal_clip() if self.runs is not None else torch.tril(self._grid)
        return self._with(held, tokens.causal_rows(self.partials), normal=True)

    def transpose(self) -> Layout:
        """Swap query and key blocks (and tokens) in every head."""
        partials = tokens.transposed(self.partials)
        held = self.runs.transpose() if self.runs is not None else self._grid.transpose(1, 2)
        return self._with(held, partials, transpose=True, normal=True)

    def with_heads(self, heads: list[int], source: Layout) -> Layout:
        """Replace ``heads`` with ``source``'s heads (one source head is broadcast to all)."""
        heads = check_int_list("heads", heads, low=0, high=self.n_heads - 1)
        self._check_compatible(source, "with_heads")
        if source.n_heads not in (1, len(heads)):
            raise ValueError(
                f"source must have 1 head or one per assigned head ({len(heads)}), "
                f"got {source.n_heads}"
            )
        if self.runs is not None:
            blocks = self.runs.with_heads(heads, source.to_runs())
        else:
            blocks = self._grid.clone()
            blocks[heads] = source.blocks.expand(len(heads), -1, -1)
        partials = self.partials
        if partials is not None or source.partials is not None:
            sources: list[int | None] = [None] * self.n_heads
            for i, head in enumerate(heads):
                sources[head] = 0 if source.n_heads == 1 else i
            partials = tokens.head_map(source.partials, sources, self.partials, self.block_size)
        return self._with(blocks, partials, normal=True)

    def select_heads(self, heads: list[int]) -> Layout:
        """A layout made of the listed heads, in that order."""
        heads = check_int_list("heads", heads, low=0, high=self.n_heads - 1, min_len=1)
        partials = tokens.head_map(self.partials, heads, None, self.block_size)
        if self.runs is not None:
            return self._with(self.runs.select_heads(heads), partials, normal=True)
        return self._with(self._grid[heads], partials, normal=True)

    def broadcast_heads(self, n_heads: int) -> Layout:
        """Copy a one-head layout to ``n_heads`` heads."""
        n_heads = check_int("n_heads", n_heads, low=1)
        if self.n_heads != 1:
            raise ValueError(f"broadcast_heads needs a one-head layout, got {self.n_heads} heads")
        partials = tokens.repeated(self.partials, n_heads)
        if self.runs is not None or self.cells * n_heads > DENSE_CELLS:
            return self._with(self.to_runs().select_heads([0] * n_heads), partials, normal=True)
        return self._with(self._grid.expand(n_heads, -1, -1), partials, normal=True)

    # ----------------------------------------------------------------- token level
    def token_mask(self, head: int | None = None) -> torch.Tensor:
        """The bool ``[H, seq_len_q, seq_len_k]`` token mask of every head, or ``[1, ...]`` of
        one (for references and tests); refused past ``MAX_TOKEN_MASK_CELLS`` cells."""
        heads = list(range(self.n_heads))
        if head is not None:
            heads = [check_int("head", head, low=0, high=self.n_heads - 1)]
        b, (_, m, n) = self.block_size, self.shape
        cells = len(heads) * m * n * b * b
        if cells > MAX_TOKEN_MASK_CELLS:
            raise ValueError(
                f"a dense token mask of {len(heads)} head(s) x {m * b} x {n * b} tokens has "
                f"{cells:,} cells, more than the limit of {MAX_TOKEN_MASK_CELLS:,}; ask for one "
                f"head, or work with the blocks and partial blocks"
            )
        grid = self._grid if self.runs is None else self.runs.select_heads(heads).to_dense(cells)
        grid = grid[heads] if self.runs is None else grid
        mask = grid.repeat_interleave(b, 1).repeat_interleave(b, 2)
        if self.partials is not None:
            chosen = self.select_heads(heads).partials
            if chosen is not None:
                index = chosen.index.to(torch.int64)
                tiles = mask.view(len(heads), m, b, n, b)
                tiles[index[:, 0], index[:, 1], :, index[:, 2], :] = chosen.unpack()
        return mask[:, : self.seq_len_q, : self.seq_len_k]

    # ----------------------------------------------------------------- value semantics
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Layout):
            return NotImplemented
        return (
            self.block_size == other.block_size
            and self.shape == other.shape
            and (self.seq_q, self.seq_k) == (other.seq_q, other.seq_k)
            and self._same_blocks(other)
            and self.partials == other.partials
        )

    def _same_blocks(self, other: Layout) -> bool:
        if (self.runs is None) != (other.runs is None):  # one shape, one form: never here
            return self.to_runs() == other.to_runs()
        if self.runs is not None:
            return self.runs == other.runs
        return bool(torch.equal(self._grid, other._grid))

    def __hash__(self) -> int:
        partials = b"" if self.partials is None else self.partials.bits.numpy().tobytes()
        keys = b"" if self.partials is None else self.partials.index.numpy().tobytes()
        lengths = () if self.whole_blocks else (self.seq_q, self.seq_k, keys, partials)
        held = hash(self.runs) if self.runs is not None else self._grid.numpy().tobytes()
        return hash((self.block_size, self.shape, held, *lengths))

    def __repr__(self) -> str:
        h, m, n = self.shape
        extra = f", partial_blocks={self.n_partial}" if self.partials is not None else ""
        for name in ("seq_q", "seq_k"):
            if getattr(self, name) is not None:
                extra += f", {name}={getattr(self, name)}"
        return (
            f"Layout(heads={h}, q_blocks={m}, k_blocks={n}, block_size={self.block_size}, "
            f"density={self.density:.4f}{extra})"
        )

    def _combine(self, other: Layout, how: str, what: str) -> Layout:
        self._check_compatible(other, what)
        if other.n_heads not in (1, self.n_heads):
            raise ValueError(
                f"{what} needs layouts with the same number of heads (or one), "
                f"got {self.n_heads} and {other.n_heads}"
            )
        blocks, partials = tokens.combine(self._held, self.partials, other._held,
                                          other.partials, how, self.block_size)  # fmt: skip
        return self._with(blocks, partials)

    def _check_compatible(self, other: Layout, what: str) -> None:
        if not isinstance(other, Layout):
            raise TypeError(f"{what} needs a Layout, got {type(other).__name__}")
        if other.block_size != self.block_size:
            raise ValueError(
                f"{what} needs the same block_size, got {self.block_size} and {other.block_size}"
            )
        if other.shape[1:] != self.shape[1:]:
            raise ValueError(
                f"{what} needs the same [q_blocks, k_blocks], got "
                f"{list(self.shape[1:])} and {list(other.shape[1:])}"
            )
        if (other.seq_len_q, other.seq_len_k) != (self.seq_len_q, self.seq_len_k):
            raise ValueError(
                f"{what} needs the same token lengths, got {self.seq_len_q} x {self.seq_len_k} "
                f"and {other.seq_len_q} x {other.seq_len_k}"
            )
