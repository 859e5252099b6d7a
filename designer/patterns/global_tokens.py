"""Global blocks: blocks that see everything (rows) and that everything sees (columns)."""

from __future__ import annotations

import torch

from designer.block_runs import BlockRuns
from designer.patterns._common import block_indices_param, generator_spec, row_runs
from designer.patterns.specs import ParamSpec
from designer.validate import check_bool, check_int_list, check_layout_shape, check_runs_shape


def global_tokens(
    n_heads: int,
    n_q_blocks: int,
    n_k_blocks: int,
    *,
    global_blocks: list[int],
    rows: bool = True,
    columns: bool = True,
) -> torch.Tensor:
    """Whole rows and/or columns: active iff ``row in global_blocks`` (when ``rows``) or
    ``col in global_blocks`` (when ``columns``).

    A global row is a query block attending to every key block; a global column is a key block
    every query block attends to. Each index must exist on the sides it is used for.
    ``global_blocks=[0, 2]``, rows and columns::

        ████
        █·█·
        ████
        █·█·

    >>> global_tokens(1, 4, 4, global_blocks=[0, 2]).sum().item()
    12
    """
    n_heads, n_q_blocks, n_k_blocks = check_layout_shape(n_heads, n_q_blocks, n_k_blocks)
    rows, columns, indices = _checked(n_q_blocks, n_k_blocks, global_blocks, rows, columns)
    blocks = torch.zeros(n_q_blocks, n_k_blocks, dtype=torch.bool)
    if rows:
        blocks[indices, :] = True
    if columns:
        blocks[:, indices] = True
    return blocks.expand(n_heads, -1, -1).contiguous()


def global_tokens_runs(
    n_heads: int,
    n_q_blocks: int,
    n_k_blocks: int,
    *,
    global_blocks: list[int],
    rows: bool = True,
    columns: bool = True,
) -> BlockRuns:
    """``global_tokens`` as row runs: a global row is one run ``[0, N)``, a global column a
    one-block run in every row.

    >>> global_tokens_runs(1, 4, 4, global_blocks=[0, 2]).nnz
    12
    """
    n_heads, n_q_blocks, n_k_blocks = check_runs_shape(n_heads, n_q_blocks, n_k_blocks)
    rows, columns, indices = _checked(n_q_blocks, n_k_blocks, global_blocks, rows, columns)
    none = torch.zeros(n_q_blocks, dtype=torch.int64)
    intervals = []
    if rows:
        is_global = torch.zeros(n_q_blocks, dtype=torch.bool)
        is_global[indices] = True
        intervals.append((none, is_global * n_k_blocks))
    if columns:
        intervals += [(none + col, none + col + 1) for col in sorted(set(indices))]
    return row_runs(n_q_blocks, n_k_blocks, intervals).select_heads([0] * n_heads)


def _checked(n_q_blocks: int, n_k_blocks: int, global_blocks: list[int], rows: bool,
             columns: bool) -> tuple[bool, bool, list[int]]:  # fmt: skip
    rows = check_bool("rows", rows)
    columns = check_bool("columns", columns)
    if not (rows or columns):
        raise ValueError("rows and columns must not both be False, got rows=False, columns=False")
    used_sides = [n for n, used in ((n_q_blocks, rows), (n_k_blocks, columns)) if used]
    indices = check_int_list(
        "global_blocks", global_blocks, low=0, high=min(used_sides) - 1, min_len=1
    )
    return rows, columns, indices


SPECS = (
    generator_spec(
        "global_tokens",
        "Global tokens",
        "row in global_blocks (rows) or col in global_blocks (columns)",
        (
            block_indices_param("global_blocks", "indices of the global blocks"),
            ParamSpec("rows", "bool", True, help="global blocks attend to everything"),
            ParamSpec("columns", "bool", True, help="everything attends to global blocks"),
        ),
        global_tokens,
        order=40,
        runs=global_tokens_runs,
    ),
)
