"""Model designs: layer groups that always cover every layer once, and their file, round-tripped
and refusing what it should."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.design import Design
from designer.formats.model_file import (
    MAX_MODEL_CELLS,
    model_file_bytes,
    read_model_file,
    save_model_design,
)
from designer.layout import Layout
from designer.model_design import LayerGroup, ModelDesign
from designer.recipe import Recipe, RecipeStep


def recipe_design(pattern="causal", name="c", **params):
    recipe = Recipe(2, 4, 4, 16, steps=(RecipeStep(pattern, params),))
    return Design(recipe.build(), name=name, recipe=recipe, causal=True)


DENSE = Design(Layout(torch.ones(2, 4, 4, dtype=torch.bool), 16), name="dense")
CAUSAL = recipe_design()
WINDOW = recipe_design("sliding_window", "w", window_blocks=2)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11),
                                              st.integers(0, 2)), max_size=6))  # fmt: skip
def test_assigning_layers_always_covers_every_layer_once(n_layers, assignments):
    designs = (DENSE, CAUSAL, WINDOW)
    model = ModelDesign.uniform("m", n_layers, DENSE)
    expected = [DENSE] * n_layers
    for a, b, which in assignments:
        first, last = sorted((min(a, n_layers - 1), min(b, n_layers - 1)))
        model = model.assign(first, last, designs[which])
        expected[first : last + 1] = [designs[which]] * (last - first + 1)
    assert [model.design_of(layer) for layer in range(n_layers)] == expected
    for left, right in zip(model.groups, model.groups[1:], strict=False):
        assert left.design != right.design, "neighbours with one design are merged"


def test_a_model_refuses_gaps_overlaps_and_other_lengths():
    with pytest.raises(ValueError, match=r"layers 2–3 leaves out layers.*next one is layer 1"):
        ModelDesign("m", 4, (LayerGroup(0, 0, DENSE), LayerGroup(2, 3, DENSE)))
    with pytest.raises(ValueError, match="layers 1–3 overlaps layers"):
        ModelDesign("m", 4, (LayerGroup(0, 1, DENSE), LayerGroup(1, 3, DENSE)))
    with pytest.raises(ValueError, match="cover layers 0–1, but the model has 4 layers"):
        ModelDesign("m", 4, (LayerGroup(0, 1, DENSE),))
    longer = Design(Layout(torch.ones(1, 8, 8, dtype=torch.bool), 16))
    with pytest.raises(ValueError, match=r"must cover the same tokens.*64 × 64, 128 × 128"):
        ModelDesign.uniform("m", 4, DENSE).assign(2, 3, longer)
    assert ModelDesign.uniform("m", 4, DENSE).assign(1, 1, CAUSAL).with_layers(2).n_layers == 2


def test_the_file_round_trips_stores_each_design_once_and_reads_old_styles(tmp_path):
    model = ModelDesign.uniform("llama-ish", 32, DENSE).assign(4, 27, WINDOW).assign(9, 9, CAUSAL)
    data = model_file_bytes(model)
    assert read_model_file(data) == model
    content = torch.load(io.BytesIO(data), weights_only=True)
    assert len(content["designs"]) == 3 and content["groups"].shape == (5, 3)
    save_model_design(model, tmp_path / "m.pt")
    assert read_model_file(tmp_path / "m.pt", rebuild_recipe=False) == model


def _content(model):
    return torch.load(io.BytesIO(model_file_bytes(model)), weights_only=True)


def _bytes(content):
    buffer = io.BytesIO()
    torch.save(content, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.update(format="x"), "model design format must be 'blocksparse-model-design'"),
        (lambda c: c.update(version=2), "model design version 2 is not supported"),
        (lambda c: c.update(extra=1), r"unknown keys \['extra'\]"),
        (lambda c: c.update(n_layers=0), r"n_layers must be in \[1, 1024\], got 0"),
        (lambda c: c.update(designs=[]), "designs must be a list of 1 to 64 designs, got 0"),
        (lambda c: c.update(groups=torch.tensor([[0, 3, 5]])), r"design index must be in \[0, 1\]"),
        (lambda c: c.update(groups=torch.tensor([[0, 1, 0]])), "cover layers 0–1, but the model"),
        (lambda c: c.update(groups=torch.zeros(1, 2, dtype=torch.int64)), r"int64 \[G, 3\]"),
        (lambda c: c["designs"][1].update(name=""), r"designs\[1\].*name must be 1 to 80"),
        (
            lambda c: c["designs"][0]["layout"].update(shape=[1024, 4096, 4096]),
            r"designs hold 17,179,869,216 blocks together, more than the limit",
        ),
    ],
)
def test_a_bad_file_is_refused_saying_what_is_wrong(change, message):
    content = _content(ModelDesign.uniform("m", 4, DENSE).assign(1, 2, CAUSAL))
    change(content)
    with pytest.raises(ValueError, match=message):
        read_model_file(_bytes(content))


def test_a_model_past_the_cells_limit_is_refused_before_it_is_written():
    big = Design(Layout.zeros(1, 4096, 4096, 16))  # 16M cells each
    others = [replace(big, name=f"b{i}", start_width=i) for i in range(MAX_MODEL_CELLS // 4096**2)]
    model = ModelDesign.uniform("m", 16, big)
    for i, design in enumerate(others):
        model = model.assign(i + 1, i + 1, design)
    with pytest.raises(ValueError, match="more than the 134,217,728 a model file may"):
        model_file_bytes(model)


def test_garbage_is_refused_in_words():
    with pytest.raises(ValueError, match="model design file is not a torch file"):
        read_model_file(b"not a file")


def _costly_recipe_tensor():
    """A recipe estimated at about 1.3 s to build: within the budget alone."""
    import json

    recipe = Recipe(4, 2048, 2048, 16, steps=(RecipeStep("random_per_row", {"seed": 1}),))
    text = json.dumps(recipe.to_dict()).encode()
    assert 1.0e9 < recipe.build_ns < 2.0e9
    return torch.frombuffer(bytearray(text), dtype=torch.uint8)


def test_the_designs_recipes_share_one_build_budget_checked_before_any_is_built():
    import time

    designs = [recipe_design(name=f"d{i}") for i in range(3)]
    model = ModelDesign.uniform("m", 3, designs[0])
    for i in (1, 2):
        model = model.assign(i, i, replace(designs[i], start_width=i))
    content = _content(model)
    for stored in content["designs"]:
        stored["recipe"] = _costly_recipe_tensor()
    start = time.process_time()
    with pytest.raises(ValueError, match=r"designs\[1\].*more than the limit of 2.0 s"):
        read_model_file(_bytes(content))
    assert time.process_time() - start < 0.5, "refused on the estimates, nothing built"
