import io
import time
import zipfile

import numpy as np
import pytest
import torch
from torch.nn.attention.flex_attention import BlockMask

from designer.design import Design
from designer.formats import (
    design_from_json,
    from_block_mask,
    from_csr,
    load_design,
    read_design_file,
)
from designer.formats.exports import design_file_name, exports, file_stem
from designer.formats.pt_file import MAX_FILE_BYTES
from designer.layout import Layout
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


def test_files_too_large_to_upload_are_made_compact_and_still_read_back(rng, monkeypatch):
    """Past the upload limit (here 4 KiB for a small design; really 68 MiB): the DeepSpeed
    layout goes bool, CSR indices int32, the archives deflated, and each says so."""
    monkeypatch.setattr("designer.formats.exports.MAX_FILE_BYTES", 4096)
    recipe = Recipe(2, 128, 128, 128, steps=(RecipeStep("random_per_row", {"seed": 3}),))
    design = Design(recipe.build(), name="small", recipe=recipe)
    files = by_name(design)
    deepspeed = files["small_deepspeed.pt"]
    assert deepspeed.note.startswith("Saved as bool: as int64 it would be 256.0 KiB, more than")
    assert load(deepspeed.build()).dtype == torch.bool
    assert load(files["small_csr.pt"].build())["col_idx"].dtype == torch.int32
    for name in ("small_deepspeed.pt", "small_csr.pt", "small_base_blockmask.pt"):
        data = files[name].build()
        assert zipfile.ZipFile(io.BytesIO(data)).infolist()[0].compress_type == zipfile.ZIP_DEFLATED
        assert read_design_file(data, bare_block_size=128).design.layout == design.layout, name
        assert "Deflated: it loads back here if it stays within 4.0 KiB" in files[name].note


def test_the_largest_deepspeed_layout_is_a_file_that_uploads_back():
    blocks = torch.rand(4, 4096, 4096, generator=torch.Generator().manual_seed(0)) < 0.05
    design = Design(Layout(blocks, 16), name="largest")
    export = by_name(design)["largest_deepspeed.pt"]
    start = time.process_time()
    data = export.build()
    assert time.process_time() - start < 2.0
    assert len(data) <= MAX_FILE_BYTES  # 537 MB as int64; a few MiB as deflated bool
    assert read_design_file(data, bare_block_size=16).design.layout == design.layout


def test_downloads_too_costly_to_make_say_what_to_use_instead(monkeypatch):
    monkeypatch.setattr("designer.formats.exports.MAX_EXPORT_BYTES", 1000)
    files = by_name(Design(Layout(torch.ones(1, 64, 64, dtype=torch.bool), 16), name="dense"))
    assert files["dense_csr.pt"].unavailable.startswith("the CSR of this design would take about")
    assert "download the Design (.pt)" in files["dense_blockmask.pt"].unavailable


def test_formats_without_a_causal_flag_say_so_both_ways():
    recipe = Recipe(2, 6, 6, 128, steps=(RecipeStep("causal"),))
    design = Design(recipe.build(), name="tril", recipe=recipe, causal=True)
    files = by_name(design)
    for name in ("tril_csr.pt", "tril_base_blockmask.pt", "tril_deepspeed.pt"):
        assert "Carries no causal flag" in files[name].note, name
    for name in ("tril.pt", "tril_blockmask.pt", "tril.json"):
        assert "causal flag" not in (files[name].note or ""), name
    plain = by_name(Design(design.layout, name="tril"))  # not causal: nothing left out
    assert "causal flag" not in (plain["tril_csr.pt"].note or "")
    for name in ("tril_csr.pt", "tril_base_blockmask.pt", "tril_deepspeed.pt"):
        loaded = read_design_file(files[name].build(), bare_block_size=128)
        assert loaded.design.causal is False
        assert "carries no causal flag, so it loads as not causal" in loaded.describe()
    assert "causal flag" not in read_design_file(files["tril_blockmask.pt"].build()).describe()


def test_the_sparsity_config_snippet_says_how_its_heads_are_kept():
    from designer.formats.deepspeed_snippet import deepspeed_snippet

    many = Design(Layout(torch.ones(16, 4, 4, dtype=torch.bool), 16))
    one = Design(Layout(torch.ones(1, 4, 4, dtype=torch.bool), 16))
    assert "# the 16 saved heads, one per head" in deepspeed_snippet(many, "x.pt")
    assert "one saved head serves every head" not in deepspeed_snippet(many, "x.pt")
    assert "# one saved head serves every head" in deepspeed_snippet(one, "x.pt")


def test_a_design_held_as_runs_offers_what_holds_it_and_says_why_not_the_grids():
    """Once, the DeepSpeed layout, its SparsityConfig and MIT's base_blockmask of a
    long-context design were offered and then failed to build, wanting its dense grid."""
    from designer.patterns import make_pattern

    params = {"sink_blocks": 1, "window_blocks": 16}
    layout = make_pattern("attention_sinks", 1, 8200, 8200, 128, params)  # 67.2 M cells
    assert layout.runs is not None
    files = by_name(Design(layout, name="long", causal=True))
    for name in ("long_deepspeed.pt", "long_sparsity_config.py", "long_base_blockmask.pt",
                 "flex_long.py"):  # fmt: skip
        why = files[name].unavailable
        assert "dense [heads, q_blocks, k_blocks] grid" in why and "1 x 8,200 x 8,200" in why
        assert "download the CSR (row_ptr, col_idx) or the Design (.pt)" in why and len(why) < 400
    assert load_design(files["long.pt"].build()).layout == layout
    why = files["long_blockmask.pt"].unavailable  # lists one entry per tile: 67 M tiles
    assert "BlockMask tile lists" in why and "download the Design (.pt)" in why
    wide = make_pattern("attention_sinks", 4, 4200, 4200, 64, params)  # 70.6 M cells, 17.6 M tiles
    assert wide.runs is not None
    mask_file = by_name(Design(wide, name="long", causal=True))["long_blockmask.pt"]
    assert mask_file.unavailable is None  # its lists come from the runs
    assert "Too large to load back here" in mask_file.note  # 141 MB unpacked; small ones do
    tensors = torch.load(io.BytesIO(mask_file.build()), weights_only=True)
    assert tensors["kv_indices"].shape == (1, 4, 2100, 2100)  # as from_kv_blocks reads them
    csr = load(files["long_csr.pt"].build())
    assert from_csr(csr["row_ptr"], csr["col_idx"], csr["n_k_blocks"], csr["block_size"]) == layout
    for export in files.values():
        if export.unavailable is None:
            export.build()


def test_a_token_exact_design_held_as_runs_exports_its_block_mask(monkeypatch):
    """Its partial blocks and token lengths travel in the BlockMask file and come back."""
    import designer.layout
    from tests.factories import random_token_mask, token_layout_of

    mask = random_token_mask(np.random.default_rng(5), 2, 700, 650, 64)
    dense = token_layout_of(mask, 64)
    monkeypatch.setattr(designer.layout, "DENSE_CELLS", 0)  # held as runs, as past the cap
    layout = Layout(dense.to_runs(), 64, dense.partials, 700, 650)
    assert layout.runs is not None and layout.partials is not None
    mask_file = by_name(Design(layout, name="tokens"))["tokens_blockmask.pt"]
    assert mask_file.unavailable is None
    read = read_design_file(io.BytesIO(mask_file.build())).design.layout
    assert read == layout and read.token_mask().equal(mask)
