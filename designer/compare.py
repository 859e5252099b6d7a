"""Two designs side by side: their figures at one model shape, and the blocks that differ.

``compare_figures`` gives each design's figures as rows of the same labels, costed at one model
shape when both designs can serve it (so "FLOPs" mean the same thing in both columns), else each
at its own. ``head_diff`` maps one head of each onto codes (``BOTH``, ``ONLY_FIRST``,
``ONLY_SECOND``, ``NEITHER``) and counts them; grids of different shapes have no block-by-block
diff (``diff_refusal`` says why). Pure: the views draw the codes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from designer.costs import attention_costs
from designer.design import Design
from designer.model_shape import ModelShape
from designer.units import bytes_text, flops_text
from designer.validate import check_int

NEITHER, BOTH, ONLY_FIRST, ONLY_SECOND = 0, 1, 2, 3


@dataclass(frozen=True)
class HeadDiff:
    """One head of each design, block by block: ``codes`` ``[M, N]`` uint8 and the counts."""

    codes: np.ndarray
    both: int
    only_first: int
    only_second: int

    @property
    def differing(self) -> int:
        return self.only_first + self.only_second


def shared_shape(first: Design, second: Design) -> ModelShape | None:
    """The model shape both designs are costed at: the first's, when the second can serve it
    too (else None: each at its own)."""
    shape = first.model_shape
    heads = shape.query_heads(first.layout.n_heads)
    wanted = ModelShape(shape.batch, heads, shape.kv_heads, shape.head_dim)
    try:
        wanted.check_serves(second.layout.n_heads)
    except ValueError:
        return None
    return wanted


def compare_figures(first: Design, second: Design) -> list[tuple[str, str, str]]:
    """``(label, first's value, second's value)`` rows of the figures both designs have."""
    shape = shared_shape(first, second)
    rows: list[tuple[str, str, str]] = []
    columns = []
    for design in (first, second):
        layout = design.layout
        costs = attention_costs(design, shape or design.model_shape)
        columns.append(
            {
                "Shape": f"{layout.n_heads} × {layout.n_q_blocks} × {layout.n_k_blocks} blocks "
                f"of {layout.block_size}",
                "Tokens": f"{layout.seq_len_q:,} × {layout.seq_len_k:,}",
                "Causal": "yes" if design.causal else "no",
                "Density": f"{layout.density:.2%}",
                "Active blocks": f"{layout.nnz:,}",
                "FLOPs vs dense": f"{costs.vs_dense:.2%} of {costs.dense_kind}",
                "Attention FLOPs": flops_text(costs.flops),
                "Memory (q, k, v, o)": bytes_text(costs.input_bytes),
                "Packed scores (SDD)": bytes_text(costs.score_bytes),
            }
        )
    for label in columns[0]:
        rows.append((label, columns[0][label], columns[1][label]))
    return rows


def diff_refusal(first: Design, second: Design) -> str | None:
    """Why the two designs have no block-by-block diff, or None when they have one."""
    a, b = first.layout, second.layout
    if (a.n_q_blocks, a.n_k_blocks, a.block_size) != (b.n_q_blocks, b.n_k_blocks, b.block_size):
        return (
            f"the grids differ ({a.n_q_blocks} × {a.n_k_blocks} blocks of {a.block_size} against "
            f"{b.n_q_blocks} × {b.n_k_blocks} of {b.block_size}), so blocks do not pair up"
        )
    return None


def diff_heads(first: Design, second: Design) -> int:
    """How many heads pair up: a one-head design's head pairs with each of the other's."""
    a, b = first.layout.n_heads, second.layout.n_heads
    return max(a, b) if 1 in (a, b) else min(a, b)


def head_diff(first: Design, second: Design, head: int) -> HeadDiff:
    """Head ``head`` of each design (a one-head design's only head serves every head), block by
    block; ``ValueError`` when ``diff_refusal`` gives a reason or the head is in neither."""
    if (why := diff_refusal(first, second)) is not None:
        raise ValueError(f"no diff: {why}")
    head = check_int("head", head, low=0, high=diff_heads(first, second) - 1)
    a, b = (_head(design, head) for design in (first, second))
    codes = np.zeros(a.shape, dtype=np.uint8)
    codes[a & b] = BOTH
    codes[a & ~b] = ONLY_FIRST
    codes[~a & b] = ONLY_SECOND
    counts = np.bincount(codes.ravel(), minlength=4)
    return HeadDiff(codes, int(counts[BOTH]), int(counts[ONLY_FIRST]), int(counts[ONLY_SECOND]))


def _head(design: Design, head: int) -> np.ndarray:
    layout = design.layout
    return layout.to_numpy()[0 if layout.n_heads == 1 else head].astype(bool)
