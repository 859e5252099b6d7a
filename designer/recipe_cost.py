"""What building a recipe costs, estimated before any of it is built, and the budget it must fit.

A recipe read from a file is rebuilt from scratch, so a few hundred bytes of JSON could ask for
minutes of work: 256 steps over the largest layout, thousands of edits, or DeepSpeed's random
blocks drawn one ``random.sample`` at a time in Python. ``recipe.Recipe`` adds up each step and
edit here when it is made and refuses one whose estimate passes ``MAX_BUILD_SECONDS``, saying the
estimate and the limit. The estimate is a sum of measured rates (one CPU core of the CI machine,
2026-11-30, torch 2.13; ``tools/bounded_cost.py`` checks them at the limits):

- a step: ``heads x q_blocks x k_blocks`` cells at its pattern's rate (``NS_PER_CELL``); a
  DeepSpeed config builds int64 layouts, one per layout head (one in all unless
  ``different_layout_per_head``), at ``DEEPSPEED_NS_PER_CELL``, plus one ``random.sample`` draw
  per random block per row per layout head for Variable and BigBird (``DRAW_NS``);
- an edit: the cells it paints in each of its heads (a band: its whole grid) at ``EDIT_NS``; a
  ``CopyHead`` one head per target; a ``Transpose`` is a view, but then the final copy is strided
  (``TRANSPOSED_COPY_NS`` rather than ``COPY_NS`` per cell).

A pattern also works on index grids of one head's ``q_blocks x k_blocks`` cells, whatever its
heads: on a grid too large for the caches (1 x 1024 x 65536) that costs far more per cell than
on 16 x 2048 x 2048, so a step adds ``GRID_NS_PER_CELL`` per grid cell, measured on the widest
grids. Memory is estimated too, and a recipe must build within ``MAX_BUILD_BYTES``: the grid's
temporaries of the costliest step or edit (``GRID_BYTES_PER_CELL``, their peak on the widest
grids) plus ``BUILD_BYTES_PER_CELL`` for the working grid, the steps kept and the final copy.
``RecipeCost`` carries the running totals, so a recipe growing by one edit adds its share.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from designer.edit import CopyHead, EditOp, Transpose
from designer.patterns.registry import PATTERNS
from designer.regions import Band, Bitmap, Cells, Column, Rect, Row

#: Longest estimated build a recipe may ask for.
MAX_BUILD_SECONDS = 2.0
#: Nanoseconds per cell of generating a pattern and combining it in: the worst CPU time over
#: four shapes of 64M cells (``tools/bounded_cost.py --calibrate``) plus a fifth for margin.
NS_PER_CELL = {
    "causal": 4,
    "sliding_window": 6,
    "dilated_window": 12,
    "global_tokens": 4,
    "attention_sinks": 7,
    "random_per_row": 75,
    "random_probability": 40,
    "block_diagonal": 3,
    "prefix_lm": 3,
    "packed_documents": 4,
    "vertical_slash": 7,
    "neighborhood_2d": 16,
}
#: Per cell of one head's grid, on top of ``NS_PER_CELL``: the index grids' time on the widest
#: grids (1 x 1024 x 65536 and 1 x 65536 x 1024, 2026-12-01), less the per-cell rate, plus a fifth.
GRID_NS_PER_CELL = {
    "sliding_window": 11,
    "dilated_window": 24,
    "attention_sinks": 11,
    "block_diagonal": 2,
    "prefix_lm": 3,
    "packed_documents": 6,
    "vertical_slash": 22,
    "neighborhood_2d": 82,
}
#: Bytes per cell of one head's grid that a step's temporaries peak at (index grids, random
#: keys), measured on the widest grids with a margin; DeepSpeed keeps int64 layouts instead.
GRID_BYTES_PER_CELL = {
    "sliding_window": 10,
    "dilated_window": 18,
    "attention_sinks": 10,
    "random_per_row": 18,
    "random_probability": 10,
    "vertical_slash": 8,
    "neighborhood_2d": 44,
}
#: Bytes per cell of the whole layout: the working grid, the generated steps kept for the next
#: build and the final copy (measured: 139-294 MB for 64M cells, 2026-11-30).
BUILD_BYTES_PER_CELL = 3
#: Most memory a recipe's build may take, estimated as above.
MAX_BUILD_BYTES = 512 << 20
#: A DeepSpeed config's int64 layout, per cell of each layout head (the rest is ``BROADCAST_NS``).
DEEPSPEED_NS_PER_CELL = 60
BROADCAST_NS = 3
#: One Python ``random.sample`` draw of DeepSpeed's Variable and BigBird.
DRAW_NS = 700
#: Reading a file: per JSON value (parse, check, make), counted as commas before parsing.
READ_NS_PER_VALUE = 300
#: Painting one cell in place; the final copy of the grid, plain or after a transpose.
EDIT_NS = 2
COPY_NS = 3
TRANSPOSED_COPY_NS = 20

Shape = tuple[int, int, int]


class RecipeCost(NamedTuple):
    """A recipe's estimates so far: build nanoseconds before the final copy, transposes (the
    copy's rate), characters in a file, the largest step or edit temporaries in bytes, values
    in a file (commas + 1), and for a recipe built as row runs the bounds on its runs
    (``recipe_runs.RunsBound``: all of them, the most in one head)."""

    ns: int = 0
    transposes: int = 0
    chars: int = 0
    transient_bytes: int = 0
    values: int = 0
    runs: tuple[int, int] = (0, 0)


def _layout_heads(pattern: str, params: Any, n_heads: int) -> int:
    """How many layouts a DeepSpeed config builds: one per head, or one for all."""
    return n_heads if params.get("different_layout_per_head", False) is True else 1


def step_ns(pattern: str, params: Any, n_heads: int, n_q_blocks: int, n_k_blocks: int) -> int:
    """Estimated nanoseconds of generating ``pattern`` for ``n_heads`` heads and combining it in."""
    cells = n_heads * n_q_blocks * n_k_blocks
    if not pattern.startswith("deepspeed_"):
        grid = n_q_blocks * n_k_blocks * GRID_NS_PER_CELL.get(pattern, 0)
        return cells * NS_PER_CELL.get(pattern, 10) + grid
    layout_heads = _layout_heads(pattern, params, n_heads)
    ns = layout_heads * n_q_blocks * n_k_blocks * DEEPSPEED_NS_PER_CELL + cells * BROADCAST_NS
    if pattern in ("deepspeed_variable", "deepspeed_bigbird"):
        default = PATTERNS[pattern].param("num_random_blocks").default
        random_blocks = params.get("num_random_blocks", default)
        if isinstance(random_blocks, int) and random_blocks > 0:  # else the pattern refuses it
            ns += layout_heads * n_q_blocks * min(random_blocks, n_k_blocks) * DRAW_NS
    return ns


def step_bytes(pattern: str, params: Any, n_heads: int, n_q_blocks: int, n_k_blocks: int) -> int:
    """Estimated peak bytes of one step's temporaries and its generated pattern."""
    grid = n_q_blocks * n_k_blocks
    if pattern.startswith("deepspeed_"):
        return _layout_heads(pattern, params, n_heads) * grid * 8 + n_heads * grid
    return grid * GRID_BYTES_PER_CELL.get(pattern, 0) + n_heads * grid


def edit_bytes(op: Any, shape: Shape) -> int:
    """Estimated peak bytes of one edit's temporaries: a band's mask and a head, a bitmap's box."""
    if isinstance(op, EditOp) and isinstance(op.region, Band):
        return 3 * shape[1] * shape[2]
    if isinstance(op, EditOp) and isinstance(op.region, Bitmap):
        return 3 * op.region.rows * op.region.cols
    return 0


def edit_ns(op: Any, shape: Shape) -> int:
    """Estimated nanoseconds of replaying one edit in place on a layout of ``shape`` (before it)."""
    n_heads, n_rows, n_cols = shape
    if isinstance(op, Transpose):
        return 0
    if isinstance(op, CopyHead):
        return len(op.targets) * n_rows * n_cols * EDIT_NS
    assert isinstance(op, EditOp)
    heads = n_heads if op.heads is None else len(op.heads)
    region = op.region
    if isinstance(region, Cells):
        area = len(region.cells)
    elif isinstance(region, Rect):
        area = (region.row1 - region.row0 + 1) * (region.col1 - region.col0 + 1)
    elif isinstance(region, Row):
        area = n_cols
    elif isinstance(region, Column):
        area = n_rows
    elif isinstance(region, Bitmap):
        area = 2 * region.rows * region.cols  # the box's mask, then each head's box
    else:
        assert isinstance(region, Band)
        area = n_rows * n_cols + n_rows * n_cols  # the mask, then each head
    return heads * area * EDIT_NS


def copy_ns(shape: Shape, transposes: int) -> int:
    """Estimated nanoseconds of the final copy of the grid into a ``Layout``."""
    cells = shape[0] * shape[1] * shape[2]
    return cells * (TRANSPOSED_COPY_NS if transposes % 2 else COPY_NS)


class RecipeTooLarge(ValueError):
    """A recipe past one of its limits (build time, size in a file, number of edits): painting
    flattens the recipe rather than refusing the edit (``Recipe.with_edit``)."""


def check_budget(ns: int, memory: int = 0, *, runs: bool = False) -> None:
    """Raise ``RecipeTooLarge`` giving the estimate and the limit if a recipe is over budget in
    time (``ns``) or memory (``memory`` bytes); ``runs``: a recipe built as row runs, whose
    estimates come from its runs (``recipe_runs``)."""
    if ns > MAX_BUILD_SECONDS * 1e9:
        source = "its steps' and edits' runs" if runs else "its steps, edits and random draws"
        advice = "fewer or narrower steps and edits" if runs else "fewer steps, edits or random"
        advice += "" if runs else " blocks"
        raise RecipeTooLarge(
            f"recipe would take about {ns / 1e9:.1f} s to build (estimated from {source}), "
            f"more than the limit of {MAX_BUILD_SECONDS:.1f} s; use {advice} at this size"
        )
    if memory > MAX_BUILD_BYTES:
        source = "its steps' and edits' runs" if runs else "its steps and grid"
        advice = "fewer or narrower steps and edits" if runs else "a smaller grid for these"
        advice += "" if runs else " patterns"
        raise RecipeTooLarge(
            f"recipe would need about {memory / 2**20:,.0f} MiB to build (estimated from "
            f"{source}), more than the limit of {MAX_BUILD_BYTES >> 20} MiB; use {advice}"
        )


def build_bytes(shape: Shape, transient_bytes: int) -> int:
    """Estimated peak bytes of a build ending in a layout of ``shape``."""
    return shape[0] * shape[1] * shape[2] * BUILD_BYTES_PER_CELL + transient_bytes
