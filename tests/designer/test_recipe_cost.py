"""The build-cost budget: payloads that once stalled the server are refused before any work."""

import json
import time

import pytest
import torch

from designer.edit import Band, CopyHead, EditOp, Rect, Transpose
from designer.formats import design_from_json
from designer.patterns.registry import PATTERNS
from designer.recipe import Recipe, RecipeStep
from designer.recipe_cost import MAX_BUILD_SECONDS, NS_PER_CELL, edit_ns, step_ns


def quickly(call, seconds=0.5):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"recipe would take about [\d.]+ s to build") as caught:
        call()
    assert time.perf_counter() - start < seconds, "refused from the estimate, nothing built"
    assert f"limit of {MAX_BUILD_SECONDS:.1f} s" in str(caught.value)
    return str(caught.value)


def test_every_generator_has_a_measured_rate():
    generators = {name for name, spec in PATTERNS.items() if spec.family == "generator"}
    assert generators == set(NS_PER_CELL)


def test_the_506_byte_bigbird_recipe_is_refused_at_once():
    params = {"num_random_blocks": 2047, "different_layout_per_head": True, "seed": 1}
    text = json.dumps(
        {
            "format": "blocksparse-design-recipe", "version": 1, "name": "x", "causal": False,
            "start_width": None, "created": "2026-01-01", "modified": "2026-01-01",
            "recipe": {
                "n_heads": 16, "n_q_blocks": 2048, "n_k_blocks": 2048, "block_size": 16,
                "steps": [{"pattern": "deepspeed_bigbird", "params": params, "heads": None,
                           "combine": "replace"}],
                "edits": [],
            },
        }
    )  # fmt: skip
    assert len(text) < 700
    message = quickly(lambda: design_from_json(text))
    assert "about 51" in message  # 16 heads x 2048 rows x 2047 draws, about 0.7 us each


def test_many_steps_at_the_largest_size_are_refused():
    step = RecipeStep("sliding_window", {"window_blocks": 3})
    quickly(lambda: Recipe(16, 2048, 2048, 16, steps=(step,) * 256))
    Recipe(16, 2048, 2048, 16, steps=(step,) * 2)  # a few steps still fit


def test_many_edits_are_refused_when_made_and_flattened_when_painted():
    band = EditOp("toggle", Band(-3, 3))
    quickly(lambda: Recipe(16, 2048, 2048, 16, edits=(band,) * 100))
    recipe = Recipe(16, 1024, 1024, 16, steps=(RecipeStep("causal"),))
    for _ in range(41):  # past the build budget after about 30: the recipe flattens
        recipe = recipe.with_edit(band)
    assert not recipe.steps and len(recipe.edits) < 41
    expected = torch.ones(1024, 1024, dtype=torch.bool).tril() ^ Band(-3, 3).mask(1024, 1024)
    assert torch.equal(recipe.build().blocks, expected.expand(16, -1, -1))
    small = EditOp("set", Rect(0, 0, 3, 3), heads=(0,))
    assert len(recipe.with_edit(small).with_edit(small).edits) == len(recipe.edits) + 2


def test_transposes_are_views_but_a_transposed_copy_is_counted():
    shape = (16, 2048, 2048)
    assert edit_ns(Transpose(), shape) == 0
    assert edit_ns(CopyHead(0, (1, 2)), shape) > 0
    one = Recipe(*shape, 16, edits=(Transpose(),))
    two = Recipe(*shape, 16, edits=(Transpose(), Transpose()))
    assert one.__dict__["_cost"][1] == 1 and two.__dict__["_cost"][1] == 2


def test_draws_count_only_the_heads_that_draw():
    shared = step_ns("deepspeed_bigbird", {"num_random_blocks": 3}, 16, 256, 256)
    per_head = step_ns(
        "deepspeed_bigbird",
        {"num_random_blocks": 3, "different_layout_per_head": True},
        16,
        256,
        256,
    )
    assert per_head > shared


@pytest.mark.parametrize("n_heads", [1, 3])
def test_replayed_edits_equal_the_layout_operations(n_heads):
    """In-place replay (``Recipe.build``) against ``apply_edit`` one by one."""
    from designer.edit import Cells, Column, Row, apply_edit

    edits = (
        EditOp("set", Band(-2, 1), heads=(0,)),
        Transpose(),
        EditOp("toggle", Cells(((0, 1), (2, 2), (0, 1))), heads=None),
        CopyHead(0, tuple(range(n_heads))),
        EditOp("clear", Row(1)),
        EditOp("toggle", Column(0), heads=(n_heads - 1,)),
        EditOp("toggle", Band(0, 0), heads=(n_heads - 1,)),
        EditOp("set", Rect(1, 1, 2, 3), heads=(0,)),
    )
    recipe = Recipe(n_heads, 4, 5, 16, steps=(RecipeStep("causal"),), edits=edits)
    layout = Recipe(n_heads, 4, 5, 16, steps=(RecipeStep("causal"),)).build()
    for op in edits:
        layout = apply_edit(layout, op)
    assert torch.equal(recipe.build().blocks, layout.blocks)


def test_200_transposes_at_the_largest_size_build_in_time():
    recipe = Recipe(16, 2048, 2048, 16, steps=(RecipeStep("causal"),), edits=(Transpose(),) * 200)
    start = time.perf_counter()
    layout = recipe.build()
    assert time.perf_counter() - start < 5.0  # once 44.6 s; a generous guard for CI
    assert torch.equal(layout.blocks[0, :3, :3], torch.ones(3, 3, dtype=torch.bool).tril())


def test_a_wide_grid_counts_its_index_temporaries():
    """1 x 1024 x 65536 blocks: the default dilated window took 9 s and 1.9 GB in the app (its
    index grids are one head's grid, uncached), the sliding window 1 s and 700 MB."""
    quickly(lambda: Recipe(1, 1024, 65536, 16, steps=(RecipeStep("dilated_window"),)))
    start = time.perf_counter()
    with pytest.raises(
        ValueError, match=r"would need about \d{3} MiB to build .*, more than the limit of 512 MiB"
    ):
        Recipe(1, 1024, 65536, 16, steps=(RecipeStep("sliding_window"),))
    assert time.perf_counter() - start < 0.5
    Recipe(16, 2048, 2048, 16, steps=(RecipeStep("dilated_window"),))  # a 16 times smaller grid
    Recipe(1, 1024, 65536, 16, steps=(RecipeStep("causal"),))  # no index grid to speak of
