"""The block layout: which key blocks each query block of each head attends to.

A layout is a ``[H, M, N]`` 0/1 grid (heads, query blocks, key blocks) plus ``block_size``, the
number of tokens on each side of a block, so ``seq_len_q = M * block_size`` and
``seq_len_k = N * block_size``. ``M != N`` is allowed (cross-attention). Query rows run top to
bottom, keys left to right; causal attention lives on and below the diagonal (``col <= row``),
aligned at the top-left corner as in ``q_idx >= k_idx``. Where a layout is run at other lengths
(``Sq != Sk``, a partial last block), causal can also align at the bottom-right corner, as in
FlashAttention >= 2.1 and KV-cache prefill: ``causal_offset`` says how.

Layouts are immutable values: every operation returns a new one, so an editor can keep an undo
history by reference and the app can cache on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from designer.validate import as_block_tensor, check_int, check_int_list, check_layout_shape

#: Block sizes a layout may use (tokens per block side).
MAX_BLOCK_SIZE = 4096
#: Where causal attention is anchored: ``k_idx <= q_idx`` or ``k_idx <= q_idx + Sk - Sq``.
CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")


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


@dataclass(frozen=True, eq=False)
class Layout:
    """A validated ``[H, M, N]`` block layout and its block size.

    >>> layout = Layout(torch.ones(2, 4, 4, dtype=torch.int64), 64)
    >>> layout.shape, layout.seq_len_q, layout.density
    ((2, 4, 4), 256, 1.0)
    """

    blocks: torch.Tensor
    block_size: int

    def __post_init__(self) -> None:
        blocks = as_block_tensor("layout", self.blocks)
        if 0 in blocks.shape:
            raise ValueError(
                f"layout must have at least one head and block, got {list(blocks.shape)}"
            )
        object.__setattr__(self, "blocks", blocks)
        object.__setattr__(
            self, "block_size", check_int("block_size", self.block_size, low=1, high=MAX_BLOCK_SIZE)
        )

    @classmethod
    def from_array(cls, array: Any, block_size: int) -> Layout:
        """Build a layout from a ``[H, M, N]`` or DeepSpeed-style ``[M, N]`` 0/1 array."""
        return cls(as_block_tensor("layout", array, allow_2d=True), block_size)

    @classmethod
    def zeros(cls, n_heads: int, n_q_blocks: int, n_k_blocks: int, block_size: int) -> Layout:
        """An empty layout of the given shape."""
        shape = check_layout_shape(n_heads, n_q_blocks, n_k_blocks)
        return cls(torch.zeros(shape, dtype=torch.bool), block_size)

    # ----------------------------------------------------------------- shape and sizes
    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.blocks.shape)  # type: ignore[return-value]

    @property
    def n_heads(self) -> int:
        return self.blocks.shape[0]

    @property
    def n_q_blocks(self) -> int:
        return self.blocks.shape[1]

    @property
    def n_k_blocks(self) -> int:
        return self.blocks.shape[2]

    @property
    def seq_len_q(self) -> int:
        return self.n_q_blocks * self.block_size

    @property
    def seq_len_k(self) -> int:
        return self.n_k_blocks * self.block_size

    # ----------------------------------------------------------------- statistics
    @property
    def nnz(self) -> int:
        """Number of active blocks over all heads (numpy: no torch thread pool for a count)."""
        return int(np.count_nonzero(self.blocks.numpy()))

    @property
    def density(self) -> float:
        """Active blocks over all blocks (0.0 for an empty shape)."""
        cells = self.blocks.numel()
        return self.nnz / cells if cells else 0.0

    def head_stats(self) -> list[HeadStats]:
        """Per-head density and per-row spread of active blocks (numpy counts: no int64 copy
        of the grid)."""
        row_counts = np.count_nonzero(self.to_numpy(), axis=2)  # [H, M]
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

    def to_numpy(self) -> np.ndarray:
        """The blocks as a read-only ``uint8`` numpy array (for pictures and numba code)."""
        array = self.blocks.numpy().view(np.uint8)
        array.flags.writeable = False
        return array

    def to_int64(self) -> torch.Tensor:
        """The blocks as the ``int64`` tensor DeepSpeed-style APIs expect."""
        return self.blocks.to(torch.int64)

    # ----------------------------------------------------------------- algebra
    def union(self, other: Layout) -> Layout:
        """Blocks active in either layout."""
        return self._combine(other, torch.logical_or, "union")

    def intersection(self, other: Layout) -> Layout:
        """Blocks active in both layouts."""
        return self._combine(other, torch.logical_and, "intersection")

    def difference(self, other: Layout) -> Layout:
        """Blocks active here but not in ``other``."""
        return self._combine(other, lambda a, b: a & ~b, "difference")

    def complement(self) -> Layout:
        """Every inactive block becomes active and vice versa."""
        return Layout(~self.blocks, self.block_size)

    def causal_clip(self) -> Layout:
        """Drop blocks wholly above the diagonal (``col > row``): no query there may attend."""
        return Layout(torch.tril(self.blocks), self.block_size)

    def transpose(self) -> Layout:
        """Swap query and key blocks in every head."""
        return Layout(self.blocks.transpose(1, 2), self.block_size)

    def with_heads(self, heads: list[int], source: Layout) -> Layout:
        """Replace ``heads`` with ``source``'s heads (one source head is broadcast to all)."""
        heads = check_int_list("heads", heads, low=0, high=self.n_heads - 1)
        self._check_compatible(source, "with_heads")
        if source.n_heads not in (1, len(heads)):
            raise ValueError(
                f"source must have 1 head or one per assigned head ({len(heads)}), "
                f"got {source.n_heads}"
            )
        blocks = self.blocks.clone()
        blocks[heads] = source.blocks.expand(len(heads), -1, -1)
        return Layout(blocks, self.block_size)

    def select_heads(self, heads: list[int]) -> Layout:
        """A layout made of the listed heads, in that order."""
        heads = check_int_list("heads", heads, low=0, high=self.n_heads - 1, min_len=1)
        return Layout(self.blocks[heads], self.block_size)

    def broadcast_heads(self, n_heads: int) -> Layout:
        """Copy a one-head layout to ``n_heads`` heads."""
        n_heads = check_int("n_heads", n_heads, low=1)
        if self.n_heads != 1:
            raise ValueError(f"broadcast_heads needs a one-head layout, got {self.n_heads} heads")
        return Layout(self.blocks.expand(n_heads, -1, -1), self.block_size)

    # ----------------------------------------------------------------- token level
    def token_mask(self, head: int = 0) -> torch.Tensor:
        """The ``[seq_len_q, seq_len_k]`` bool mask of one head (for references and tests)."""
        head = check_int("head", head, low=0, high=self.n_heads - 1)
        b = self.block_size
        return self.blocks[head].repeat_interleave(b, 0).repeat_interleave(b, 1)

    # ----------------------------------------------------------------- value semantics
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Layout):
            return NotImplemented
        return (
            self.block_size == other.block_size
            and self.shape == other.shape
            and bool(torch.equal(self.blocks, other.blocks))
        )

    def __hash__(self) -> int:
        return hash((self.block_size, self.shape, self.blocks.numpy().tobytes()))

    def __repr__(self) -> str:
        h, m, n = self.shape
        return (
            f"Layout(heads={h}, q_blocks={m}, k_blocks={n}, block_size={self.block_size}, "
            f"density={self.density:.4f})"
        )

    def _combine(self, other: Layout, op: Any, what: str) -> Layout:
        self._check_compatible(other, what)
        if other.n_heads not in (1, self.n_heads):
            raise ValueError(
                f"{what} needs layouts with the same number of heads (or one), "
                f"got {self.n_heads} and {other.n_heads}"
            )
        return Layout(op(self.blocks, other.blocks), self.block_size)

    def _check_compatible(self, other: Layout, what: str) -> None:
        if not isinstance(other, Layout):
            raise TypeError(f"{what} needs a Layout, got {type(other).__name__}")
        if other.block_size != self.block_size:
            raise ValueError(
                f"{what} needs the same block_size, got {self.block_size} and {other.block_size}"
            )
        if other.blocks.shape[1:] != self.blocks.shape[1:]:
            raise ValueError(
                f"{what} needs the same [q_blocks, k_blocks], got "
                f"{list(self.blocks.shape[1:])} and {list(other.blocks.shape[1:])}"
            )
