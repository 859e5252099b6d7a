"""Causal attention: each query block sees its own and every earlier key block."""

from __future__ import annotations

import torch

from designer.patterns._common import block_grid, generator_spec
from designer.validate import check_layout_shape


def causal(n_heads: int, n_q_blocks: int, n_k_blocks: int) -> torch.Tensor:
    """Blocks on and below the diagonal: active iff ``col <= row``.

    The diagonal starts at the top-left corner, so with ``n_q_blocks != n_k_blocks`` query block
    ``row`` sees key blocks ``0..row`` (as ``Layout.causal_clip`` keeps)::

        █···
        ██··
        ███·
        ████

    >>> causal(2, 4, 4).shape
    torch.Size([2, 4, 4])
    """
    n_heads, n_q_blocks, n_k_blocks = check_layout_shape(n_heads, n_q_blocks, n_k_blocks)
    rows, cols = block_grid(n_q_blocks, n_k_blocks)
    return (cols <= rows).expand(n_heads, -1, -1).contiguous()


SPECS = (
    generator_spec(
        "causal",
        "Causal",
        "col <= row",
        (),
        causal,
        order=10,
    ),
)
