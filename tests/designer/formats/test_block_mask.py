import io
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

from designer.formats import block_mask_tensors, from_block_mask, to_block_mask
from designer.layout import Layout
from tests.factories import random_layout


@st.composite
def layouts(draw, max_blocks=6):
    shape = (draw(st.integers(1, 3)), draw(st.integers(1, max_blocks)), draw(st.integers(1, 6)))
    seed = draw(st.integers(0, 2**32 - 1))
    density = draw(st.sampled_from([0.0, 0.3, 0.7, 1.0]))
    block = draw(st.sampled_from([1, 4, 16, 128]))
    return random_layout(np.random.default_rng(seed), *shape, density=density, block_size=block)


def reference_lists(layout, causal):
    """Per (head, row): the full and the partial key blocks, one block at a time."""
    full, partial = {}, {}
    h_count, m, n = layout.shape
    for h in range(h_count):
        for r in range(m):
            active = [c for c in range(n) if layout.blocks[h, r, c]]
            full[h, r] = [c for c in active if not causal or c < r]
            partial[h, r] = [c for c in active if causal and c == r]
    return full, partial


def listed(num, indices, h, r):
    return sorted(indices[0, h, r, : int(num[0, h, r])].tolist())


def reference_attention(q, k, v, layout, causal):
    """Dense fp64 softmax over the layout's token mask; rows with no key output zeros."""
    block = layout.block_size
    mask = layout.blocks.repeat_interleave(block, 1).repeat_interleave(block, 2)  # [H, Sq, Sk]
    if causal:
        mask = mask & torch.ones(mask.shape[1:], dtype=torch.bool).tril()
    scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v


@settings(max_examples=100, deadline=None)
@given(layouts(), st.booleans())
def test_block_lists_match_reference_and_round_trip(layout, causal):
    mask = to_block_mask(layout, causal=causal)
    assert (layout.block_size, layout.block_size) == mask.BLOCK_SIZE
    assert mask.seq_lengths == (layout.seq_len_q, layout.seq_len_k)
    full, partial = reference_lists(layout, causal)
    for (h, r), expected in full.items():
        assert listed(mask.full_kv_num_blocks, mask.full_kv_indices, h, r) == expected
        assert listed(mask.kv_num_blocks, mask.kv_indices, h, r) == partial[h, r]
    back, block_size = from_block_mask(mask)
    assert block_size == layout.block_size
    assert back == (layout.causal_clip() if causal else layout)


@settings(max_examples=50, deadline=None)
@given(layouts(), st.booleans())
def test_block_mask_tensors_travel_through_a_file(layout, causal):
    buffer = io.BytesIO()
    torch.save(block_mask_tensors(layout, causal=causal), buffer)
    arguments = torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
    assert arguments["BLOCK_SIZE"] == layout.block_size
    assert tuple(arguments["seq_lengths"]) == (layout.seq_len_q, layout.seq_len_k)
    direct = to_block_mask(layout, causal=causal)
    rebuilt = BlockMask.from_kv_blocks(**arguments, mask_mod=direct.mask_mod)
    full, partial = reference_lists(layout, causal)
    for (h, r), expected in full.items():
        assert listed(rebuilt.full_kv_num_blocks, rebuilt.full_kv_indices, h, r) == expected
        assert listed(rebuilt.kv_num_blocks, rebuilt.kv_indices, h, r) == partial[h, r]
    for name in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
        assert torch.equal(getattr(rebuilt, name), getattr(direct, name)), name
    back, block_size = from_block_mask(rebuilt)
    assert block_size == layout.block_size
    assert back == (layout.causal_clip() if causal else layout)


@settings(max_examples=25, deadline=None)
@given(layouts(max_blocks=5), st.booleans())
def test_mask_mod_encodes_the_token_mask(layout, causal):
    mask = to_block_mask(layout, causal=causal)
    dense = create_mask(mask.mask_mod, 1, layout.n_heads, layout.seq_len_q, layout.seq_len_k, "cpu")
    for h in range(layout.n_heads):
        expected = layout.token_mask(h)
        if causal:
            expected = expected & torch.ones_like(expected).tril()
        assert torch.equal(dense[0, h], expected)


@pytest.mark.parametrize(
    ("shape", "block", "causal", "query_heads"),
    [
        ((2, 3, 3), 4, False, 2),
        ((2, 4, 3), 8, True, 2),
        ((1, 3, 5), 4, False, 3),  # one head broadcasts to every query head
        ((3, 2, 2), 16, True, 3),
    ],
)
def test_eager_flex_attention_gives_the_layouts_attention(rng, shape, block, causal, query_heads):
    layout = random_layout(rng, *shape, density=0.5, block_size=block)
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, query_heads, layout.seq_len_q, 8, dtype=torch.float64, generator=generator)
    k = torch.randn(2, query_heads, layout.seq_len_k, 8, dtype=torch.float64, generator=generator)
    v = torch.randn(2, query_heads, layout.seq_len_k, 8, dtype=torch.float64, generator=generator)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "called without torch.compile()"
        out = flex_attention(q, k, v, block_mask=to_block_mask(layout, causal=causal))
    expected = reference_attention(
        q, k, v, layout.broadcast_heads(query_heads) if shape[0] == 1 else layout, causal
    )
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_reads_masks_that_torch_builds():
    causal = create_block_mask(lambda b, h, q, k: q >= k, 2, 3, 64, 96, device="cpu", BLOCK_SIZE=16)
    layout, block_size = from_block_mask(causal)
    assert block_size == 16 and layout.shape == (3, 4, 6)
    assert torch.equal(layout.blocks, torch.ones(3, 4, 6, dtype=torch.bool).tril())


def test_bad_arguments_are_refused(rng):
    layout = random_layout(rng, block_size=16)
    assert to_block_mask(layout, 16).BLOCK_SIZE == (16, 16)
    with pytest.raises(ValueError, match="block_size must be the layout's block size 16, got 128"):
        to_block_mask(layout, 128)
    with pytest.raises(TypeError, match="layout must be a Layout, got Tensor"):
        to_block_mask(layout.blocks)
    with pytest.raises(TypeError, match="causal must be True or False, got str"):
        to_block_mask(layout, causal="yes")
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
    ragged = create_block_mask(lambda b, h, q, k: q >= k, 1, 1, 60, 64, device="cpu", BLOCK_SIZE=16)
    with pytest.raises(
        ValueError, match="seq_lengths must be whole blocks: 4 x 4 blocks of 16 tok"
    ):
        from_block_mask(ragged)


def test_layout_is_unchanged(rng):
    layout = random_layout(rng)
    before = layout.blocks.clone()
    to_block_mask(layout, causal=True)
    assert torch.equal(layout.blocks, before)
    assert Layout(before, 16) == layout


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block", [128, 32])
def test_compiled_flex_attention_on_gpu_gives_the_layouts_attention(causal, block):
    """Compiled kernels read only the block lists: they must give the same attention."""
    layout = random_layout(np.random.default_rng(7), 4, 1024 // block, 1024 // block, 0.4, block)
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, 1024, 64, generator=generator) for _ in range(3))
    compiled = torch.compile(flex_attention)
    mask = to_block_mask(layout, causal=causal, device="cuda")
    tiles = {} if block == 128 else {"BLOCK_M": block, "BLOCK_N": block}
    inputs = (t.to("cuda", torch.bfloat16) for t in (q, k, v))
    out = compiled(*inputs, block_mask=mask, kernel_options=tiles)
    expected = reference_attention(q.double(), k.double(), v.double(), layout, causal)
    torch.testing.assert_close(out.double().cpu(), expected, rtol=2e-2, atol=2e-2)
