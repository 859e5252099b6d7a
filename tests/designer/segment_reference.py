"""The slow, obviously right segmentation that ``designer.segment`` is checked against.

A line-by-line transcription of the algorithm in ``SDD_SEGMENT.md`` (DeepSpeed's
``csrc/sparse_attention/utils.cpp``): plain Python lists, rings shifted element by element,
passes run one head after the other. ``refuse_invalid=True`` adds the one rule that
``mode="safe"`` documents: a group with a cell that is not currently present is refused and its
corner keeps the DP value ``w - 1``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

Row = tuple[int, int, int, int]


def reference_sdd_segment(
    layout: Any, start_width: int, *, refuse_invalid: bool = False
) -> list[tuple[int, list[Row]]]:
    """``[(width, [(head, row, col, orig_idx), ...]), ...]`` for a ``[H, M, N]`` array."""
    blocks = np.asarray(torch.as_tensor(layout)).astype(np.int64).tolist()
    n_heads = len(blocks)
    n_rows = len(blocks[0]) if n_heads else 0
    n_cols = len(blocks[0][0]) if n_rows else 0

    # Global row-major rank of every non-zero cell; 0 for zero cells.
    idx = [[[0] * n_cols for _ in range(n_rows)] for _ in range(n_heads)]
    current = 0
    for h in range(n_heads):
        for m in range(n_rows):
            for n in range(n_cols):
                if blocks[h][m][n] != 0:
                    idx[h][m][n] = current
                    current += 1

    result = []
    width = start_width
    while width > 0:
        rows = []
        for h in range(n_heads):
            rows += _one_pass(blocks[h], idx[h], h, width, refuse_invalid)
        if rows:
            result.append((width, rows))
        width //= 2
    return result


def _one_pass(
    layout: list[list[int]], idx: list[list[int]], h: int, w: int, refuse_invalid: bool
) -> list[Row]:
    """One pass of width ``w`` over one head; zeroes every extracted cell of ``layout``."""
    n_rows, n_cols = len(layout), len(layout[0])
    best = [[0] * n_cols for _ in range(n_rows)]
    recent_cols = [-1] * w  # oldest first
    recent_rows = [[-1] * w for _ in range(n_cols)]  # per column, oldest first
    emitted = []
    for m in range(n_rows):
        for n in range(n_cols):
            if layout[m][n] == 0:
                continue
            pl = recent_cols[-1]
            pt = recent_rows[n][-1]
            up = best[pt][n] if pt >= 0 else 0
            lf = best[m][pl] if pl >= 0 else 0
            diag = best[pt][pl] if pt >= 0 and pl >= 0 else 0
            width = 1 + min(up, lf, diag)
            for c in range(pl + 1, n):
                if recent_rows[c][-1] > pt:
                    width = 1
            best[m][n] = width
            recent_cols = [*recent_cols[1:], n]
            recent_rows[n] = [*recent_rows[n][1:], m]
            if width != w:
                continue
            group = [(r, c) for r in recent_rows[n] for c in recent_cols if r >= 0 and c >= 0]
            if refuse_invalid and any(layout[r][c] == 0 for r, c in group):
                best[m][n] = w - 1
                continue
            for r, c in group:
                layout[r][c] = 0
                best[r][c] = 0
                emitted.append((h, r, c, idx[r][c]))
    return emitted
