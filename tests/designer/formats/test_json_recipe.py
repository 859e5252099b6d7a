import copy
import json
import time
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings

from designer.design import Design
from designer.edit import Bitmap, EditOp, Rect
from designer.formats import design_from_json, recipe_to_json
from designer.formats.json_recipe import MAX_JSON_CHARS
from designer.model_shape import ModelShape
from designer.recipe import Recipe, RecipeStep
from tests.designer.formats.strategies import designs
from tests.factories import random_layout


@pytest.fixture
def design():
    recipe = Recipe(
        2,
        6,
        8,
        64,
        steps=(
            RecipeStep("sliding_window", {"window_blocks": [1, 2], "causal": False}),
            RecipeStep("random_probability", {"seed": 3, "probability": 0.2}, combine="union"),
        ),
        edits=(EditOp("toggle", Rect(0, 0, 1, 7), heads=(1,)),),
    )
    return Design(recipe.build(), name="window + random", recipe=recipe, causal=True)


@pytest.fixture
def content(design):
    return json.loads(recipe_to_json(design))


@settings(max_examples=100, deadline=None)
@given(designs(with_recipe=True))
def test_round_trip_is_exact(design):
    text = recipe_to_json(design)
    again = design_from_json(text)
    assert again == design
    assert design_from_json(text.encode()) == design


def test_text_is_the_documented_plain_json(content, design):
    assert content == {
        "format": "blocksparse-design-recipe",
        "version": 2,
        "name": "window + random",
        "causal": True,
        "start_width": None,
        "created": design.created,
        "modified": design.modified,
        "model_shape": {"batch": 1, "heads": None, "kv_heads": None, "head_dim": 128},
        "recipe": design.recipe.to_dict(),
    }


def test_export_needs_a_recipe_that_rebuilds_the_layout(rng, design):
    with pytest.raises(ValueError, match="design has no recipe, so JSON cannot regenerate it"):
        recipe_to_json(Design(random_layout(rng)))
    stale = Design(random_layout(rng, 2, 6, 8, block_size=64), recipe=design.recipe)
    with pytest.raises(ValueError, match=r"recipe does not rebuild the layout: \d+ of 96 blocks"):
        recipe_to_json(stale)
    with pytest.raises(TypeError, match="design must be a Design, got Recipe"):
        recipe_to_json(design.recipe)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "JSON recipe is not valid JSON: Expecting property name"),
        ("", "JSON recipe is not valid JSON: Expecting value"),
        ('{"a": NaN}', "JSON must hold finite numbers only, got NaN"),
        ('{"a": -Infinity}', "JSON must hold finite numbers only, got -Infinity"),
        ('{"a": 1, "a": 2}', r"JSON repeats the keys \['a'\]"),
        ("[" * 100_000 + "]" * 100_000, "JSON recipe nests too deeply"),
        ("[1, 2]", "JSON recipe: design must be a dict, got list"),
        ('{"format": "x"}', "JSON recipe: design is missing 'version', 'name'"),
        (b"\xff\xfe", "JSON recipe must be UTF-8 text"),
        (" " * (MAX_JSON_CHARS + 1), "JSON recipe has 16,777,217 characters, more than the limit"),
    ],
)
def test_bad_text_is_refused(text, message):
    with pytest.raises(ValueError, match=message):
        design_from_json(text)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "blocksparse-design"}, "design format must be 'blocksparse-design-recipe'"),
        ({"version": 3}, "design version 3 is not supported; this designer reads version 1 and 2"),
        (
            {"model_shape": {"batch": 0, "heads": None, "kv_heads": None, "head_dim": 64}},
            r"batch must be in \[1, 65536\], got 0",
        ),
        ({"model_shape": {"batch": 1}}, "model shape must have the keys"),
        ({"extra": True}, r"design has unknown keys \['extra'\]"),
        ({"name": "   "}, "name must be 1 to 80 characters, not only spaces"),
        ({"causal": "true"}, "causal must be True or False, got str"),
        ({"start_width": 1.5}, "start_width must be an integer, got float"),
        ({"created": 5}, "created must be a timestamp string"),
        ({"recipe": None}, "recipe must be a dict, got NoneType"),
        ({"recipe": {"n_heads": 2}}, "recipe is missing 'n_q_blocks'"),
    ],
)
def test_bad_designs_are_refused(content, change, message):
    data = {**content, **change}
    with pytest.raises(ValueError, match=f"JSON recipe: .*{message}"):
        design_from_json(json.dumps(data))


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("steps", 0, "pattern"), "__import__('os')", r"recipe steps\[0\]: pattern must be one of"),
        (("steps", 0, "params", "window_blocks"), 0, r"steps\[0\] \(sliding_window\): window_b"),
        (("steps", 1, "params", "seed"), -1, r"steps\[1\] \(random_probability\): seed must be"),
        (("steps", 1, "heads"), [2], r"steps\[1\].heads\[0\] = 2 is outside the layout's 2 heads"),
        (("edits", 0, "region", "col1"), 8, r"edits\[0\]: rect corner \(row1, col1\) = \(1, 8\)"),
        (("n_heads",), 1025, r"n_heads must be in \[1, 1024\], got 1025"),
    ],
)
def test_bad_recipes_are_refused_without_building_anything_else(content, path, value, message):
    data = copy.deepcopy(content)
    target = data["recipe"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ValueError, match=message):
        design_from_json(json.dumps(data))


def test_type_of_text_is_checked():
    with pytest.raises(TypeError, match="text must be a str or bytes, got dict"):
        design_from_json({"format": "blocksparse-design-recipe"})


def _cells_recipe(cells: list[list[int]]) -> str:
    recipe = Recipe(1, 2048, 2048, 16, steps=(RecipeStep("causal"),))
    content = json.loads(recipe_to_json(Design(recipe.build(), recipe=recipe)))
    edit = {"op": "edit", "action": "toggle", "heads": [0], "region": {"kind": "cells",
            "cells": cells}}  # fmt: skip
    content["recipe"]["edits"] = [edit]
    return json.dumps(content)


def test_a_long_cell_list_of_an_older_file_reads_as_the_same_blocks_in_a_bitmap():
    rng = np.random.default_rng(0)
    cells = rng.integers(0, 2048, size=(200_000, 2)).tolist()
    start = time.process_time()
    design = design_from_json(_cells_recipe(cells))
    assert time.process_time() - start < 2.0  # the read's whole budget; about 0.6 s alone
    (op,) = design.recipe.edits
    assert isinstance(op.region, Bitmap)
    expected = torch.ones(2048, 2048, dtype=torch.bool).tril()
    index = torch.tensor(cells)
    expected[index[:, 0], index[:, 1]] ^= True
    assert torch.equal(design.layout.blocks[0], expected)


def test_a_text_of_too_many_values_is_refused_before_it_is_parsed():
    text = _cells_recipe([[1, 2]]).replace("[[1, 2]]", "[" + "[1,2]," * 1_100_000 + "[1,2]]")
    start = time.process_time()
    with pytest.raises(ValueError, match=r"holds about 2,200,\d{3} values, more than the limit"):
        design_from_json(text)
    assert time.process_time() - start < 0.1


def test_version_1_text_reads_with_the_default_model_shape(content, design):
    old = {key: value for key, value in content.items() if key != "model_shape"}
    again = design_from_json(json.dumps({**old, "version": 1}))
    assert again.layout == design.layout and again.model_shape == ModelShape()
    with pytest.raises(ValueError, match="design is missing 'model_shape'"):
        design_from_json(json.dumps({**old, "version": 2}))


def test_the_model_shape_round_trips(design):
    shaped = replace(design, model_shape=ModelShape(batch=4, heads=2, kv_heads=1, head_dim=64))
    assert design_from_json(recipe_to_json(shaped)) == shaped
