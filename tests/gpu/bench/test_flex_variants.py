"""FlexAttention's variants on the CPU: the closed-form masks equal the layouts' token masks
exactly, the tiles at 64 tokens, which variants each case offers, and eager attention through
each variant's BlockMask against the oracle."""

from __future__ import annotations

import pytest
import torch

from designer.formats.flex_tiles import kv_lists
from designer.layout import Layout
from gpu.bench.cases import BAND_HALF_WIDTHS, FAMILIES, find_case
from gpu.bench.flex import (
    BAND,
    CAUSAL,
    DENSE,
    GATHER,
    FlexSession,
    FlexUnavailable,
    FlexVariant,
    causal_mask,
    closed_form,
    flex_variants,
    generate_band_mask,
    tile_classes,
)
from tests.gpu.oracle import naive_attention

CPU = torch.device("cpu")


def _token_mask(form: str, window: int, block_size: int, seq: int) -> torch.Tensor:
    """The closed form's ``mask_mod`` on every ``(q_idx, kv_idx)`` pair, as Flex calls it."""
    q_idx = torch.arange(seq, dtype=torch.int32)[:, None]
    kv_idx = torch.arange(seq, dtype=torch.int32)[None, :]
    if form == DENSE:
        return torch.ones(seq, seq, dtype=torch.bool)
    if form == CAUSAL:
        return causal_mask(0, 0, q_idx, kv_idx)
    block = torch.tensor(block_size, dtype=torch.int32)
    return generate_band_mask(block, torch.tensor(window, dtype=torch.int32))(0, 0, q_idx, kv_idx)


@pytest.mark.parametrize("seq", [1024, 2048, 4096])
@pytest.mark.parametrize("block", [128, 64, 16])
@pytest.mark.parametrize("family", [*BAND_HALF_WIDTHS, "causal", "dense"])
def test_closed_forms_reproduce_the_standard_layouts_token_masks(family, block, seq):
    case = find_case(f"{family}-b{block}-d64")
    layout = case.layout(seq_len=seq)
    form = closed_form(layout.blocks, causal=case.causal)
    expected = layout.token_mask(0)[0]
    if case.causal:
        assert form == (CAUSAL, 0)
        expected &= torch.ones(seq, seq, dtype=torch.bool).tril()
    elif family == "dense" or bool(layout.blocks.all()):  # a band wider than S is dense
        assert form == (DENSE, 0)
    else:
        window = round(BAND_HALF_WIDTHS[family] / block + 0.5)  # the sliding_window parameter
        assert form == (BAND, window)
    assert torch.equal(_token_mask(*form, block, seq), expected)


def test_layouts_without_a_closed_form_keep_the_gather():
    bigbird = find_case("bigbird_10pct-b64-d64").layout(seq_len=2048)
    assert closed_form(bigbird.blocks, causal=False) is None
    band = find_case("banded_7pct-b64-d64").layout(seq_len=2048).blocks
    assert closed_form(band, causal=True) is None  # a band is not causal's lower triangle
    shifted = band.clone()
    shifted[3, 0, 0] = False  # one head differs
    assert closed_form(shifted, causal=False) is None
    assert closed_form(torch.zeros(1, 4, 4, dtype=torch.bool), causal=False) is None
    causal = torch.ones(1, 4, 4, dtype=torch.bool).tril()
    causal[0, 2, 1] = False  # a hole below the diagonal
    assert closed_form(causal, causal=True) is None


@pytest.mark.parametrize("causal", [False, True])
def test_tiles_at_block_size_64_are_the_layouts_blocks(causal):
    layout = find_case("bigbird_10pct-b64-d64").layout(seq_len=2048)
    full, partial = tile_classes(layout.blocks, 64, causal=causal, tile_size=64)
    if not causal:
        assert torch.equal(full, layout.blocks) and not partial.any()
    else:
        diagonal = torch.eye(32, dtype=torch.bool)
        assert torch.equal(full, layout.blocks & torch.ones(32, 32, dtype=torch.bool).tril(-1))
        assert torch.equal(partial, layout.blocks & diagonal)


@pytest.mark.parametrize("tile", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_tile_64_block_mask_matches_create_block_mask(tile, causal):
    from torch.nn.attention.flex_attention import create_block_mask

    blocks = find_case("bigbird_10pct-b64-d64").layout(seq_len=1024).blocks[:2]
    variant = FlexVariant(GATHER, tile)
    ours = FlexSession().prepare(blocks, 64, causal=causal, device=CPU, variant=variant)
    ours = ours.block_mask
    tokens = blocks.repeat_interleave(64, 1).repeat_interleave(64, 2)

    def mask_mod(b, h, q_idx, kv_idx):
        allowed = tokens[h, q_idx, kv_idx]
        return allowed & (q_idx >= kv_idx) if causal else allowed

    theirs = create_block_mask(mask_mod, 1, 2, 1024, 1024, device="cpu", BLOCK_SIZE=tile)
    assert ours.BLOCK_SIZE == theirs.BLOCK_SIZE == (tile, tile)
    for num, idx in (("kv_num_blocks", "kv_indices"), ("full_kv_num_blocks", "full_kv_indices")):
        ours_num, ours_idx = getattr(ours, num), getattr(ours, idx)
        theirs_num, theirs_idx = getattr(theirs, num), getattr(theirs, idx)
        assert torch.equal(ours_num, theirs_num)
        for h in range(2):
            for row in range(1024 // tile):
                n = int(ours_num[0, h, row])
                assert sorted(ours_idx[0, h, row, :n].tolist()) == sorted(
                    theirs_idx[0, h, row, :n].tolist()
                )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("banded_7pct-b128-d64", ["gather-t128", "band-t128"]),
        ("banded_7pct-b64-d64", ["gather-t128", "band-t128", "gather-t64", "band-t64"]),
        ("banded_2pct-b16-d64", ["gather-t128", "band-t128"]),
        ("causal-b64-d128", ["gather-t128", "causal-t128", "gather-t64", "causal-t64"]),
        ("causal-b16-d64", ["gather-t128", "causal-t128"]),
        ("dense-b64-d64", ["gather-t128", "dense-t128"]),  # 64-token tiles save nothing
        ("bigbird_10pct-b128-d64", ["gather-t128"]),
        ("bigbird_10pct-b64-d64", ["gather-t128", "gather-t64"]),
    ],
)
def test_each_case_offers_every_variant_that_runs_it(name, expected):
    case = find_case(name)
    layout = case.layout(seq_len=2048)
    variants = flex_variants(layout.blocks, layout.block_size, causal=case.causal)
    assert [v.name for v in variants] == expected
    assert all(v.window_blocks > 0 for v in variants if v.mask == BAND)


def test_blocks_beyond_128_tokens_use_their_own_tile_and_odd_blocks_none():
    (variant,) = flex_variants(torch.ones(1, 4, 4, dtype=torch.bool).tril(), 256, causal=False)
    assert variant.name == "gather-t256"
    with pytest.raises(FlexUnavailable, match="block_size dividing 128"):
        flex_variants(torch.ones(1, 4, 4, dtype=torch.bool), 96, causal=False)
    with pytest.raises(FlexUnavailable, match="Sq, Sk multiples of its tile"):
        flex_variants(torch.ones(1, 3, 3, dtype=torch.bool), 16, causal=False)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"mask": "sparse"}, "mask must be one of"),
        ({"tile_size": 96}, "tile_size must be a power of two, got 96"),
        ({"tile_size": 8}, "tile_size must be >= 16, got 8"),
        ({"mask": BAND}, "window_blocks must be positive for a band and 0 otherwise, got 0"),
        ({"window_blocks": 2}, "window_blocks must be positive for a band and 0 otherwise"),
    ],
)
def test_flex_variant_checks(changes, match):
    with pytest.raises(ValueError, match=match):
        FlexVariant(**{"mask": GATHER, "tile_size": 128, **changes})


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("block", [64, 16])
def test_every_variant_gives_the_layouts_attention_in_eager_flex(family, block):
    """Eager Flex evaluates only ``mask_mod``; the tiles are checked above."""
    from torch.nn.attention.flex_attention import flex_attention

    case = find_case(f"{family}-b{block}-d64")
    layout = case.layout(seq_len=512)
    blocks = layout.blocks[:2]
    gen = torch.Generator().manual_seed(block)
    q, k, v = (torch.randn(1, 2, 512, 16, generator=gen) for _ in range(3))
    expected = naive_attention(q, k, v, blocks, block, causal=case.causal)
    session = FlexSession()
    for variant in flex_variants(blocks, block, causal=case.causal):
        call = session.prepare(blocks, block, causal=case.causal, device=CPU, variant=variant)
        out = flex_attention(q, k, v, block_mask=call.block_mask)
        torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5, msg=variant.name)


def test_one_head_layouts_gather_for_every_head_and_masks_are_built_once():
    session = FlexSession()
    one = Layout(torch.ones(1, 4, 4, dtype=torch.bool).tril(), 64)
    call = session.prepare(one.blocks, 64, causal=False, device=CPU)
    assert call.block_mask.kv_num_blocks.shape == (1, 1, 2)
    band = FlexVariant(BAND, 128, window_blocks=2)
    first = session.prepare(one.blocks, 64, causal=False, device=CPU, variant=band)
    again = session.prepare(one.blocks, 32, causal=False, device=CPU,
                            variant=FlexVariant(BAND, 128, window_blocks=5))  # fmt: skip
    assert first.block_mask.mask_mod is again.block_mask.mask_mod  # no recompile for a new case
    same = session.prepare(torch.ones(1, 4, 4, dtype=torch.bool), 64, causal=True, device=CPU)
    assert same.block_mask.mask_mod is call.block_mask.mask_mod
    assert kv_lists(torch.ones(1, 2, 2, dtype=torch.bool))[0].tolist() == [[[2, 2]]]


def test_default_mode_sets_64_token_kernel_tiles_below_128():
    session = FlexSession()
    blocks = torch.ones(1, 4, 4, dtype=torch.bool)
    small = session.prepare(blocks, 64, causal=False, device=CPU,
                            variant=FlexVariant(DENSE, 64))  # fmt: skip
    assert small.kernel_options == {"BLOCK_M": 64, "BLOCK_N": 64}
    assert session.prepare(blocks, 64, causal=False, device=CPU).kernel_options is None
    tuned = session.prepare(blocks, 64, causal=False, device=CPU, mode="max-autotune",
                            variant=FlexVariant(DENSE, 64))  # fmt: skip
    assert tuned.kernel_options is None  # autotuning keeps the tiles that divide 64
