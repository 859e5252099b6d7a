"""What we write, we read: every writer refuses (before writing) what a reader would refuse,
and whatever painting makes saves and reads back exactly, in every file kind of ours."""

import io

import numpy as np
import pytest

from designer.design import Design
from designer.edit import Bitmap, EditOp
from designer.formats import design_from_json, read_design_file, recipe_to_json, save_design
from designer.formats.json_recipe import MAX_JSON_CHARS
from designer.recipe import Recipe, RecipeStep
from designer.recipe_size import MAX_RECIPE_CHARS
from designer.storage import DesignStore, design_bytes


def writers(design: Design) -> dict[str, bytes]:
    """Every file of ours a design is written as (downloads, library and autosave alike)."""
    buffer = io.BytesIO()
    save_design(design, buffer)
    return {
        "pt": buffer.getvalue(),
        "store": design_bytes(design),
        "json": recipe_to_json(design).encode(),
    }


def test_a_recipe_that_does_not_rebuild_its_layout_is_refused_before_writing(tmp_path):
    recipe = Recipe(1, 4, 4, 16, steps=(RecipeStep("causal"),))
    wrong = Design(Recipe(1, 4, 4, 16).build(), name="wrong", recipe=recipe)
    path = tmp_path / "kept.pt"
    path.write_bytes(b"the old file")
    for write in (
        lambda: save_design(wrong, path),
        lambda: design_bytes(wrong),
        lambda: recipe_to_json(wrong),
        lambda: DesignStore(tmp_path).save("wrong", wrong),
    ):
        with pytest.raises(ValueError, match="recipe does not rebuild the layout: 10 of 16"):
            write()
    assert path.read_bytes() == b"the old file"
    assert not (tmp_path / "library" / "wrong.pt").exists()


def test_settings_a_reader_refuses_are_refused_when_the_design_is_made():
    layout = Recipe(1, 2, 2, 16).build()
    with pytest.raises(ValueError, match="created must be a timestamp string of at most 64"):
        Design(layout, created="x" * 65)
    with pytest.raises(ValueError, match="modified must be a timestamp string"):
        Design(layout, modified=None)


def test_scattered_strokes_past_the_size_limit_flatten_and_every_step_reads_back(monkeypatch):
    monkeypatch.setattr("designer.recipe_size.MAX_RECIPE_CHARS", 100_000)  # 1/157 of the real
    rng = np.random.default_rng(0)
    recipe = Recipe(2, 512, 512, 16, steps=(RecipeStep("causal"),))
    recipe.build()
    for stroke in range(12):  # 50 % noise over a quarter of the grid: 11 KB of text each
        row, col = (stroke % 2) * 256, (stroke // 2 % 2) * 256
        region = Bitmap.of(rng.random((256, 256)) < 0.5, row, col)
        recipe = recipe.with_edit(EditOp("toggle", region, (stroke % 2,)))
        assert recipe.cost.chars <= 100_000
    assert not recipe.steps and len(recipe.edits) < 12  # flattened on the way
    design = Design(recipe.build(), name="noise", recipe=recipe)
    for kind, data in writers(design).items():
        assert len(data) < MAX_JSON_CHARS + (1 << 20), kind
        loaded = read_design_file(data).design
        assert loaded.layout == design.layout and loaded.recipe == recipe, kind


def test_the_largest_snapshot_a_recipe_can_hold_reads_back():
    """A flattened recipe of the largest layout at 50 % random: its bits do not compress."""
    bits = np.random.default_rng(1).integers(0, 256, 1 << 23, dtype=np.uint8)
    blocks = np.unpackbits(bits).view(bool).reshape(4, 4096, 4096)
    recipe = Recipe(4, 4096, 4096, 16)
    for head in range(4):
        recipe = recipe.with_edit(EditOp("set", Bitmap.of(blocks[head]), (head,)))
    assert recipe.flattened().edits == recipe.edits  # already a snapshot
    design = Design(recipe.build(), name="largest", recipe=recipe)
    assert recipe.cost.chars <= MAX_RECIPE_CHARS
    data = design_bytes(design)
    assert read_design_file(data).design == design
    assert design_from_json(recipe_to_json(design)) == design
