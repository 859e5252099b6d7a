import io

import numpy as np
import pytest
import torch
from torch.nn.attention.flex_attention import BlockMask

from designer.design import Design
from designer.formats import design_from_json, from_block_mask, from_csr, load_design
from designer.formats.exports import design_file_name, exports, file_stem
from designer.recipe import Recipe, RecipeStep
from tests.factories import random_layout


@pytest.mark.parametrize(
    ("name", "stem"),
    [
        ("BigBird 8k / v2", "BigBird_8k_v2"),
        ("...", "design"),
        ("a.b-c", "a.b-c"),
        ("é", "é"),
        ("ünïcode", "ünïcode"),
        ("e\u0301", "é"),
        ("../x", "x"),
    ],
)
def test_file_stem(name, stem):
    assert file_stem(name) == stem
    assert design_file_name(Design(random_layout(np.random.default_rng(0)), name=name)) == (
        f"{stem}.pt"
    )


def by_name(design):
    return {export.file_name: export for export in exports(design)}


def load(data):
    return torch.load(io.BytesIO(data), weights_only=True)


def test_every_export_reads_back(rng):
    recipe = Recipe(2, 6, 6, 128, steps=(RecipeStep("random_per_row", {"seed": 3}),))
    design = Design(recipe.build(), name="mix", recipe=recipe, causal=True)
    files = by_name(design)
    assert set(files) == {
        "mix.pt", "mix_blockmask.pt", "mix_csr.pt", "mix_base_blockmask.pt", "mix.json",
        "load_mix.py", "flex_mix.py", "mix_deepspeed.pt", "mix_sparsity_config.py",
    }  # fmt: skip
    assert load_design(files["mix.pt"].build()) == design
    assert design_from_json(files["mix.json"].build()).layout == design.layout
    csr = load(files["mix_csr.pt"].build())
    assert from_csr(csr["row_ptr"], csr["col_idx"], csr["n_k_blocks"], csr["block_size"]) == (
        design.layout
    )
    arguments = load(files["mix_blockmask.pt"].build())
    stored = arguments.pop("layout")
    assert (stored["block_size"], stored["causal"]) == (128, True)
    mask = BlockMask.from_kv_blocks(**arguments)  # without our mask_mod: the tiles are blocks
    layout, block = from_block_mask(mask)
    assert block == 128 and torch.equal(layout.blocks, design.layout.blocks.tril())
    base = load(files["mix_base_blockmask.pt"].build())["base_blockmask"]
    assert torch.equal(base[0], design.layout.blocks)
    snippet = files["load_mix.py"].build().decode()
    assert "load_design('mix.pt')" in snippet
    assert "gpu.BlockSparseAttention.from_design('mix.pt', device=\"cuda\")" in snippet
    assert all(export.unavailable is None for export in files.values())


def test_exports_say_why_they_are_unavailable(rng):
    files = by_name(Design(random_layout(rng, block_size=16), name="bare"))
    assert "imported without a recipe" in files["bare.json"].unavailable
    assert (
        "needs 128-token blocks (this design has 16)" in files["bare_base_blockmask.pt"].unavailable
    )
