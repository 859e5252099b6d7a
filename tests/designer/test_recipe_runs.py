"""Recipes past a dense grid, built as row runs: the same layouts as the dense build on small
shapes (both forms forced), estimates in runs, refusals that are clear and quick, and the
long-context family at its real sizes."""

from __future__ import annotations

import io
import time
from contextlib import contextmanager
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import designer.layout
import designer.recipe
from designer.design import Design
from designer.edit import Band, CopyHead, EditOp, Rect, Row, Transpose
from designer.formats import load_design
from designer.formats.pt_file import design_file_bytes
from designer.patterns import make_pattern
from designer.patterns.registry import RUNS_PATTERNS
from designer.recipe import COMBINES, Recipe, RecipeStep, recipe_from_dict
from designer.recipe_cost import RecipeTooLarge
from tests.designer.formats.strategies import edits, head_subsets

SINKS = {"sink_blocks": 1, "window_blocks": 64}  # benchmarks/long_context.py's family
LONG = (32, 16384, 16384, 64)  # 32 heads x 1M tokens


@contextmanager
def as_runs():
    """Recipes of any size built as row runs, and layouts of any size held as runs."""
    with (
        mock.patch.object(designer.recipe, "RUNS_CELLS", 0),
        mock.patch.object(designer.layout, "DENSE_CELLS", 0),
    ):
        yield


@st.composite
def runs_steps(draw, shape):
    """A step of a pattern made as row runs, on all or some heads, with accepted parameters."""
    n_heads, n_q, n_k = shape
    heads = draw(st.none() | head_subsets(n_heads))
    square = [name for name in RUNS_PATTERNS if n_q == n_k or not name.startswith("deepspeed")]
    pattern = draw(st.sampled_from(square))
    blocks = st.integers(1, max(n_q, n_k) + 1)
    params = {
        "causal": {},
        "sliding_window": {"window_blocks": blocks, "causal": st.booleans()},
        "dilated_window": {
            "window_blocks": blocks,
            "dilation": st.integers(1, 3),
            "causal": st.booleans(),
        },
        "attention_sinks": {"sink_blocks": st.integers(0, n_k), "window_blocks": blocks},
        "global_tokens": {
            "global_blocks": st.lists(st.integers(0, min(n_q, n_k) - 1), min_size=1, max_size=3),
            "rows": st.booleans(),
            "columns": st.booleans(),
        },
        "deepspeed_longformer": {
            "num_sliding_window_blocks": st.integers(1, n_q),
            "global_block_indices": st.just([0]),
        },
        "deepspeed_local_sliding_window": {"num_sliding_window_blocks": st.integers(1, n_q)},
    }[pattern]
    values = {name: draw(value) for name, value in params.items()}
    return RecipeStep(pattern, values, heads, draw(st.sampled_from(COMBINES)))


@st.composite
def runs_recipes(draw):
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, 9)), draw(st.integers(1, 9)))
    steps = tuple(draw(st.lists(runs_steps(shape), max_size=3)))
    ops = draw(st.lists(edits(shape).filter(lambda op: not isinstance(op, Transpose)),
                        max_size=4))  # fmt: skip
    seq_q = draw(st.sampled_from([None, shape[1] * 16 - 5]))
    return Recipe(*shape, 16, steps, tuple(ops), seq_q=seq_q)


def again(recipe: Recipe) -> Recipe:
    """The same recipe made afresh (as runs inside ``as_runs``)."""
    return Recipe(**{name: getattr(recipe, name) for name in Recipe.__dataclass_fields__})


@settings(max_examples=120, deadline=None)
@given(runs_recipes())
def test_a_recipe_built_as_runs_is_its_dense_build(recipe):
    try:
        dense = recipe.build()
    except ValueError:  # parameters the patterns refuse: as runs too
        with as_runs(), pytest.raises(ValueError):
            again(recipe).build()
        return
    with as_runs():
        built_as_runs = again(recipe)
        assert built_as_runs.as_runs and not recipe.as_runs
        built = built_as_runs.build()
        assert built.runs is not None  # made and held as runs from start to end
        assert built.to_runs() == dense.to_runs() and built.seq_len_q == dense.seq_len_q
        painted = built_as_runs.with_edit(EditOp("toggle", Row(0)))  # from the built layout
        expected = recipe.with_edit(EditOp("toggle", Row(0))).build()
        assert painted.build().to_runs() == expected.to_runs()


def test_the_long_context_family_builds_as_runs_in_its_runs_time():
    """32 heads x 1M tokens of sinks and a 4K window: the runs' time, not the 8.6 G cells'."""
    recipe = Recipe(*LONG, steps=(RecipeStep("attention_sinks", SINKS),))
    assert recipe.as_runs and recipe.build_ns < 0.5e9  # estimated from 1M intervals
    started = time.perf_counter()
    layout = recipe.build()
    took = time.perf_counter() - started
    assert layout.runs is not None and layout == make_pattern("attention_sinks", *LONG, SINKS)
    assert took < 2.0, f"{took:.2f} s"  # measured 0.07-0.10 s on 2 shared cores


def test_steps_and_edits_past_a_dense_grid_combine_as_runs():
    shape = (32, 2048, 2048, 64)  # 128K tokens
    recipe = Recipe(*shape, steps=(
        RecipeStep("attention_sinks", SINKS),
        RecipeStep("sliding_window", {"window_blocks": 100, "causal": False}, (1, 2), "union"),
        RecipeStep("global_tokens", {"global_blocks": [5]}, (3,), "subtract"),
    ), edits=(EditOp("set", Rect(10, 10, 200, 300), heads=(3,)), EditOp("toggle", Band(-3, 2)),
              CopyHead(3, (4, 5))))  # fmt: skip
    layout = recipe.build()
    assert layout.runs is not None
    heads = layout.to_runs().head_counts().tolist()
    assert heads[4] == heads[5] == heads[3] != heads[0] and heads[1] == heads[2] > heads[0]
    data = design_file_bytes(Design(layout, recipe=recipe))  # the file's check rebuilds it
    loaded = load_design(io.BytesIO(data))
    assert loaded.layout == layout and loaded.recipe == recipe
    assert recipe_from_dict(recipe.to_dict()).build() == layout


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: Recipe(*LONG, steps=(RecipeStep("random_per_row"),)), ValueError,
         r"Random \(blocks per row\) \('random_per_row'\) is made on a dense grid, at most "
         r"67,108,864 cells, got 8,589,934,592 .* row runs: causal, sliding_window"),
        (lambda: Recipe(*LONG, steps=(RecipeStep("token_sliding_window"),)), ValueError,
         r"steps\[0\] \(token_sliding_window\): .* made on a dense grid"),
        (lambda: Recipe(*LONG, edits=(Transpose(),)), ValueError,
         r"edits\[0\]: a transpose is not taken in a recipe past a dense grid"),
        (lambda: Recipe(*LONG, steps=(RecipeStep("attention_sinks", SINKS),) * 2
                        + (RecipeStep("dilated_window", {"window_blocks": 4096, "dilation": 2}),)),
         RecipeTooLarge, r"recipe would take about [0-9.]+ s to build .* limit of 2.0 s"),
        (lambda: Recipe(*LONG, steps=(RecipeStep("attention_sinks", SINKS),),
                        edits=(EditOp("toggle", Band(-3, 2)),) * 3),
         RecipeTooLarge, r"recipe would (take about|need about)"),
    ],
)  # fmt: skip
def test_refusals_past_a_dense_grid_are_clear_and_quick(make, error, message):
    started = time.perf_counter()
    with pytest.raises(error, match=message):
        make()
    assert time.perf_counter() - started < 0.5  # refused from the estimate, nothing built


def test_active_blocks_past_the_limit_are_refused_as_the_runs_are_made():
    """A causal step at 32 x 16384^2 is 4.3 G active blocks: refused in the time of its 524K
    runs, saying how many and the limit."""
    recipe = Recipe(*LONG, steps=(RecipeStep("causal"),))
    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"at most 67,108,864 active blocks, got 4,295,229,440"):
        recipe.build()
    assert time.perf_counter() - started < 1.0


def test_an_edit_past_the_budget_is_refused_and_the_recipe_kept():
    recipe = Recipe(*LONG, steps=(RecipeStep("attention_sinks", SINKS),))
    recipe = recipe.with_edit(EditOp("set", Band(0, 1)))
    with pytest.raises(RecipeTooLarge, match=r"recipe would (take|need) about .* runs\)"):
        for _ in range(8):
            recipe = recipe.with_edit(EditOp("toggle", Band(-3, 2)))
    assert recipe.edits[0] == EditOp("set", Band(0, 1)) and recipe.as_runs
    with pytest.raises(RecipeTooLarge, match="cannot be flattened into bitmap edits"):
        recipe.flattened()
