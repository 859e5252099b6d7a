import io

import pytest
import torch

from designer.design import Design
from designer.formats import recipe_to_json, save_design
from designer.formats.exports import exports
from designer.formats.pt_file import design_file_bytes
from designer.patterns import make_pattern
from designer.recipe import Recipe, RecipeStep
from tests.factories import random_layout
from ui.files_ui import MAX_UPLOAD_MIB, read_upload


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
        loaded = read_upload("ours.PT", design_file(design), bare_block_size)
        assert loaded.design == design and loaded.kind == "design"


def test_a_bare_tensor_takes_the_block_size_it_is_given(rng):
    layout = random_layout(rng, 3, 4, 4)
    loaded = read_upload("layout.pth", tensor_file(layout.to_int64()), 128).design
    assert loaded.layout.block_size == 128 and torch.equal(loaded.layout.blocks, layout.blocks)
    assert loaded.name == "layout"
    two_d = read_upload("layout.pt", tensor_file(layout.to_int64()[0]), 8).design
    assert two_d.layout.shape == (1, 4, 4) and two_d.layout.block_size == 8


def test_a_json_recipe_is_recognised_by_its_content():
    recipe = Recipe(2, 4, 4, 64, steps=(RecipeStep("causal"),))
    design = Design(recipe.build(), name="r", recipe=recipe)
    text = recipe_to_json(design).encode()
    for name, data in (("r.json", text), ("r.pt", text), ("bom.json", b"\xef\xbb\xbf" + text)):
        loaded = read_upload(name, data, 16)
        assert loaded.kind == "recipe" and loaded.design.layout == design.layout


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block", [128, 48])
def test_every_tensor_download_uploads_back(causal, block):
    """What we export, we read: design, BlockMask tensors, CSR, MIT and DeepSpeed files."""
    recipe = Recipe(3, 5, 5, block, steps=(RecipeStep("random_per_row", {"seed": 5}),))
    design = Design(recipe.build(), name="mix", recipe=recipe, causal=causal)
    kinds = {
        "mix.pt": "design",
        "mix_blockmask.pt": "blockmask",
        "mix_csr.pt": "csr",
        "mix_base_blockmask.pt": "base_blockmask",
        "mix_deepspeed.pt": "bare",
        "mix.json": "recipe",
    }
    if block != 128:
        del kinds["mix_base_blockmask.pt"]  # MIT's blocks are 128 tokens
    files = {export.file_name: export for export in exports(design)}
    for name, kind in kinds.items():
        loaded = read_upload(name, files[name].build(), block)
        assert loaded.kind == kind, name
        assert loaded.design.layout == design.layout, name
        if kind == "blockmask":  # the file holds the layout and causal flag beside the tiles
            assert loaded.design.causal is causal
        assert loaded.design.name == ("mix" if kind in ("design", "recipe") else name[:-3])


def test_the_upload_limit_fits_the_largest_design():
    from designer.layout import Layout

    largest = Design(Layout.zeros(4, 4096, 4096, 16), name="largest")
    data = design_file(largest)
    assert len(data) <= 8 * 2**20 + 4096, "a 4 x 4096^2 design is about 8 MiB"
    assert len(data) <= MAX_UPLOAD_MIB * 2**20
    assert read_upload("largest.pt", data, 16).design == largest
    download = next(export for export in exports(largest) if export.file_name == "largest.pt")
    assert read_upload("largest.pt", download.build(), 16).design == largest  # the app's own


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"format": "blocksparse-design", "version": 1}, r"^design file: design file is missing"),
        (torch.full((2, 2), 3), r"^bare layout tensor: layout must hold only 0 and 1"),
        (torch.ones(1, 2, 2), r"^bare layout tensor: layout must hold integers or bools"),
        ([1, 2], r"design file must hold a dict or a layout tensor, got list$"),
        ({"other": 1}, r"file holds a dict with keys 'other', which is none of"),
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


def test_a_design_held_as_runs_loads():
    layout = make_pattern("sliding_window", 32, 2048, 2048, 64, {"window_blocks": 64})
    loaded = read_upload("long.pt", design_file_bytes(Design(layout, name="long")), 64)
    assert loaded.design.layout.runs is not None and loaded.design.layout == layout
