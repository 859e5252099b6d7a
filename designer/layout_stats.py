"""Block-level statistics of a design, in either form of layout (dense grid or row runs).

What a person sizing a long-context design asks first, without segmenting it: how many blocks
are active (in all and per head), how dense it is, which query rows attend to nothing, and the
attention FLOPs its active blocks cost against dense attention. Every number comes from row
counts and token counts, so a layout held as runs is measured in time that follows its runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from designer.design import Design
from designer.layout import TokenStats

#: Head dimension the FLOP counts assume (they scale linearly with it), as ``analysis``.
HEAD_DIM = 128


@dataclass(frozen=True)
class LayoutStats:
    """``flops``: forward attention FLOPs per batch element of the token pairs the active
    blocks compute (``QKᵀ`` and ``PV``: ``4·D`` per pair), ``dense_flops`` the same for every
    pair; ``head_blocks`` active blocks per head; ``empty_rows`` query block rows with none."""

    shape: tuple[int, int, int]
    block_size: int
    active_blocks: int
    density: float
    head_blocks: tuple[int, ...]
    empty_rows: int
    min_row_blocks: int
    max_row_blocks: int
    flops: int
    dense_flops: int
    tokens: TokenStats


def layout_stats(design: Design, *, head_dim: int = HEAD_DIM) -> LayoutStats:
    """The block-level statistics of ``design``'s layout.

    >>> import torch
    >>> from designer.layout import Layout
    >>> stats = layout_stats(Design(Layout(torch.eye(4, dtype=torch.bool)[None], 64)))
    >>> stats.active_blocks, stats.empty_rows, stats.flops == stats.dense_flops // 4
    (4, 0, True)
    """
    if not isinstance(design, Design):
        raise TypeError(f"design must be a Design, got {type(design).__name__}")
    layout = design.layout
    rows = layout.row_counts()  # [H, M]
    tokens = layout.token_stats()
    pairs = layout.n_heads * layout.seq_len_q * layout.seq_len_k
    return LayoutStats(
        shape=layout.shape,
        block_size=layout.block_size,
        active_blocks=int(rows.sum()),
        density=layout.density,
        head_blocks=tuple(rows.sum(axis=1).tolist()),
        empty_rows=int(np.count_nonzero(rows == 0)),
        min_row_blocks=int(rows.min()),
        max_row_blocks=int(rows.max()),
        flops=4 * head_dim * tokens.computed,
        dense_flops=4 * head_dim * pairs,
        tokens=tokens,
    )
