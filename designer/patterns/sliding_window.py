"""Sliding-window (local) attention, causal or bidirectional."""

from __future__ import annotations

import torch

from designer.block_runs import BlockRuns
from designer.patterns._common import (
    block_grid,
    blocks_check,
    blocks_param,
    causal_param,
    generator_spec,
    row_runs,
    stack_head_runs,
    stack_heads,
)
from designer.validate import check_bool, check_layout_shape, check_runs_shape, per_head


def sliding_window(
    n_heads: int,
    n_q_blocks: int,
    n_k_blocks: int,
    *,
    window_blocks: int | list[int],
    causal: bool = True,
) -> torch.Tensor:
    """Blocks near the diagonal: active iff ``0 <= row - col < window_blocks`` (causal) or
    ``|row - col| < window_blocks`` (bidirectional).

    A causal window of ``w`` covers ``w`` blocks, the diagonal one included; a bidirectional one
    covers ``w - 1`` blocks on each side of it. ``window_blocks`` may be one value per head.
    ``window_blocks=2``, causal and bidirectional::

        █···   ██··
        ██··   ███·
        ·██·   ·███
        ··██   ··██

    >>> sliding_window(1, 4, 4, window_blocks=2).sum().item()
    7
    """
    n_heads, n_q_blocks, n_k_blocks = check_layout_shape(n_heads, n_q_blocks, n_k_blocks)
    windows = per_head("window_blocks", window_blocks, n_heads, blocks_check(1))
    causal = check_bool("causal", causal)
    rows, cols = block_grid(n_q_blocks, n_k_blocks)
    distance = rows - cols

    def head(window: int) -> torch.Tensor:
        if causal:
            return (distance >= 0) & (distance < window)
        return distance.abs() < window

    return stack_heads(windows, head)


def sliding_window_runs(
    n_heads: int,
    n_q_blocks: int,
    n_k_blocks: int,
    *,
    window_blocks: int | list[int],
    causal: bool = True,
) -> BlockRuns:
    """``sliding_window`` as row runs: row ``m`` attends ``[m - w + 1, m + 1)`` (causal) or
    ``[m - w + 1, m + w)``, one run per row.

    >>> sliding_window_runs(1, 4, 4, window_blocks=2).nnz
    7
    """
    n_heads, n_q_blocks, n_k_blocks = check_runs_shape(n_heads, n_q_blocks, n_k_blocks)
    windows = per_head("window_blocks", window_blocks, n_heads, blocks_check(1))
    causal = check_bool("causal", causal)
    rows = torch.arange(n_q_blocks)

    def head(window: int) -> BlockRuns:
        stops = rows + 1 if causal else rows + window
        return row_runs(n_q_blocks, n_k_blocks, [(rows - window + 1, stops)])

    return stack_head_runs(windows, head)


SPECS = (
    generator_spec(
        "sliding_window",
        "Sliding window",
        "0 <= row - col < window_blocks (causal), |row - col| < window_blocks otherwise",
        (
            blocks_param("window_blocks", 4, 1, "blocks in the window, per side if bidirectional"),
            causal_param(True),
        ),
        sliding_window,
        order=20,
        runs=sliding_window_runs,
    ),
)
