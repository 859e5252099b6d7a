"""Recipes past a dense grid: built on row runs, their cost estimated from the runs they make.

A recipe whose layout has more than ``MAX_LAYOUT_CELLS`` cells (32 heads x 128K tokens and up)
is built as row runs (``designer.block_runs``): each step's pattern by its runs builder
(``registry.pattern_runs``), steps combined by the runs algebra, edits painted as runs of
their regions (``replay_edit_runs``). Nothing it does is counted in cells, so a 1M-token design
costs its runs, not its 8.6 G cells. Estimates are made before anything is built (a file could
otherwise ask for minutes of work), from upper bounds on the runs (``RunsBound``: all of
them, and the most in one head, which a copied head brings):

- a step makes ``M x intervals_per_row`` intervals in each of its heads (what the pattern's
  runs builder emits for its parameters) at ``NS_PER_INTERVAL``, and combining it in sweeps
  the runs of both sides at ``NS_PER_RUN`` (a union, intersection or difference never
  has more runs than its two sides together);
- an edit paints its region's intervals in its heads (a rectangle one per row, a band one per
  row, a cell list one per cell), and sweeps them with the layout's runs (three times for a
  toggle); a ``CopyHead`` copies every head's runs once;
- memory: ``BYTES_PER_RUN`` per run swept at once (the sort keys, coverage sums and the runs
  made), within ``recipe_cost.MAX_BUILD_BYTES``.

The limits on what is built stay exact: a layout held as runs may have at most
``validate.MAX_ACTIVE_BLOCKS`` active blocks and ``MAX_RUNS`` runs, checked as each step and
edit makes it (counts that follow the runs: a step past them is refused in the time its runs
take, never the grid's).

Rates: one core of the CI machine, 2026-12-01, torch 2.13, at 2,048^2 and 16,384^2 blocks x 32
heads, machine shared (load 2-3): sinks, windows, dilated windows and global tokens made at
12-36 ns an interval (45-90 ns with their checks and copies), swept at 134-204 ns a run, with
171-193 bytes a run at the peak; the rates here have a margin on top. Patterns without a runs
builder, token patterns (their partial blocks are made on a grid) and transposes (whose runs
follow the blocks, not the runs) are refused past a dense grid, saying what can be used.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from designer.block_runs import BlockRuns
from designer.edit import CopyHead, Edit, EditOp, Transpose
from designer.patterns.registry import PATTERNS, check_runs_pattern
from designer.regions import Band, Bitmap, Cells, Column, Rect, Row

#: Nanoseconds per interval a runs builder emits (its runs checked and copied to every head
#: included), and per run swept when combining.
NS_PER_INTERVAL = 100
NS_PER_RUN = 300
#: Peak bytes per run swept at once, and per run copied (a head copied: 57 measured).
BYTES_PER_RUN = 240
COPY_BYTES_PER_RUN = 96

Shape = tuple[int, int, int]


def _most(value: Any) -> int:
    """The largest of a per-head value (a list) or the value itself."""
    return max(value) if isinstance(value, (list, tuple)) else int(value)


def intervals_per_row(
    pattern: str, values: dict[str, Any], n_q_blocks: int, n_k_blocks: int
) -> int:
    """The most key-block intervals the runs builder of ``pattern`` emits for one block row of
    one head, given its checked parameter ``values``."""
    if pattern == "dilated_window":
        windows, steps = values["window_blocks"], values["dilation"]
        heads = max(len(v) if isinstance(v, (list, tuple)) else 1 for v in (windows, steps))
        reach = max(n_q_blocks, n_k_blocks)
        return max(
            1 if step == 1 else min(window, reach // step + 1) * (1 if values["causal"] else 2)
            for window, step in zip(_each(windows, heads), _each(steps, heads), strict=True)
        )
    if pattern == "global_tokens":
        columns = len(set(values["global_blocks"])) if values["columns"] else 0
        return int(values["rows"]) + columns
    if pattern == "attention_sinks":
        return 2
    if pattern == "deepspeed_longformer":
        return 2 + len(values["global_block_indices"])
    return 1  # causal, sliding_window, deepspeed_local_sliding_window: one run a row


def _each(value: Any, n_heads: int) -> list[int]:
    """A per-head value as one value per head."""
    return list(value) if isinstance(value, (list, tuple)) else [value] * n_heads


class RunsBound(NamedTuple):
    """Upper bounds on a layout's runs: all of them, and the most in one head."""

    total: int = 0
    head: int = 0


def step_runs_cost(
    pattern: str, params: Any, heads: int, shape: Shape, combine: str, bound: RunsBound
) -> tuple[int, int, RunsBound]:
    """``(nanoseconds, peak bytes, runs bound after)`` of one step for ``heads`` heads, on a
    layout whose runs are within ``bound``."""
    check_runs_pattern(pattern, shape)
    n_heads, n_q, n_k = shape
    spec = PATTERNS[pattern]
    values = {p.name: p.check(params.get(p.name, p.default), heads) for p in spec.params}
    made = n_q * intervals_per_row(pattern, values, n_q, n_k)  # per head
    ns = heads * made * NS_PER_INTERVAL
    if combine == "replace" and heads == n_heads:
        return ns, heads * made * BYTES_PER_RUN, RunsBound(heads * made, made)
    swept = bound.total + heads * made  # the heads' sweep, then every head restacked
    after = RunsBound(bound.total + heads * made, bound.head + made)
    return ns + swept * NS_PER_RUN, swept * BYTES_PER_RUN, after


def region_intervals(region: Any, n_rows: int, n_cols: int) -> tuple[torch.Tensor, ...]:
    """int64 ``(rows, starts, stops)``: a region of one head as key-block intervals (clipped
    by ``BlockRuns.from_intervals``)."""
    if isinstance(region, Rect):
        rows = torch.arange(region.row0, region.row1 + 1)
        return rows, torch.full_like(rows, region.col0), torch.full_like(rows, region.col1 + 1)
    if isinstance(region, Row):
        return torch.tensor([region.row]), torch.tensor([0]), torch.tensor([n_cols])
    if isinstance(region, Column):
        rows = torch.arange(n_rows)
        return rows, torch.full_like(rows, region.col), torch.full_like(rows, region.col + 1)
    if isinstance(region, Band):  # low <= row - col <= high
        rows = torch.arange(n_rows)
        return rows, rows - region.high, rows - region.low + 1
    if isinstance(region, Bitmap):
        where = region.box_mask().nonzero()
        rows, cols = where[:, 0] + region.row0, where[:, 1] + region.col0
        return rows, cols, cols + 1
    assert isinstance(region, Cells)
    cells = torch.tensor(region.array, dtype=torch.int64)  # a read-only array: copied
    return cells[:, 0], cells[:, 1], cells[:, 1] + 1


def _region_count(region: Any, n_rows: int) -> int:
    """How many intervals ``region_intervals`` gives, without making them."""
    if isinstance(region, Rect):
        return region.row1 - region.row0 + 1
    if isinstance(region, Row):
        return 1
    if isinstance(region, (Column, Band)):
        return n_rows
    if isinstance(region, Bitmap):
        return region.count
    return len(region.cells)


def edit_runs_cost(op: Edit, shape: Shape, bound: RunsBound) -> tuple[int, int, RunsBound]:
    """``(nanoseconds, peak bytes, runs bound after)`` of one edit on a layout of ``shape``
    whose runs are within ``bound``."""
    n_heads, n_rows, _ = shape
    if isinstance(op, Transpose):
        raise ValueError(
            f"a transpose is not taken in a recipe past a dense grid ({list(shape)}): the runs "
            f"of a transposed layout follow its blocks, not its runs, so its cost is not known "
            f"before it is built; transpose the design's layout (Layout.transpose) instead"
        )
    if isinstance(op, CopyHead):  # every head restacked
        copied = bound.total + len(op.targets) * bound.head
        return copied * NS_PER_RUN, copied * COPY_BYTES_PER_RUN, RunsBound(copied, bound.head)
    assert isinstance(op, EditOp)
    heads = n_heads if op.heads is None else len(op.heads)
    painted = _region_count(op.region, n_rows) * (2 if op.action == "toggle" else 1)
    sweeps = 3 if op.action == "toggle" else 1  # a toggle: union less intersection
    swept = bound.total + heads * painted
    ns = heads * painted * NS_PER_INTERVAL + sweeps * swept * NS_PER_RUN
    after = RunsBound(swept, bound.head + painted)
    return ns, swept * BYTES_PER_RUN, after  # one sweep at a time


def replay_edit_runs(runs: BlockRuns, op: Edit) -> BlockRuns:
    """``edit.apply_edit`` on a layout's runs, without its dense grid: the region's intervals
    in the edit's heads, combined with the runs (whole blocks: a layout past a dense grid made
    by a recipe has no partial blocks)."""
    if isinstance(op, Transpose):
        return runs.transpose()
    if isinstance(op, CopyHead):
        return runs.with_heads(list(op.targets), runs.select_heads([op.source]))
    assert isinstance(op, EditOp)
    shape = runs.shape
    rows, starts, stops = region_intervals(op.region, shape[1], shape[2])
    heads = torch.arange(shape[0]) if op.heads is None else torch.tensor(op.heads)
    every = (heads[:, None] * shape[1] + rows[None, :]).reshape(-1)
    region = BlockRuns.from_intervals(shape, every, starts.repeat(len(heads)),
                                      stops.repeat(len(heads)))  # fmt: skip
    if op.action == "set":
        return runs.union(region)
    if op.action == "clear":
        return runs.difference(region)
    return runs.union(region).difference(runs.intersection(region))
