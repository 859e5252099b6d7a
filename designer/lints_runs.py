"""What the lints count, on a layout held as row runs: work follows the runs, never the grid.

Each function gives the same numbers ``designer.lints`` takes from a dense grid, so the lints'
findings and messages are one code path for both forms.
"""

from __future__ import annotations

import numpy as np
import torch

from designer.block_runs import BlockRuns


def above_diagonal(runs: BlockRuns, examples: int) -> tuple[torch.Tensor, np.ndarray]:
    """``(per-head count [H], first cells [K, 3])`` of the active blocks with ``col > row``."""
    h, m, _ = runs.shape
    rows = runs.run_rows()
    first = torch.maximum(runs.starts.to(torch.int64), rows % m + 1)  # first col above
    above = (runs.stops.to(torch.int64) - first).clamp(min=0)
    per_head = torch.zeros(h, dtype=torch.int64).index_add_(0, rows // m, above)
    found: list[tuple[int, int, int]] = []
    for i in torch.nonzero(above).view(-1)[:examples].tolist():  # the first few, in order
        row, col = int(rows[i]), int(first[i])
        found += [
            (row // m, row % m, c) for c in range(col, min(col + examples, int(runs.stops[i])))
        ]
    return per_head, np.array(found[:examples], dtype=np.int64).reshape(-1, 3)


def visited_squares(runs: BlockRuns, per_side: int) -> torch.Tensor:
    """int64 ``[H]``: the ``per_side``-block squares (aligned) holding an active block, per head."""
    h, m, n = runs.shape
    rows = runs.run_rows()
    squares_q, squares_k = -(-m // per_side), -(-n // per_side)
    square_rows = (rows // m) * squares_q + (rows % m) // per_side
    starts = runs.starts.to(torch.int64) // per_side
    stops = (runs.stops.to(torch.int64) - 1) // per_side + 1
    squares = BlockRuns.from_intervals((h, squares_q, squares_k), square_rows, starts, stops)
    return squares.head_counts()
