import copy
import dataclasses
import json
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.edit import Band, Cells, EditOp, Rect, Row, Transpose, apply_edit
from designer.layout import Layout
from designer.patterns.registry import make_pattern
from designer.recipe import MAX_PARAM_ITEMS, Params, Recipe, RecipeStep, recipe_from_dict
from tests.designer.formats.strategies import edit_sequences, recipes
from tests.designer.test_edit import reference_apply


def reference_build(recipe):
    """Steps combined cell by cell with Python logic, then edits replayed by the edit reference."""
    h_count, m, n = recipe.n_heads, recipe.n_q_blocks, recipe.n_k_blocks
    grid = np.zeros((h_count, m, n), dtype=bool)
    for step in recipe.steps:
        heads = list(range(h_count)) if step.heads is None else list(step.heads)
        params = json.loads(json.dumps(dict(step.params)))
        made = make_pattern(step.pattern, len(heads), m, n, recipe.block_size, params)
        made = made.blocks.numpy()
        for k, h in enumerate(heads):
            for r in range(m):
                for c in range(n):
                    old, new = bool(grid[h, r, c]), bool(made[k, r, c])
                    grid[h, r, c] = {
                        "replace": new,
                        "union": old or new,
                        "intersect": old and new,
                        "subtract": old and not new,
                    }[step.combine]
    layout = Layout(torch.from_numpy(grid), recipe.block_size)
    for op in recipe.edits:
        layout = Layout(torch.tensor(reference_apply(layout, op)), recipe.block_size)
    return layout


@settings(max_examples=100, deadline=None)
@given(recipes())
def test_build_matches_reference(recipe):
    built = recipe.build()
    assert built == reference_build(recipe)
    assert recipe.build() is built, "a recipe builds once"


@settings(max_examples=100, deadline=None)
@given(recipes())
def test_dict_round_trip_through_json_is_exact(recipe):
    data = json.loads(json.dumps(recipe.to_dict()))
    kept = copy.deepcopy(data)
    again = recipe_from_dict(data)
    assert data == kept, "reading must not change its input"
    assert again == recipe and hash(again) == hash(recipe)
    assert again.build() == recipe.build()


@settings(max_examples=60, deadline=None)
@given(recipes().flatmap(lambda r: st.tuples(st.just(r), edit_sequences(r.build().shape))))
def test_with_edit_on_a_built_recipe_equals_a_fresh_build(case):
    recipe, more = case
    recipe.build()
    for op in more:
        recipe = recipe.with_edit(op)
    fresh = dataclasses.replace(recipe)
    assert "_layout" not in fresh.__dict__
    assert recipe == fresh and recipe.build() == fresh.build()


def test_sizes_are_normalised_to_ints():
    recipe = Recipe(np.int64(2), np.int32(3), 4, np.int16(16))
    values = (recipe.n_heads, recipe.n_q_blocks, recipe.n_k_blocks, recipe.block_size)
    assert values == (2, 3, 4, 16) and all(type(v) is int for v in values)


def test_seeded_random_steps_regenerate_exactly():
    def make():
        step = RecipeStep("random_probability", {"seed": 7, "probability": 0.3}, heads=(1, 0))
        return Recipe(3, 16, 16, 64, steps=(RecipeStep("causal"), step)).build()

    first, second = make(), make()
    assert first == second and first.nnz > 0
    assert torch.equal(first.blocks[2], torch.ones(16, 16, dtype=torch.bool).tril())


def test_steps_apply_to_their_heads_with_per_head_params():
    window = RecipeStep("sliding_window", {"window_blocks": [1, 3], "causal": True}, heads=(2, 0))
    layout = Recipe(3, 6, 6, 16, steps=(window,)).build()
    assert layout.blocks[1].sum() == 0
    assert torch.equal(layout.blocks[2], torch.eye(6, dtype=torch.bool))
    assert torch.equal(
        layout.blocks[0],
        torch.ones(6, 6, dtype=torch.bool).tril() & ~torch.ones(6, 6, dtype=torch.bool).tril(-3),
    )


def test_with_step_and_with_edit_append():
    recipe = Recipe(2, 4, 4, 16).with_step(RecipeStep("causal"))
    recipe = recipe.with_edit(EditOp("clear", Band(1, 1), heads=(0,)))
    recipe = recipe.with_step(RecipeStep("causal", combine="subtract", heads=(1,)))
    assert len(recipe.steps) == 2 and len(recipe.edits) == 1
    blocks = recipe.build().blocks
    assert blocks[1].sum() == 0 and blocks[0].sum() == 10 - 3


def test_edits_see_the_shape_after_a_transpose():
    recipe = Recipe(1, 2, 5, 16, edits=(Transpose(), EditOp("set", Row(4))))
    assert recipe.build().shape == (1, 5, 2) and recipe.build().nnz == 2
    with pytest.raises(ValueError, match=r"edits\[0\]: row = 4 is outside the grid of 2 q_blocks"):
        Recipe(1, 2, 5, 16, edits=(EditOp("set", Row(4)),))


def test_with_edit_checks_only_the_new_edit(monkeypatch):
    recipe = Recipe(2, 3, 5, 16, edits=(Transpose(), *[EditOp("set", Row(i)) for i in range(4)]))
    checked = []
    real = EditOp.output_shape

    def counted(op, shape):
        checked.append(op)
        return real(op, shape)

    monkeypatch.setattr(EditOp, "output_shape", counted)
    new = EditOp("set", Rect(0, 0, 4, 2))
    extended = recipe.with_edit(new)
    assert checked == [new] and extended.edits == (*recipe.edits, new)
    with pytest.raises(ValueError, match=r"^edits\[5\]: rect corner \(row1, col1\) = \(4, 3\)"):
        recipe.with_edit(EditOp("set", Rect(0, 0, 4, 3)))  # after the transpose: 5 x 3 blocks
    with pytest.raises(TypeError, match=r"^edits\[5\] must be an EditOp, CopyHead or .*got Row"):
        recipe.with_edit(Row(0))
    with pytest.raises(ValueError, match="edits must have at most 10000 items, got 10001"):
        Recipe(1, 2, 2, 16, edits=(Transpose(),) * 10_001)


def test_an_edit_past_the_edit_limit_flattens_the_recipe_and_keeps_the_layout():
    full = Recipe(1, 2, 3, 16, steps=(RecipeStep("causal"),), edits=(Transpose(),) * 10_000)
    flat = full.with_edit(EditOp("toggle", Row(0)))
    expected = apply_edit(full.build(), EditOp("toggle", Row(0)))
    assert flat.build() == expected and len(flat.edits) == 2 and flat.flattened().flat
    assert recipe_from_dict(json.loads(json.dumps(flat.to_dict()))).build() == expected


def test_a_31k_cell_lasso_applies_quickly():
    """A lasso over 16 heads x 256 x 256 blocks must keep the editor responsive (~10 ms here)."""
    recipe = Recipe(16, 256, 256, 64, steps=(RecipeStep("causal"),))
    recipe.build()
    flat = np.random.default_rng(0).choice(256 * 256, 31_000, replace=False)
    cells = tuple(zip((flat // 256).tolist(), (flat % 256).tolist(), strict=True))
    seconds = []
    for _ in range(3):
        start = time.perf_counter()
        painted = recipe.with_edit(EditOp("set", Cells(cells), heads=(3,))).build()
        seconds.append(time.perf_counter() - start)
    expected = recipe.build().blocks.clone()
    expected[3, flat // 256, flat % 256] = True
    assert torch.equal(painted.blocks, expected)
    assert min(seconds) < 0.2, f"a 31k-cell edit took {min(seconds) * 1e3:.0f} ms"


def test_params_are_immutable_plain_and_hashable():
    params = Params({"b": [1, np.int64(2)], "a": np.float32(0.5), "c": [[1], []], "d": None})
    assert list(params) == ["a", "b", "c", "d"]
    assert params["b"] == (1, 2) and params == {"a": 0.5, "b": (1, 2), "c": ((1,), ()), "d": None}
    assert params.to_plain() == {"a": 0.5, "b": [1, 2], "c": [[1], []], "d": None}
    assert hash(params) == hash(Params(params.to_plain()))
    with pytest.raises(TypeError):
        params["a"] = 1
    step = RecipeStep("sliding_window", {"window_blocks": 2})
    assert (
        isinstance(step.params, Params)
        and len({step, RecipeStep("sliding_window", {"window_blocks": 2})}) == 1
    )


@pytest.mark.parametrize(
    ("params", "error", "message"),
    [
        ([1], TypeError, "params must be a dict, got list"),
        ({1: 2}, TypeError, "params names must be strings, got 1"),
        ({"x": object()}, TypeError, r"params\['x'\] must be a number, string, bool, None"),
        ({"x": float("nan")}, ValueError, r"params\['x'\] must be finite, got nan"),
        ({"x": "a" * 201}, ValueError, r"params\['x'\] must have at most 200 characters"),
        ({"x": [[[1]]]}, TypeError, r"params\['x'\]\[0\]\[0\] must be a number, .*two levels"),
        ({"x": [0] * (MAX_PARAM_ITEMS + 1)}, ValueError, r"at most 4096 items, got 4097"),
        ({"x": {"y": 1}}, TypeError, r"params\['x'\] must be a number, string, .*got dict"),
    ],
)
def test_bad_params_are_refused(params, error, message):
    with pytest.raises(error, match=message):
        Params(params)


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (
            lambda: RecipeStep("spiral"),
            ValueError,
            "pattern must be one of .*'causal'.*got 'spiral'",
        ),
        (
            lambda: RecipeStep("causal", {"window_blocks": 2}),
            ValueError,
            "pattern 'causal' has no parameter 'window_blocks'; allowed: none",
        ),
        (
            lambda: RecipeStep("sliding_window", {"window": 2}),
            ValueError,
            "pattern 'sliding_window' has no parameter 'window'; allowed: window_blocks, causal",
        ),
        (
            lambda: RecipeStep("causal", combine="xor"),
            ValueError,
            "combine must be one of 'replace'",
        ),
        (lambda: RecipeStep("causal", heads=(0, 0)), ValueError, "heads must not repeat a head"),
        (lambda: RecipeStep("causal", heads=[]), ValueError, r"heads must have 1 to 1024 items"),
        (lambda: Recipe(0, 4, 4, 16), ValueError, r"n_heads must be in \[1, 1024\], got 0"),
        (lambda: Recipe(1024, 8192, 4096, 16), ValueError, r"n_heads \* n_q_blocks must be <="),
        (lambda: Recipe(1, 4, 4, 0), ValueError, r"block_size must be in \[1, 4096\], got 0"),
        (lambda: Recipe(1, 4, 4, 16.0), TypeError, "block_size must be an integer, got float"),
        (
            lambda: Recipe(2, 4, 4, 16, steps=(RecipeStep("causal", heads=(2,)),)),
            ValueError,
            r"steps\[0\].heads\[0\] = 2 is outside the layout's 2 heads",
        ),
        (
            lambda: Recipe(2, 4, 4, 16, steps=({"pattern": "causal"},)),
            TypeError,
            r"steps\[0\] must be a RecipeStep, got dict",
        ),
        (
            lambda: Recipe(2, 4, 4, 16, edits=(RecipeStep("causal"),)),
            TypeError,
            r"edits\[0\] must be an EditOp, CopyHead or Transpose, got RecipeStep",
        ),
        (
            lambda: Recipe(2, 4, 4, 16, steps=RecipeStep("causal")),
            TypeError,
            "steps must be a list, got RecipeStep",
        ),
        (
            lambda: Recipe(2, 4, 4, 16, edits=[Transpose()] * 10_001),
            ValueError,
            "edits must have at most 10000 items, got 10001",
        ),
        (
            lambda: Recipe(2, 4, 4, 16, edits=(EditOp("set", Rect(0, 0, 1, 4), heads=(1,)),)),
            ValueError,
            r"edits\[0\]: rect corner \(row1, col1\) = \(1, 4\) is outside the grid",
        ),
    ],
)
def test_bad_recipes_are_refused(build, error, message):
    with pytest.raises(error, match=message):
        build()


GOOD = {
    "n_heads": 2,
    "n_q_blocks": 4,
    "n_k_blocks": 4,
    "block_size": 16,
    "steps": [
        {
            "pattern": "sliding_window",
            "params": {"window_blocks": 2},
            "heads": None,
            "combine": "replace",
        }
    ],
    "edits": [{"op": "transpose"}],
}


def test_good_dict_reads():
    recipe = recipe_from_dict(GOOD)
    assert recipe.build() == Recipe(2, 4, 4, 16, recipe.steps, (Transpose(),)).build()


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (
            {"steps": [{**GOOD["steps"][0], "params": {"window_blocks": 0}}]},
            ValueError,
            r"recipe: steps\[0\] \(sliding_window\): .*window_blocks.*0",
        ),
        (
            {"steps": [{**GOOD["steps"][0], "params": {"window_blocks": "2"}}]},
            TypeError,
            r"recipe: steps\[0\] \(sliding_window\): .*window_blocks",
        ),
        (
            {"steps": [{**GOOD["steps"][0], "colour": 1}]},
            ValueError,
            r"recipe steps\[0\]: step has unknown keys \['colour'\]",
        ),
        (
            {"steps": [{"pattern": "causal"}]},
            ValueError,
            r"recipe steps\[0\]: step is missing 'params', 'heads', 'combine'",
        ),
        (
            {"steps": [{**GOOD["steps"][0], "pattern": "eval"}]},
            ValueError,
            r"recipe steps\[0\]: pattern must be one of",
        ),
        (
            {"steps": [{**GOOD["steps"][0], "heads": [5]}]},
            ValueError,
            r"recipe: steps\[0\].heads\[0\] = 5 is outside the layout's 2 heads",
        ),
        ({"steps": {}}, TypeError, "recipe steps must be a list, got dict"),
        ({"steps": [GOOD["steps"][0]] * 257}, ValueError, "recipe steps must have at most 256"),
        ({"edits": [{"op": "edit"}]}, ValueError, r"recipe edits\[0\]: edit is missing 'action'"),
        (
            {"edits": [{"op": "copy_head", "source": 2, "targets": [0]}]},
            ValueError,
            r"recipe: edits\[0\]: source\[0\] = 2 is outside the layout's 2 heads",
        ),
        ({"n_q_blocks": -4}, ValueError, r"recipe: n_q_blocks must be in \[1, 65536\], got -4"),
        ({"block_size": None}, TypeError, "recipe: block_size must be an integer, got NoneType"),
        ({"extra": 1}, ValueError, r"recipe has unknown keys \['extra'\]"),
    ],
)
def test_bad_dicts_are_refused(change, error, message):
    data = {**GOOD, **change}
    kept = copy.deepcopy(data)
    with pytest.raises(error, match=message):
        recipe_from_dict(data)
    assert data == kept


def test_missing_keys_are_named():
    with pytest.raises(ValueError, match="recipe is missing 'steps', 'edits'"):
        recipe_from_dict({k: v for k, v in GOOD.items() if k not in ("steps", "edits")})
    with pytest.raises(TypeError, match="recipe must be a dict, got str"):
        recipe_from_dict("causal")


def test_a_changed_step_alone_is_generated_again(monkeypatch):
    import designer.recipe as recipe_module

    made = []
    real = recipe_module.make_pattern

    def counting(pattern, *args):
        made.append(pattern)
        return real(pattern, *args)

    monkeypatch.setattr(recipe_module, "make_pattern", counting)
    monkeypatch.setattr(recipe_module, "_STEPS", recipe_module.LruCache(1 << 20))
    window = RecipeStep("sliding_window", {"window_blocks": 3})
    random = RecipeStep("random_probability", {"probability": 0.2, "seed": 1}, combine="union")
    first = Recipe(2, 40, 40, 16, steps=(window, random)).build()
    reseeded = RecipeStep("random_probability", {"probability": 0.2, "seed": 2}, combine="union")
    second = Recipe(2, 40, 40, 16, steps=(window, reseeded)).build()
    assert made == ["sliding_window", "random_probability", "random_probability"]
    fresh = real("sliding_window", 2, 40, 40, 16, {"window_blocks": 3}).blocks
    random_2 = {"probability": 0.2, "seed": 2}
    fresh = fresh | real("random_probability", 2, 40, 40, 16, random_2).blocks
    assert second.blocks.equal(fresh) and not second.blocks.equal(first.blocks)
