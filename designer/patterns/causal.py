"""Causal attention: each query block sees its own and every earlier key block."""

from __future__ import annotations

import torch

from designer.block_runs import BlockRuns
from designer.patterns._common import block_grid, generator_spec, row_runs
from designer.validate import check_layout_shape, check_runs_shape


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


def causal_runs(n_heads: int, n_q_blocks: int, n_k_blocks: int) -> BlockRuns:
    """``causal`` as row runs: row ``m`` attends ``[0, m + 1)``.

    >>> causal_runs(2, 4, 4).nnz
    20
    """
    n_heads, n_q_blocks, n_k_blocks = check_runs_shape(n_heads, n_q_blocks, n_k_blocks)
    rows = torch.arange(n_q_blocks)
    head = row_runs(n_q_blocks, n_k_blocks, [(torch.zeros_like(rows), rows + 1)])
    return head.select_heads([0] * n_heads)


SPECS = (
    generator_spec(
        "causal",
        "Causal",
        "col <= row",
        (),
        causal,
        order=10,
        runs=causal_runs,
    ),
)
