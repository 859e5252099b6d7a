import io
import re
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention.flex_attention import (
    BlockMask,
    create_block_mask,
    create_mask,
    flex_attention,
)

from designer import from_mask_mod
from designer.formats import block_mask_tensors, from_block_mask, read_design_file, to_block_mask
from designer.formats.block_mask import layout_mask_mod
from designer.formats.flex_tiles import flex_tile_size, kv_lists, listed_tiles, tile_classes
from designer.layout import CAUSAL_ALIGNMENTS, Layout
from designer.patterns.token_window import token_sliding_window
from gpu.reference import dense_masked_attention
from tests.designer.formats.flash_rules import flash_problems
from tests.designer.formats.flex_reference import (
    layouts,
    lengths_and_offsets,
    token_masks,
    token_tiles,
)
from tests.factories import random_layout


def tiles_of(mask: BlockMask) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(full, partial)`` tiles a ``BlockMask`` lists, bool ``[H, M, N]``."""
    n = mask.kv_indices.shape[-1]
    full = listed_tiles(mask.full_kv_num_blocks, mask.full_kv_indices, n)
    return full[0], listed_tiles(mask.kv_num_blocks, mask.kv_indices, n)[0]


def saved(content) -> bytes:
    buffer = io.BytesIO()
    torch.save(content, buffer)
    return buffer.getvalue()


@settings(max_examples=60, deadline=None)
@given(st.data(), layouts(), st.booleans(), st.sampled_from(CAUSAL_ALIGNMENTS))
def test_tiles_are_the_token_tiles_and_read_back_to_the_layout(data, layout, causal, alignment):
    (seq_q, seq_k), _ = data.draw(lengths_and_offsets(layout))
    mask = to_block_mask(
        layout, causal=causal, causal_alignment=alignment, seq_q=seq_q, seq_k=seq_k
    )
    offset = seq_k - seq_q if alignment == "bottom_right" else 0
    tile = flex_tile_size(layout.block_size)
    assert (tile, tile) == mask.BLOCK_SIZE
    assert mask.seq_lengths == (seq_q, seq_k)
    full, partial = tiles_of(mask)
    expected_full, expected_partial = token_tiles(layout, causal, tile, (seq_q, seq_k), offset)
    assert torch.equal(full, expected_full) and torch.equal(partial, expected_partial)
    assert mask.mask_mod.layout is layout and mask.mask_mod.causal is causal
    assert mask.mask_mod.causal_offset == offset
    back, block_size = from_block_mask(mask)
    assert block_size == layout.block_size and back == layout


@settings(max_examples=40, deadline=None)
@given(layouts(), st.booleans())
def test_block_mask_tensors_travel_through_a_file(layout, causal):
    data = saved(block_mask_tensors(layout, causal=causal))
    arguments = torch.load(io.BytesIO(data), weights_only=True)
    assert arguments["BLOCK_SIZE"] == flex_tile_size(layout.block_size)
    assert tuple(arguments["seq_lengths"]) == (layout.seq_len_q, layout.seq_len_k)
    stored = arguments.pop("layout")
    assert (stored["block_size"], stored["causal"]) == (layout.block_size, causal)
    rebuilt = BlockMask.from_kv_blocks(**arguments, mask_mod=layout_mask_mod(layout, causal))
    direct = to_block_mask(layout, causal=causal)
    for name in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
        assert torch.equal(getattr(rebuilt, name), getattr(direct, name)), name
    assert from_block_mask(rebuilt) == (layout, layout.block_size)
    loaded = read_design_file(data)
    assert loaded.kind == "blockmask"
    assert loaded.design.layout == layout and loaded.design.causal is causal


@settings(max_examples=25, deadline=None)
@given(st.data(), layouts(max_tokens=200), st.booleans(), st.sampled_from(CAUSAL_ALIGNMENTS))
def test_mask_mod_encodes_the_token_mask(data, layout, causal, alignment):
    (seq_q, seq_k), _ = data.draw(lengths_and_offsets(layout))
    mask = to_block_mask(
        layout, causal=causal, causal_alignment=alignment, seq_q=seq_q, seq_k=seq_k
    )
    dense = create_mask(mask.mask_mod, 1, layout.n_heads, seq_q, seq_k, "cpu")
    offset = seq_k - seq_q if alignment == "bottom_right" else 0
    assert torch.equal(dense[0], token_masks(layout, causal, seq_q, seq_k, offset))


#: One-head and per-head layouts, causal at both alignments, partial lengths, block sizes.
FLEX_CASES = [
    # (heads, blocks, block, causal alignment or None, seq_q, seq_k, query heads)
    (1, (3, 5), 16, "bottom_right", 40, 80, 3),  # one head serves every query head
    (2, (4, 3), 16, "top_left", 60, 48, 2),
    (1, (9, 9), 16, None, 139, 144, 2),  # a short last tile, partial queries
    (2, (5, 7), 32, "bottom_right", 150, 210, 2),
    (3, (4, 4), 32, "top_left", 128, 128, 3),
    (1, (5, 3), 64, "bottom_right", 300, 170, 2),  # Sq > Sk: the first rows keep no key
    (2, (3, 4), 64, None, 170, 256, 2),
    (2, (3, 2), 128, "top_left", 300, 200, 2),
    (1, (2, 3), 128, "bottom_right", 129, 300, 2),
    (2, (5, 7), 48, "top_left", 240, 330, 2),  # blocks straddling tiles
    (2, (3, 2), 192, None, 576, 384, 2),  # blocks larger than a tile
]
CASE_NAMES = ("heads", "grid", "block", "alignment", "seq_q", "seq_k", "q_heads")


def case_mask(rng, heads, grid, block, alignment, seq_q, seq_k):
    """A random layout of ``FLEX_CASES``' shape and its exported mask."""
    layout = random_layout(rng, heads, *grid, density=0.5, block_size=block)
    mask = to_block_mask(
        layout, causal=alignment is not None, causal_alignment=alignment or "top_left",
        seq_q=seq_q, seq_k=seq_k,
    )  # fmt: skip
    return layout, mask


@pytest.mark.parametrize(CASE_NAMES, FLEX_CASES)
def test_eager_flex_attention_gives_the_layouts_attention(
    rng, heads, grid, block, alignment, seq_q, seq_k, q_heads
):
    """Eager flex_attention (no backward on the CPU) decides every pair with mask_mod alone."""
    layout, mask = case_mask(rng, heads, grid, block, alignment, seq_q, seq_k)
    generator = torch.Generator().manual_seed(0)

    def randn(seq):
        return torch.randn(2, q_heads, seq, 8, dtype=torch.float64, generator=generator)

    q, k, v = randn(seq_q), randn(seq_k), randn(seq_k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "called without torch.compile()"
        out = flex_attention(q, k, v, block_mask=mask)
    expected = dense_masked_attention(
        q, k, v, layout.blocks, block, causal=alignment is not None,
        causal_alignment=alignment or "top_left",
    )  # fmt: skip
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(CASE_NAMES, FLEX_CASES)
def test_mask_mod_compiles_on_the_flash_backend(
    rng, heads, grid, block, alignment, seq_q, seq_k, q_heads
):
    """FA4's CuTe-DSL compiler takes the exported mask_mod (its rules: ``flash_rules``)."""
    _, mask = case_mask(rng, heads, grid, block, alignment, seq_q, seq_k)
    assert flash_problems(mask.mask_mod) == []


@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("causal", [False, True])
def test_a_token_exact_mask_mod_compiles_on_the_flash_backend(heads, causal):
    """Partial blocks are read one bool a token pair: FLASH has no CuTe type for uint8 bytes
    and no lowering of a bit shift (both failed on the H200: ``probes/flash_token_mask.py``)."""
    layout = from_mask_mod(token_sliding_window(40), heads=heads, seq_q=200, seq_k=190,
                           block_size=16)  # fmt: skip
    assert layout.partials is not None
    mask = to_block_mask(layout, causal=causal)
    assert flash_problems(mask.mask_mod) == []
    tokens = create_mask(mask.mask_mod, 1, heads, 200, 190, device="cpu")[0]
    want = layout.token_mask() & (torch.ones(200, 190, dtype=torch.bool).tril() if causal else True)
    assert torch.equal(tokens, want)


BLOCKS = torch.ones(2, 4, 4, dtype=torch.bool)
BYTES, FLAG, WORDS = BLOCKS.to(torch.uint8), torch.tensor(True), BLOCKS.to(torch.int32)


@pytest.mark.parametrize(
    ("mask_mod", "problem"),
    [
        (lambda b, h, q, k: BLOCKS[0, q // 16, k // 16], "dimension 0 of a captured tensor is re"),
        (lambda b, h, q, k: BLOCKS[h, q // 16, k // 16] & FLAG, r"shape \[\] is used by aten.bitw"),
        (lambda b, h, q, k: BYTES[h, q // 16, k // 16] > 0, "torch.uint8 tensor .* no CuTe type"),
        (lambda b, h, q, k: torch.minimum(q, k) >= 0, "aten.minimum has no CuTe-DSL lowering"),
        (
            lambda b, h, q, k: (WORDS[h, q // 16, k // 16] >> (k % 8)) & 1 == 1,
            "aten.__rshift__ has no CuTe-DSL lowering",
        ),
    ],
)
def test_the_flash_rules_refuse_what_torch_2_11_cannot_compile(mask_mod, problem):
    """The one-head mask_mod of before (``blocks[0, ...]``) comes first: on FLASH a one-head
    design failed with ``Expected TensorSSA, but got <class 'int'>``."""
    assert any(re.search(problem, found) for found in flash_problems(mask_mod))


def test_a_mask_mod_whose_causal_rule_left_its_tiles_is_refused():
    layout = Layout(torch.ones(2, 8, 6, dtype=torch.bool), 32)
    mask = to_block_mask(layout, causal=True, causal_alignment="bottom_right", seq_q=250)
    assert mask.mask_mod.causal_offset == 192 - 250
    assert from_block_mask(mask) == (layout, 32)
    top_left = layout_mask_mod(layout, True)  # the same tiles, another causal rule
    lists = (mask.kv_num_blocks, mask.kv_indices, mask.full_kv_num_blocks, mask.full_kv_indices)
    moved = BlockMask.from_kv_blocks(*lists, BLOCK_SIZE=128, mask_mod=top_left,
                                     seq_lengths=(250, 192))  # fmt: skip
    with pytest.raises(ValueError, match="block_mask tile lists are not the tiles of its layout"):
        from_block_mask(moved)


def test_reads_masks_that_torch_builds():
    causal = create_block_mask(lambda b, h, q, k: q >= k, 2, 3, 64, 96, device="cpu", BLOCK_SIZE=16)
    layout, block_size = from_block_mask(causal)
    assert block_size == 16 and layout.shape == (3, 4, 6)
    assert torch.equal(layout.blocks, torch.ones(3, 4, 6, dtype=torch.bool).tril())
    window = create_block_mask(lambda b, h, q, k: (q - k).abs() < 8, 1, 1, 256, 256, device="cpu")
    layout, block_size = from_block_mask(window)  # Flex's default tiles: 128-token blocks
    assert block_size == 128 and torch.equal(layout.blocks[0], torch.ones(2, 2).bool())


def test_a_mask_whose_lists_left_its_layout_is_refused(rng):
    layout = random_layout(rng, 2, 16, 16, 0.4, 16)
    mask = to_block_mask(layout)
    head = mask[:, :1]  # torch drops the mask_mod of a slice: its tokens are not known
    with pytest.raises(ValueError, match=r"mask_mod cannot tell its partial tiles' tokens"):
        from_block_mask(head)
    lists = (head.kv_num_blocks, head.kv_indices, head.full_kv_num_blocks, head.full_kv_indices)
    sliced = BlockMask.from_kv_blocks(*lists, BLOCK_SIZE=128, mask_mod=mask.mask_mod)
    with pytest.raises(ValueError, match=r"block_mask lists tiles for \[heads, rows, columns\] \["):
        from_block_mask(sliced)
    every = torch.ones(2, 2, 2, dtype=torch.bool)
    other = BlockMask.from_kv_blocks(  # every tile full: not what 40 % of the blocks give
        *kv_lists(~every), *kv_lists(every), BLOCK_SIZE=128, mask_mod=mask.mask_mod
    )
    with pytest.raises(ValueError, match="block_mask tile lists are not the tiles of its layout"):
        from_block_mask(other)


def test_a_file_without_the_layout_is_read_from_its_lists(rng):
    """Files written before the layout travelled with the lists: the tiles are the blocks."""
    layout = random_layout(rng, 2, 6, 6, 0.6, 16)
    full, partial = tile_classes(layout.blocks, 16, causal=True, tile_size=16)
    content = dict(zip(("kv_num_blocks", "kv_indices"), kv_lists(partial), strict=True))
    content.update(zip(("full_kv_num_blocks", "full_kv_indices"), kv_lists(full), strict=True))
    content.update(BLOCK_SIZE=16, seq_lengths=(96, 96))
    design = read_design_file(saved(content)).design
    assert design.layout == layout.causal_clip() and design.causal
    with pytest.raises(ValueError, match=r"seq_lengths \(90, 96\) must be whole blocks of BLOC"):
        read_design_file(saved({**content, "seq_lengths": (90, 96)}))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["layout"].pop("causal"), "layout is missing 'causal'"),
        (lambda c: c["layout"].update(causal=1), "layout causal must be True or False, got int"),
        (lambda c: c["layout"].update(block_size=32), "128-token tiles over 256 x 256 tokens, b"),
        (lambda c: c["layout"].update(causal=True), "file tile lists are not the tiles of its lay"),
        (lambda c: c["layout"].update(shape=[2, 16, 17]), r"layout bits must be uint8 \[68\]"),
        (lambda c: c["kv_indices"].fill_(9), r"kv_indices: tile indices must be in \[0, 1\]"),
        (lambda c: c.update(seq_lengths=(256, 300)), "file has 128-token tiles over 256 x 300"),
        (lambda c: c.update(seq_lengths=(256, 250)), r"\(256, 250\) are not its layout's token"),
        (lambda c: c.update(extra=1), "file has unknown keys"),
    ],
)
def test_a_bad_blockmask_file_says_what_is_wrong(rng, change, message):
    content = block_mask_tensors(random_layout(rng, 2, 16, 16, 0.5, 16), causal=False)
    change(content)
    with pytest.raises(ValueError, match=f"^BlockMask tensors: .*{message}|^{message}"):
        read_design_file(saved(content))


def test_bad_arguments_are_refused(rng):
    layout = random_layout(rng, block_size=16)
    assert to_block_mask(layout, 16).BLOCK_SIZE == (128, 128)
    with pytest.raises(ValueError, match="block_size must be the layout's block size 16, got 128"):
        to_block_mask(layout, 128)
    with pytest.raises(TypeError, match="layout must be a Layout, got Tensor"):
        to_block_mask(layout.blocks)
    with pytest.raises(TypeError, match="causal must be True or False, got str"):
        to_block_mask(layout, causal="yes")
    with pytest.raises(ValueError, match="causal_alignment must be one of 'top_left', 'bottom_"):
        to_block_mask(layout, causal=True, causal_alignment="bottom")
    with pytest.raises(
        ValueError, match=r"seq_q \(the layout's 8 blocks of 16\) must be in \[113,"
    ):
        to_block_mask(layout, seq_q=112)
    with pytest.raises(TypeError, match=r"seq_k .* must be an integer, got float 250\.0"):
        to_block_mask(layout, seq_k=250.0)
    with pytest.raises(TypeError, match="block_mask must be a BlockMask, got Layout"):
        from_block_mask(layout)
    with pytest.raises(TypeError, match="layout must be a Layout, got ndarray"):
        block_mask_tensors(layout.to_numpy())
    with pytest.raises(TypeError, match="causal must be True or False, got int 1"):
        block_mask_tensors(layout, causal=1)


def test_unrepresentable_block_masks_are_refused():
    num = torch.ones(2, 1, 2, dtype=torch.int32)
    indices = torch.tensor([[[[0, 1], [1, 0]]], [[[1, 0], [0, 1]]]], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"square blocks, got BLOCK_SIZE \(16, 32\)"):
        from_block_mask(BlockMask.from_kv_blocks(num, indices, BLOCK_SIZE=(16, 32)))
    with pytest.raises(
        ValueError, match="same blocks in every batch entry, got a batch of 2 whose"
    ):
        from_block_mask(BlockMask.from_kv_blocks(num, indices, BLOCK_SIZE=16))

    def causal(b, h, q, k):
        return q >= k

    ragged = create_block_mask(causal, 1, 1, 60, 64, device="cpu", BLOCK_SIZE=16)
    layout, block = from_block_mask(ragged)  # read token-exact, lengths and all
    assert block == 16 and torch.equal(layout.token_mask(), create_mask(causal, 1, 1, 60, 64)[0])
    flat = BlockMask.from_kv_blocks(torch.ones(2, dtype=torch.int32), indices[0, 0])
    with pytest.raises(ValueError, match=r"per \[batch, head, row\], got kv_indices of shape \[2,"):
        from_block_mask(flat)


def test_layout_is_unchanged(rng):
    layout = random_layout(rng)
    before = layout.blocks.clone()
    to_block_mask(layout, causal=True)
    block_mask_tensors(layout, causal=True)
    assert torch.equal(layout.blocks, before)
    assert Layout(before, 16) == layout


def test_one_head_broadcasts_over_heads():
    layout = Layout(torch.from_numpy(np.eye(12, dtype=bool))[None], 16)
    mask = to_block_mask(layout, causal=True)
    assert mask.kv_num_blocks.shape == (1, 1, 2)
    dense = create_mask(mask.mask_mod, 1, 4, 192, 192, "cpu")
    expected = layout.token_mask(0)[0] & torch.ones(192, 192, dtype=torch.bool).tril()
    assert torch.equal(dense[0], expected.expand(4, -1, -1))


@pytest.mark.slow
def test_compiled_flex_attention_on_the_cpu_reads_the_tiles(rng):
    """Compiled Flex (Inductor's CPU kernel here) visits only the listed tiles and skips
    mask_mod in full ones: the lists must give the layout's attention on their own terms.
    Blocks straddling tiles, causal bottom-right, per-head layouts, lengths ending inside
    blocks and short last tiles in one compile."""
    layout = random_layout(rng, 2, 7, 9, density=0.5, block_size=48)  # 336 x 432 tokens
    compiled = torch.compile(flex_attention, dynamic=False, fullgraph=True)
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 300, 16, generator=generator)
    k, v = (torch.randn(1, 2, 420, 16, generator=generator) for _ in range(2))
    mask = to_block_mask(layout, causal=True, causal_alignment="bottom_right", seq_q=300,
                         seq_k=420)  # fmt: skip
    out = compiled(q, k, v, block_mask=mask)
    expected = dense_masked_attention(q, k, v, layout.blocks, 48, causal=True,
                                      causal_alignment="bottom_right")  # fmt: skip
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)
