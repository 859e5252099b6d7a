"""MIT Block-Sparse-Attention's ``base_blockmask`` both ways.

``block_sparse_attn_func(..., head_mask_type, streaming_info, base_blockmask, ...)`` takes a bool
``base_blockmask [batch, blocksparse_heads, q_blocks, k_blocks]`` over fixed 128 x 128 token blocks
(``q_blocks = ceil(seqlen_q / 128)``). Head ``h`` reads it when ``head_mask_type[h] == 1`` (the
k-th such head reads entry ``k - 1``), so for a layout whose heads are all block-sparse pass
``head_mask_type = torch.ones(H, dtype=torch.int32)`` and this mask.

Only 128-token blocks convert: any other block size is refused rather than resampled.

>>> mask = to_base_blockmask(Layout(torch.ones(2, 3, 3, dtype=torch.bool), 128), batch_size=4)
>>> mask.shape, mask.dtype, from_base_blockmask(mask).shape
(torch.Size([4, 2, 3, 3]), torch.bool, (2, 3, 3))
"""

from __future__ import annotations

from typing import Any

import torch

from designer.layout import Layout
from designer.validate import check_int, error_context

#: The block size the library's kernels use (``m_block_dim = n_block_dim = 128``).
MIT_BLOCK_SIZE = 128
#: Most batch entries accepted or made (the mask repeats the layout for each).
MAX_BATCH = 4096


def to_base_blockmask(layout: Layout, *, batch_size: int = 1) -> torch.Tensor:
    """``layout`` as a new bool ``[batch_size, H, M, N]`` ``base_blockmask`` (a copy)."""
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a Layout, got {type(layout).__name__}")
    if layout.block_size != MIT_BLOCK_SIZE:
        raise ValueError(
            f"MIT Block-Sparse-Attention uses {MIT_BLOCK_SIZE}-token blocks; the layout has "
            f"block_size {layout.block_size}. Design it with block_size {MIT_BLOCK_SIZE}"
        )
    batch_size = check_int("batch_size", batch_size, low=1, high=MAX_BATCH)
    return layout.blocks.repeat(batch_size, 1, 1, 1)


def from_base_blockmask(base_blockmask: Any) -> Layout:
    """The 128-token-block layout of a ``base_blockmask``; every batch entry must be the same."""
    if not isinstance(base_blockmask, torch.Tensor):
        raise TypeError(
            f"base_blockmask must be a torch tensor, got {type(base_blockmask).__name__}"
        )
    if base_blockmask.dim() != 4:
        raise ValueError(
            f"base_blockmask must have rank 4 [batch, heads, q_blocks, k_blocks], "
            f"got shape {list(base_blockmask.shape)}"
        )
    check_int("base_blockmask batch", base_blockmask.shape[0], low=1, high=MAX_BATCH)
    with error_context("base_blockmask[0]"):
        layout = Layout(base_blockmask[0], MIT_BLOCK_SIZE)
    same = base_blockmask == base_blockmask[:1]
    if not bool(same.all()):
        batch = int((~same).flatten(1).any(dim=1).nonzero()[0])
        raise ValueError(
            f"base_blockmask must have the same blocks in every batch entry; entry {batch} "
            f"differs from entry 0"
        )
    return layout
