"""Token-exact designs through every file and mask that carries them."""

import io

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, create_mask

from designer import Design
from designer.formats import (
    block_mask_tensors,
    design_from_json,
    from_block_mask,
    load_design,
    read_design_file,
    recipe_to_json,
    save_design,
    to_block_mask,
)
from designer.formats.pt_file import design_file_bytes
from designer.layout import Layout
from designer.recipe import Recipe, RecipeStep
from tests.designer.formats.flash_rules import flash_problems
from tests.factories import random_layout, random_token_mask, token_layout_of

SHAPES = st.tuples(
    st.integers(1, 2), st.integers(1, 300), st.integers(1, 300), st.sampled_from([16, 32, 64])
)


def _layout(seed, heads, seq_q, seq_k, block):
    mask = random_token_mask(np.random.default_rng(seed), heads, seq_q, seq_k, block)
    return mask, token_layout_of(mask, block)


@settings(max_examples=20, deadline=None)
@given(SHAPES, st.integers(0, 2**32 - 1), st.booleans())
def test_design_files_round_trip(shape, seed, causal):
    mask, layout = _layout(seed, *shape)
    design = Design(layout, name="tokens", causal=causal)
    buffer = io.BytesIO()
    save_design(design, buffer)
    loaded = load_design(buffer.getvalue())
    assert loaded.layout == layout and loaded.causal == causal
    assert torch.equal(loaded.layout.token_mask(), mask)


@settings(max_examples=15, deadline=None)
@given(SHAPES, st.integers(0, 2**32 - 1), st.booleans())
def test_block_masks_round_trip_and_mask_mods_are_the_token_mask(shape, seed, causal):
    mask, layout = _layout(seed, *shape)
    heads, seq_q, seq_k, _ = shape
    exported = to_block_mask(layout, causal=causal)
    assert from_block_mask(exported)[0] == layout
    expected = mask & torch.ones(seq_q, seq_k, dtype=torch.bool).tril() if causal else mask
    assert torch.equal(create_mask(exported.mask_mod, 1, heads, seq_q, seq_k)[0], expected)
    # the lists must cover every allowed pair: full tiles only where every pair is allowed
    tile = exported.BLOCK_SIZE[0]
    listed = exported.to_dense()[0].repeat_interleave(tile, 1).repeat_interleave(tile, 2)
    assert bool((listed[:, :seq_q, :seq_k].bool() | ~expected).all())
    # the same lists with a mask_mod of our own: read token-exact by evaluation
    lists = (exported.kv_num_blocks, exported.kv_indices, exported.full_kv_num_blocks,
             exported.full_kv_indices)  # fmt: skip
    plain = BlockMask.from_kv_blocks(*lists, BLOCK_SIZE=tile, seq_lengths=(seq_q, seq_k),
                                     mask_mod=lambda b, h, q, k: expected[h, q, k])  # fmt: skip
    again, block = from_block_mask(plain)
    assert block == tile and torch.equal(again.token_mask(), expected)
    # and the file form
    buffer = io.BytesIO()
    torch.save(block_mask_tensors(layout, causal=causal), buffer)
    read = read_design_file(buffer.getvalue())
    assert read.design.layout == layout and read.design.causal == causal


@pytest.mark.parametrize("block", [16, 64, 128])
def test_create_block_mask_masks_read_back_token_exact(block):
    doc = torch.repeat_interleave(torch.arange(3), torch.tensor([100, 400, 500]))

    def documents(b, h, q, k):
        return (doc[q] == doc[k]) & (q >= k)

    mask = create_block_mask(documents, 1, 2, 1000, 1000, device="cpu", BLOCK_SIZE=block)
    layout, found = from_block_mask(mask)
    assert found == block and layout.seq_len_q == 1000
    assert torch.equal(layout.token_mask()[0], create_mask(documents, 1, 1, 1000, 1000)[0, 0])


def test_a_mask_mod_reading_the_head_of_a_one_head_mask_is_refused():
    windows = torch.tensor([10, 200])

    def per_head(b, h, q, k):
        return (q - k).abs() <= windows[h]

    mask = create_block_mask(per_head, 1, 2, 256, 256, device="cpu")
    lists = (mask.kv_num_blocks[:, :1], mask.kv_indices[:, :1], mask.full_kv_num_blocks[:, :1],
             mask.full_kv_indices[:, :1])  # fmt: skip
    one = BlockMask.from_kv_blocks(*lists, BLOCK_SIZE=128, mask_mod=per_head)
    with pytest.raises(ValueError, match="reads the head, but block_mask lists its tiles for one"):
        from_block_mask(one)
    assert from_block_mask(mask)[0].n_heads == 2


def test_token_recipes_round_trip_through_json_and_design_files():
    recipe = Recipe(2, 16, 15, 64, (RecipeStep("token_causal_documents"),), seq_q=1000, seq_k=900)
    design = Design(recipe.build(), name="docs", recipe=recipe)
    assert design_from_json(recipe_to_json(design)).layout == design.layout
    assert load_design(design_file_bytes(design)).layout == design.layout


def test_block_level_designs_carry_no_partial_blocks():
    layout = random_layout(np.random.default_rng(0), 2, 8, 8, 0.3, 16)
    content = torch.load(io.BytesIO(design_file_bytes(Design(layout))), weights_only=True)
    assert content["version"] == 3 and "partials" not in content


def test_a_version_3_file_with_bad_partials_is_refused():
    layout = Layout(torch.ones(1, 2, 2, dtype=torch.bool), 16, seq_q=20)
    data = design_file_bytes(Design(layout))
    content = torch.load(io.BytesIO(data), weights_only=True)
    assert content["version"] == 3 and content["seq_len_q"] == 20
    content["partials"] = {"index": torch.tensor([[0, 0, 5]], dtype=torch.int32),
                           "bits": torch.zeros(1, 16, 2, dtype=torch.uint8)}  # fmt: skip
    buffer = io.BytesIO()
    torch.save(content, buffer)
    with pytest.raises(ValueError, match=r"partials: partial block \(0, 0, 5\) is outside"):
        load_design(buffer.getvalue())
    content["partials"] = None
    content["seq_len_q"] = 16
    buffer = io.BytesIO()
    torch.save(content, buffer)
    with pytest.raises(ValueError, match=r"seq_len_q = 16 does not match the layout"):
        load_design(buffer.getvalue())


@pytest.mark.parametrize("heads", [1, 2])
def test_the_flex_snippet_builds_the_token_mask_from_the_download(tmp_path, monkeypatch, heads):
    from designer.formats import flex_snippet

    doc = torch.repeat_interleave(torch.arange(3), torch.tensor([100, 300, 100]))
    layout = from_mask_mod_documents(doc, heads)
    torch.save(block_mask_tensors(layout, causal=True), tmp_path / "t_blockmask.pt")
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(flex_snippet(Design(layout, causal=True), "t_blockmask.pt"), "s", "exec"),
         namespace)  # fmt: skip
    made = create_mask(namespace["block_mask"].mask_mod, 1, heads, 500, 500)[0]
    assert torch.equal(made, layout.token_mask())
    assert flash_problems(namespace["mask_mod"]) == []  # FLASH (FA4) compiles it too


def from_mask_mod_documents(doc, heads):
    from designer import from_mask_mod

    return from_mask_mod(lambda b, h, q, k: (doc[q] == doc[k]) & (q >= k), heads=heads,
                         seq_q=len(doc), seq_k=len(doc), block_size=64)  # fmt: skip


def test_block_level_exports_say_they_cannot_hold_partial_blocks():
    from designer.formats.exports import exports

    doc = torch.repeat_interleave(torch.arange(2), torch.tensor([100, 412]))
    found = {e.label: e for e in exports(Design(from_mask_mod_documents(doc, 2)))}
    for label in ("CSR (row_ptr, col_idx)", "MIT base_blockmask", "DeepSpeed layout"):
        assert "partial blocks (token masks inside blocks) it cannot express" in found[
            label].unavailable  # fmt: skip
    for label in ("Design (.pt)", "FlexAttention BlockMask", "FlexAttention snippet"):
        assert found[label].unavailable is None and found[label].build()
