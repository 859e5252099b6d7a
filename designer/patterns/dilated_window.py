"""Dilated sliding window (Longformer): the window skips blocks to reach further back."""

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


def dilated_window(
    n_heads: int,
    n_q_blocks: int,
    n_k_blocks: int,
    *,
    window_blocks: int | list[int],
    dilation: int | list[int],
    causal: bool = True,
) -> torch.Tensor:
    """Every ``dilation``-th block near the diagonal: with ``d = row - col`` (``|row - col|``
    when bidirectional), active iff ``d >= 0``, ``d % dilation == 0`` and
    ``d // dilation < window_blocks``.

    The window covers ``window_blocks`` blocks (per side when bidirectional, the diagonal one
    included) spread ``dilation`` apart; ``dilation=1`` is ``sliding_window``. Both may be one
    value per head. ``window_blocks=2, dilation=2``, causal::

        █·····
        ·█····
        █·█···
        ·█·█··
        ··█·█·
        ···█·█

    >>> dilated_window(1, 6, 6, window_blocks=2, dilation=2).sum().item()
    10
    """
    n_heads, n_q_blocks, n_k_blocks = check_layout_shape(n_heads, n_q_blocks, n_k_blocks)
    windows = per_head("window_blocks", window_blocks, n_heads, blocks_check(1))
    dilations = per_head("dilation", dilation, n_heads, blocks_check(1))
    causal = check_bool("causal", causal)
    rows, cols = block_grid(n_q_blocks, n_k_blocks)
    distance = rows - cols if causal else (rows - cols).abs()

    def head(window_and_dilation: tuple[int, int]) -> torch.Tensor:
        window, step = window_and_dilation
        return (distance >= 0) & (distance % step == 0) & (distance // step < window)

    return stack_heads(list(zip(windows, dilations, strict=True)), head)


def dilated_window_runs(
    n_heads: int,
    n_q_blocks: int,
    n_k_blocks: int,
    *,
    window_blocks: int | list[int],
    dilation: int | list[int],
    causal: bool = True,
) -> BlockRuns:
    """``dilated_window`` as row runs: row ``m`` attends ``m - k·dilation`` (and ``m +
    k·dilation`` when bidirectional) for ``k < window_blocks``, one run each (one in all at
    ``dilation=1``).

    >>> dilated_window_runs(1, 6, 6, window_blocks=2, dilation=2).nnz
    10
    """
    n_heads, n_q_blocks, n_k_blocks = check_runs_shape(n_heads, n_q_blocks, n_k_blocks)
    windows = per_head("window_blocks", window_blocks, n_heads, blocks_check(1))
    dilations = per_head("dilation", dilation, n_heads, blocks_check(1))
    causal = check_bool("causal", causal)
    rows = torch.arange(n_q_blocks)

    def head(window_and_dilation: tuple[int, int]) -> BlockRuns:
        window, step = window_and_dilation
        if step == 1:
            stops = rows + 1 if causal else rows + window
            return row_runs(n_q_blocks, n_k_blocks, [(rows - window + 1, stops)])
        window = min(window, max(n_q_blocks, n_k_blocks) // step + 1)  # the rest lies outside
        offsets = [-k * step for k in reversed(range(window))]
        if not causal:
            offsets += [k * step for k in range(1, window)]
        return row_runs(n_q_blocks, n_k_blocks, [(rows + d, rows + d + 1) for d in offsets])

    return stack_head_runs(list(zip(windows, dilations, strict=True)), head)


SPECS = (
    generator_spec(
        "dilated_window",
        "Dilated window",
        "d = row - col (|row - col|): d >= 0, d % dilation == 0, d // dilation < window_blocks",
        (
            blocks_param("window_blocks", 4, 1, "blocks in the window, per side if bidirectional"),
            blocks_param("dilation", 2, 1, "distance between window blocks"),
            causal_param(True),
        ),
        dilated_window,
        order=30,
        runs=dilated_window_runs,
    ),
)
