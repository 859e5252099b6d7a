"""Attention sinks plus a causal window (StreamingLLM): the first blocks stay visible forever."""

from __future__ import annotations

import torch

from designer.block_runs import BlockRuns
from designer.patterns._common import (
    block_grid,
    blocks_check,
    blocks_param,
    generator_spec,
    row_runs,
    stack_head_runs,
    stack_heads,
)
from designer.validate import check_layout_shape, check_runs_shape, per_head


def attention_sinks(
    n_heads: int,
    n_q_blocks: int,
    n_k_blocks: int,
    *,
    sink_blocks: int | list[int],
    window_blocks: int | list[int],
) -> torch.Tensor:
    """The first key blocks plus a causal window: active iff ``col <= row`` and
    (``col < sink_blocks`` or ``row - col < window_blocks``).

    StreamingLLM (Xiao et al., 2023) keeps the initial "sink" tokens, which soak up attention
    mass, next to a rolling window. Both may be one value per head.
    ``sink_blocks=1, window_blocks=2``::

        █····
        ██···
        ███··
        █·██·
        █··██

    >>> attention_sinks(1, 5, 5, sink_blocks=1, window_blocks=2).sum().item()
    12
    """
    n_heads, n_q_blocks, n_k_blocks = check_layout_shape(n_heads, n_q_blocks, n_k_blocks)
    sinks = per_head("sink_blocks", sink_blocks, n_heads, blocks_check(0))
    windows = per_head("window_blocks", window_blocks, n_heads, blocks_check(1))
    rows, cols = block_grid(n_q_blocks, n_k_blocks)
    distance = rows - cols

    def head(sink_and_window: tuple[int, int]) -> torch.Tensor:
        sink, window = sink_and_window
        return (distance >= 0) & ((cols < sink) | (distance < window))

    return stack_heads(list(zip(sinks, windows, strict=True)), head)


def attention_sinks_runs(
    n_heads: int,
    n_q_blocks: int,
    n_k_blocks: int,
    *,
    sink_blocks: int | list[int],
    window_blocks: int | list[int],
) -> BlockRuns:
    """``attention_sinks`` as row runs: row ``m`` attends ``[0, min(sink_blocks, m + 1))`` and
    ``[m - window_blocks + 1, m + 1)``, one or two runs per row.

    >>> attention_sinks_runs(1, 5, 5, sink_blocks=1, window_blocks=2).nnz
    12
    """
    n_heads, n_q_blocks, n_k_blocks = check_runs_shape(n_heads, n_q_blocks, n_k_blocks)
    sinks = per_head("sink_blocks", sink_blocks, n_heads, blocks_check(0))
    windows = per_head("window_blocks", window_blocks, n_heads, blocks_check(1))
    rows = torch.arange(n_q_blocks)

    def head(sink_and_window: tuple[int, int]) -> BlockRuns:
        sink, window = sink_and_window
        sink_stops = torch.clamp(rows + 1, max=sink)
        intervals = [(torch.zeros_like(rows), sink_stops), (rows - window + 1, rows + 1)]
        return row_runs(n_q_blocks, n_k_blocks, intervals)

    return stack_head_runs(list(zip(sinks, windows, strict=True)), head)


SPECS = (
    generator_spec(
        "attention_sinks",
        "Attention sinks + window",
        "col <= row and (col < sink_blocks or row - col < window_blocks)",
        (
            blocks_param("sink_blocks", 1, 0, "first key blocks every query keeps"),
            blocks_param("window_blocks", 4, 1, "blocks in the causal window"),
        ),
        attention_sinks,
        order=50,
        runs=attention_sinks_runs,
    ),
)
