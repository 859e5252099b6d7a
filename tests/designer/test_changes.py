import pytest
import torch

from designer import changes
from designer.changes import Shape
from designer.design import Design
from designer.edit import EditOp, Rect
from designer.layout import Layout
from designer.recipe import Recipe, RecipeStep


def recipe_design(n_heads=2, blocks=8, block_size=64, steps=None, edits=()):
    steps = steps or (RecipeStep("sliding_window", {"window_blocks": 2}),)
    recipe = Recipe(n_heads, blocks, blocks, block_size, steps=steps, edits=edits)
    return Design(recipe.build(), name="d", recipe=recipe)


def test_shape_counts_blocks():
    shape = Shape(4096, 8192, 64, 8)
    assert (shape.n_q_blocks, shape.n_k_blocks) == (64, 128)
    assert Shape.of(Layout.zeros(2, 3, 5, 16)) == Shape(48, 80, 16, 2)
    assert (Shape(1000, 65, 64, 1).n_q_blocks, Shape(1000, 65, 64, 1).n_k_blocks) == (16, 2)


def test_reshape_to_lengths_inside_the_last_block_keeps_them():
    design = recipe_design()
    new, _ = changes.reshape(design, Shape(1000, 900, 64, 2))
    assert (new.layout.seq_len_q, new.layout.seq_len_k, new.layout.shape) == (
        1000,
        900,
        (2, 16, 15),
    )
    assert new.recipe.build() == new.layout and Shape.of(new.layout) == Shape(1000, 900, 64, 2)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((4096, 0, 64, 8), ValueError, r"key tokens must be in \[1, 1048576\], got 0"),
        ((4096, 4096, 0, 8), ValueError, r"block size must be in \[1, 4096\], got 0"),
        ((4096, 4096, 64, 0), ValueError, r"heads must be in \[1, 1024\], got 0"),
        ((4096.0, 4096, 64, 8), TypeError, r"query tokens must be an integer"),
    ],
)  # fmt: skip
def test_shape_checks_say_what_to_fix(args, error, match):
    with pytest.raises(error, match=match):
        Shape(*args)


def test_reshape_rebuilds_at_the_new_shape_and_keeps_fitting_edits():
    design = recipe_design(edits=(EditOp("set", Rect(0, 5, 1, 6)),))
    new, note = changes.reshape(design, Shape(1024, 1024, 64, 3))
    assert note is None
    assert new.layout.shape == (3, 16, 16) and new.recipe.build() == new.layout
    assert new.layout.blocks[:, 0, 5].all()


def test_reshape_drops_edits_that_no_longer_fit_and_says_so():
    design = recipe_design(edits=(EditOp("set", Rect(6, 6, 7, 7)),))
    new, note = changes.reshape(design, Shape(256, 256, 64, 2))
    assert "1 manual edit(s) did not fit" in note
    assert new.recipe.edits == () and new.layout.shape == (2, 4, 4)


def test_reshape_without_a_recipe_is_refused():
    design = Design(Layout.zeros(1, 4, 4, 16))
    with pytest.raises(ValueError, match="imported without a recipe, so its shape is fixed"):
        changes.reshape(design, Shape(128, 128, 16, 1))


def test_reshape_to_fewer_heads_than_a_step_names():
    step = RecipeStep("causal", heads=(1,))
    design = recipe_design(steps=(RecipeStep("sliding_window"), step))
    with pytest.raises(ValueError, match="is outside the layout's 1 heads"):
        changes.reshape(design, Shape(512, 512, 64, 1))


def test_set_add_and_remove_steps():
    design = recipe_design()
    added = changes.set_step(design, 1, RecipeStep("causal", heads=(1,)))
    assert len(added.recipe.steps) == 2
    assert torch.equal(added.layout.blocks[1], torch.ones(8, 8, dtype=torch.bool).tril())
    assert torch.equal(added.layout.blocks[0], design.layout.blocks[0])
    replaced = changes.set_step(added, 0, RecipeStep("causal"))
    assert replaced.layout.nnz == 2 * 36
    removed = changes.remove_step(replaced, 1)
    assert removed.recipe.steps == (RecipeStep("causal"),)
    with pytest.raises(ValueError, match=r"step must be in \[0, 1\], got 3"):
        changes.set_step(design, 3, RecipeStep("causal"))


def test_a_step_starts_a_recipe_for_an_imported_layout():
    imported = Design(Layout(torch.ones(2, 4, 4, dtype=torch.bool), 32))
    new = changes.set_step(imported, 0, RecipeStep("causal"))
    assert new.recipe.n_heads == 2 and new.layout.nnz == 2 * 10


def test_edit_applies_once_and_is_recorded():
    design = recipe_design()
    op = EditOp("toggle", Rect(0, 0, 7, 7), heads=(1,))
    new = changes.edit(design, op)
    assert new.recipe.edits == (op,)
    assert new.recipe.build() == new.layout
    assert torch.equal(new.layout.blocks[1], ~design.layout.blocks[1])
    bare = changes.edit(Design(Layout.zeros(1, 2, 2, 16)), EditOp("set", Rect(0, 0, 0, 0)))
    assert bare.recipe is None and bare.layout.nnz == 1


def test_settings():
    design = recipe_design()
    assert changes.settings(design, name="d", causal=False, start_width=None) is design
    new = changes.settings(design, name="  renamed ", causal=True, start_width=4)
    assert (new.name, new.causal, new.start_width) == ("renamed", True, 4)
    with pytest.raises(ValueError, match="name must be 1 to 80 characters, not only spaces"):
        changes.settings(design, name="   ", causal=False, start_width=None)


def test_drop_edits_rebuilds_from_the_patterns():
    design = recipe_design(edits=(EditOp("set", Rect(0, 0, 7, 7)),))
    assert design.layout.nnz == 2 * 64
    dropped = changes.drop_edits(design)
    assert dropped.recipe.edits == () and dropped.layout == recipe_design().layout
    bare = Design(Layout.zeros(1, 2, 2, 16))
    assert changes.drop_edits(bare) is bare


def test_clip_causal_clears_above_the_diagonal():
    design = recipe_design(
        steps=(RecipeStep("sliding_window", {"window_blocks": 3, "causal": False}),)
    )
    clipped = changes.clip_causal(design)
    assert torch.equal(clipped.layout.blocks, design.layout.blocks.tril())
    assert clipped.recipe.build() == clipped.layout


@pytest.mark.parametrize("pattern", ["packed_documents", "neighborhood_2d"])
@pytest.mark.parametrize("n_blocks", [1, 2, 7, 16, 61, 64, 250])
def test_fitted_steps_leave_no_query_row_empty(pattern, n_blocks):
    step = changes.fitted_step(pattern, n_blocks, combine="replace")
    layout = Recipe(2, n_blocks, n_blocks, 64, steps=(step,)).build()
    assert layout.blocks.any(dim=2).all()


def test_a_new_head_count_keeps_a_model_shape_the_design_can_serve():
    from dataclasses import replace

    from designer.model_shape import ModelShape

    design = replace(recipe_design(), model_shape=ModelShape(batch=2, kv_heads=2))
    n_q = design.layout.n_q_blocks * design.layout.block_size
    n_k = design.layout.n_k_blocks * design.layout.block_size
    shape = changes.Shape(n_q, n_k, design.layout.block_size, 3)
    reshaped, _ = changes.reshape(design, shape)
    assert reshaped.model_shape == ModelShape(batch=2)  # 2 kv heads do not divide 3 heads
    with pytest.raises(ValueError, match="heads must be 2 for this 2-head design"):
        changes.set_model_shape(design, batch=1, heads=8, kv_heads=8, head_dim=64)
