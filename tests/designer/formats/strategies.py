"""Hypothesis strategies for edits, recipes and designs, shared by their tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from designer.design import Design
from designer.edit import Band, Bitmap, Cells, Column, CopyHead, EditOp, Rect, Row, Transpose
from designer.recipe import COMBINES, Recipe, RecipeStep
from tests.factories import random_layout


@st.composite
def regions(draw, n_rows, n_cols):
    """A region of any kind that fits an ``n_rows x n_cols`` grid (a band may overhang it)."""
    kind = draw(st.sampled_from(["cells", "rect", "row", "column", "band", "bitmap"]))
    if kind == "bitmap":
        bits = draw(st.lists(st.booleans(), min_size=n_rows * n_cols, max_size=n_rows * n_cols))
        mask = np.array(bits, dtype=bool).reshape(n_rows, n_cols)
        mask[draw(st.integers(0, n_rows - 1)), draw(st.integers(0, n_cols - 1))] = True
        return Bitmap.of(mask)
    if kind == "cells":
        cell = st.tuples(st.integers(0, n_rows - 1), st.integers(0, n_cols - 1))
        return Cells(tuple(draw(st.lists(cell, min_size=1, max_size=12))))
    if kind == "rect":
        rows = sorted(draw(st.lists(st.integers(0, n_rows - 1), min_size=2, max_size=2)))
        cols = sorted(draw(st.lists(st.integers(0, n_cols - 1), min_size=2, max_size=2)))
        return Rect(rows[0], cols[0], rows[1], cols[1])
    if kind == "row":
        return Row(draw(st.integers(0, n_rows - 1)))
    if kind == "column":
        return Column(draw(st.integers(0, n_cols - 1)))
    low = draw(st.integers(-n_cols - 3, n_rows + 2))
    return Band(low, draw(st.integers(low, n_rows + 3)))


def head_subsets(n_heads):
    """Distinct heads, in any order, as a tuple."""
    return st.lists(st.integers(0, n_heads - 1), min_size=1, max_size=n_heads, unique=True).map(
        tuple
    )


def edits(shape):
    """One edit that fits a layout of ``shape``."""
    h, m, n = shape
    return st.one_of(
        st.builds(
            EditOp,
            st.sampled_from(["set", "clear", "toggle"]),
            regions(m, n),
            st.none() | head_subsets(h),
        ),
        st.builds(CopyHead, st.integers(0, h - 1), head_subsets(h)),
        st.just(Transpose()),
    )


@st.composite
def edit_sequences(draw, shape, max_size=4):
    """Edits that replay in order from ``shape`` (a transpose swaps the grid for the next ones)."""
    ops = []
    for _ in range(draw(st.integers(0, max_size))):
        op = draw(edits(shape))
        shape = op.output_shape(shape)
        ops.append(op)
    return tuple(ops)


def _per_head(values, n_heads):
    return values | st.lists(values, min_size=n_heads, max_size=n_heads)


@st.composite
def steps(draw, shape):
    """A pattern step on all or some heads, with parameters the registry accepts."""
    n_heads, n_q_blocks, n_k_blocks = shape
    heads = draw(st.none() | head_subsets(n_heads))
    count = n_heads if heads is None else len(heads)
    pattern = draw(
        st.sampled_from(["causal", "sliding_window", "random_probability", "global_tokens"])
    )
    if pattern == "causal":
        params = {}
    elif pattern == "sliding_window":
        params = {
            "window_blocks": draw(_per_head(st.integers(1, 4), count)),
            "causal": draw(st.booleans()),
        }
    elif pattern == "random_probability":
        params = {
            "seed": draw(_per_head(st.integers(0, 2**63 - 1), count)),
            "probability": draw(_per_head(st.floats(0, 1), count)),
            "causal": draw(st.booleans()),
        }
    else:
        index = st.integers(0, min(n_q_blocks, n_k_blocks) - 1)
        params = {"global_blocks": draw(st.lists(index, min_size=1, max_size=3))}
    return RecipeStep(pattern, params, heads, draw(st.sampled_from(COMBINES)))


@st.composite
def recipes(draw, max_heads=3, max_blocks=6):
    shape = (
        draw(st.integers(1, max_heads)),
        draw(st.integers(1, max_blocks)),
        draw(st.integers(1, max_blocks)),
    )
    block_size = draw(st.sampled_from([1, 16, 64, 128]))
    recipe_steps = tuple(draw(st.lists(steps(shape), max_size=3)))
    return Recipe(*shape, block_size, recipe_steps, draw(edit_sequences(shape)))


names = st.text(min_size=1, max_size=40).filter(lambda name: name.strip())
stamps = st.sampled_from(["2026-01-02T03:04:05+00:00", "2025-12-31T23:59:59+00:00", "x"])


@st.composite
def designs(draw, with_recipe=None):
    """A design with a recipe (``True``), without (``False``) or either (``None``)."""
    if with_recipe is None:
        with_recipe = draw(st.booleans())
    recipe = draw(recipes()) if with_recipe else None
    if recipe is None:
        seed = draw(st.integers(0, 2**32 - 1))
        shape = [draw(st.integers(1, 6)) for _ in range(3)]
        layout = random_layout(np.random.default_rng(seed), *shape, density=0.4, block_size=32)
    else:
        layout = recipe.build()
    return Design(
        layout,
        name=draw(names),
        causal=draw(st.booleans()),
        start_width=draw(st.none() | st.integers(0, 64)),
        recipe=recipe,
        created=draw(stamps),
        modified=draw(stamps),
    )
