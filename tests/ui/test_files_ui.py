import io

import pytest
import torch

from designer.design import Design
from designer.formats import recipe_to_json, save_design
from designer.recipe import Recipe, RecipeStep
from designer.ui.files_ui import read_upload
from tests.factories import random_layout


def design_file(design: Design) -> bytes:
    buffer = io.BytesIO()
    save_design(design, buffer)
    return buffer.getvalue()


def tensor_file(content) -> bytes:
    buffer = io.BytesIO()
    torch.save(content, buffer)
    return buffer.getvalue()


def test_a_design_file_keeps_its_own_block_size(rng):
    design = Design(random_layout(rng, 2, 5, 6, block_size=32), name="ours")
    for bare_block_size in (16, 32, 4096):
        assert read_upload("ours.PT", design_file(design), bare_block_size) == design


def test_a_bare_tensor_takes_the_block_size_it_is_given(rng):
    layout = random_layout(rng, 3, 4, 4)
    loaded = read_upload("layout.pth", tensor_file(layout.to_int64()), 128)
    assert loaded.layout.block_size == 128 and torch.equal(loaded.layout.blocks, layout.blocks)
    two_d = read_upload("layout.pt", tensor_file(layout.to_int64()[0]), 8)
    assert two_d.layout.shape == (1, 4, 4) and two_d.layout.block_size == 8


def test_a_json_recipe_is_read_as_json():
    recipe = Recipe(2, 4, 4, 64, steps=(RecipeStep("causal"),))
    design = Design(recipe.build(), name="r", recipe=recipe)
    assert read_upload("r.json", recipe_to_json(design).encode(), 16).layout == design.layout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"format": "blocksparse-design", "version": 1}, r"^design file: design file is missing"),
        (torch.full((2, 2), 3), r"^bare layout tensor: layout must hold only 0 and 1"),
        (torch.ones(1, 2, 2), r"^bare layout tensor: layout must hold integers or bools"),
        ([1, 2], r"^design file must hold a design dict or a layout tensor, got list$"),
    ],
)
def test_a_bad_file_says_what_is_wrong_once(content, message):
    with pytest.raises(ValueError, match=message) as caught:
        read_upload("bad.pt", tensor_file(content), 16)
    assert "was given" not in str(caught.value), "a bad file is read once, never retried"


def test_a_bare_tensor_with_a_bad_block_size_is_refused(rng):
    data = tensor_file(random_layout(rng, 1, 2, 2).to_int64())
    with pytest.raises(ValueError, match=r"bare_block_size must be in \[1, 4096\], got 0"):
        read_upload("layout.pt", data, 0)
