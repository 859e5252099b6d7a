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
"""

from __future__ import annotations

from typing import Any

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
#: A DeepSpeed config's int64 layout, per cell of each layout head (the rest is ``BROADCAST_NS``).
DEEPSPEED_NS_PER_CELL = 60
BROADCAST_NS = 3
#: One Python ``random.sample`` draw of DeepSpeed's Variable and BigBird.
DRAW_NS = 700
#: Painting one cell in place; the final copy of the grid, plain or after a transpose.
EDIT_NS = 2
COPY_NS = 3
TRANSPOSED_COPY_NS = 20

Shape = tuple[int, int, int]


def step_ns(pattern: str, params: Any, n_heads: int, n_q_blocks: int, n_k_blocks: int) -> int:
    """Estimated nanoseconds of generating ``pattern`` for ``n_heads`` heads and combining it in."""
    cells = n_heads * n_q_blocks * n_k_blocks
    if not pattern.startswith("deepspeed_"):
        return cells * NS_PER_CELL.get(pattern, 10)
    different = params.get("different_layout_per_head", False) is True
    layout_heads = n_heads if different else 1
    ns = layout_heads * n_q_blocks * n_k_blocks * DEEPSPEED_NS_PER_CELL + cells * BROADCAST_NS
    if pattern in ("deepspeed_variable", "deepspeed_bigbird"):
        default = PATTERNS[pattern].param("num_random_blocks").default
        random_blocks = params.get("num_random_blocks", default)
        if isinstance(random_blocks, int) and random_blocks > 0:  # else the pattern refuses it
            ns += layout_heads * n_q_blocks * min(random_blocks, n_k_blocks) * DRAW_NS
    return ns


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


def check_budget(ns: int) -> None:
    """Raise ``RecipeTooLarge`` giving the estimate and the limit if a recipe is over budget."""
    if ns > MAX_BUILD_SECONDS * 1e9:
        raise RecipeTooLarge(
            f"recipe would take about {ns / 1e9:.1f} s to build (estimated from its steps, edits "
            f"and random draws), more than the limit of {MAX_BUILD_SECONDS:.1f} s; use fewer "
            f"steps, edits or random blocks at this size"
        )
