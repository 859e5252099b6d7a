"""The designs a sweep measures: lengths, scaled densities, and random layouts of equal counts."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.design import Design
from designer.layout import Layout
from designer.recipe import Recipe, RecipeStep
from designer.storage import load_default_design
from designer.sweep import (
    density_points,
    length_points,
    random_like,
    random_points,
    scaled_step,
)
from tests.factories import random_layout


def recipe_design(steps, n_heads=2, n_q=16, n_k=16, block=64):
    recipe = Recipe(n_heads, n_q, n_k, block, steps=tuple(steps))
    return Design(recipe.build(), name="d", recipe=recipe)


def test_length_points_rebuild_the_recipe_at_each_length():
    design = load_default_design()  # BigBird, 8 heads, 4096 tokens, blocks of 64
    points, notes = length_points(design, (2048, 1024, 8192, 4096))
    assert notes == []
    assert [(p.kind, p.value) for p in points] == [
        ("length", 1024), ("length", 2048), ("current", 4096), ("length", 8192)
    ]  # fmt: skip
    for point in points:
        layout = point.design.layout
        assert layout.seq_len_q == layout.seq_len_k == point.value
        expected = replace(
            design.recipe, n_q_blocks=point.value // 64, n_k_blocks=point.value // 64
        )
        assert layout == expected.build()
    assert points[2].design is design


def test_length_points_scale_keys_alike_and_note_what_cannot_be_built():
    design = recipe_design([RecipeStep("causal")], n_q=16, n_k=32, block=64)  # 1024 x 2048
    points, notes = length_points(design, (32, 2048, 1 << 21))
    assert [(p.design.layout.seq_len_q, p.design.layout.seq_len_k) for p in points] == [
        (32, 64), (1024, 2048), (2048, 4096)
    ]  # fmt: skip
    assert notes == ["length 2097152: query tokens must be in [1, 1048576], got 2097152"]
    fixed = Design(Layout(torch.ones(1, 4, 4, dtype=torch.bool), 64), name="imported")
    points, notes = length_points(fixed, (512,))
    assert len(points) == 1 and "imported without a recipe" in notes[0]


def test_scaled_step_scales_size_parameters_only():
    step = RecipeStep("sliding_window", {"window_blocks": [2, 6], "causal": False})
    assert scaled_step(step, 0.5).params.to_plain() == {"window_blocks": [1, 3], "causal": False}
    assert scaled_step(step, 0.1).params["window_blocks"] == (1, 1)  # the spec's low bound
    dilated = RecipeStep("dilated_window", {"window_blocks": 4, "dilation": 3})
    assert scaled_step(dilated, 2).params.to_plain() == {"window_blocks": 8, "dilation": 3}
    random = RecipeStep("random_probability", {"probability": 0.3, "seed": 5})
    assert scaled_step(random, 2).params.to_plain() == {"probability": 0.6, "seed": 5}
    assert scaled_step(random, 4).params["probability"] == 1.0


def test_density_points_grow_with_the_factor_and_keep_the_current_design():
    design = load_default_design()
    points, notes = density_points(design, (0.25, 0.5, 1.0, 2.0, 4.0))
    nnz = [p.design.layout.nnz for p in points]
    assert nnz == sorted(nnz) and len(set(nnz)) == len(nnz)
    current = next(p for p in points if p.kind == "current")
    assert current.design is design and current.value == 1.0
    assert len(points) + len(notes) == 5
    for point in points:
        assert point.design.recipe.build() == point.design.layout


def test_density_points_without_anything_to_scale():
    causal = recipe_design([RecipeStep("causal")])
    assert density_points(causal, (2.0,))[1] == ["no parameter of this recipe sets its density"]
    fixed = Design(Layout(torch.ones(1, 4, 4, dtype=torch.bool), 64))
    assert density_points(fixed, (2.0,))[1] == [
        "the design has no recipe, so there are no parameters to scale"
    ]
    with pytest.raises(ValueError, match="factor must be in"):
        density_points(causal, (0.0,))


def test_density_points_note_refused_and_repeated_factors():
    design = recipe_design([RecipeStep("sliding_window", {"window_blocks": 1})])
    points, notes = density_points(design, (0.5, 2.0))
    assert [p.label for p in points] == ["current", "×2"]
    assert notes == ["factor 0.5 gives the same density as current"]


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), density=st.floats(0.0, 1.0))
def test_random_like_keeps_every_head_count(seed, density):
    layout = random_layout(np.random.default_rng(seed), 3, 5, 7, density=density)
    shuffled = random_like(layout, seed=seed % 100)
    assert shuffled.shape == layout.shape and shuffled.block_size == layout.block_size
    assert torch.equal(shuffled.blocks.sum(dim=(1, 2)), layout.blocks.sum(dim=(1, 2)))
    assert shuffled == random_like(layout, seed=seed % 100)


def test_random_points_have_no_recipe():
    points, _ = density_points(load_default_design(), (2.0,))
    randoms = random_points(points)
    assert [p.kind for p in randoms] == ["random"] * len(points)
    assert all(r.design.recipe is None for r in randoms)
    assert randoms[0].design.name == f"random {points[0].label}"
    assert randoms[0].design.layout != points[0].design.layout
    with pytest.raises(ValueError, match="seed must be >= 0, got -1"):
        random_like(points[0].design.layout, seed=-1)
