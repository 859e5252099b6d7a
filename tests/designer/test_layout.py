import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.layout import Layout
from tests.factories import random_layout


def test_shape_sizes_and_density():
    layout = Layout(torch.tensor([[[1, 0, 0], [1, 1, 0]]]), 32)
    assert layout.shape == (1, 2, 3)
    assert (layout.seq_len_q, layout.seq_len_k) == (64, 96)
    assert layout.nnz == 3 and layout.density == pytest.approx(0.5)
    assert layout.blocks.dtype == torch.bool


def test_head_stats_counts_rows():
    layout = Layout(torch.tensor([[[1, 1], [0, 0]], [[1, 0], [1, 1]]]), 16)
    first, second = layout.head_stats()
    assert (first.active_blocks, first.empty_rows, first.max_row_blocks) == (2, 1, 2)
    assert (second.density, second.min_row_blocks, second.mean_row_blocks) == (0.75, 1, 1.5)


def test_from_array_accepts_deepspeed_2d():
    layout = Layout.from_array(np.eye(4, dtype=np.int64), 64)
    assert layout.shape == (1, 4, 4) and layout.nnz == 4


@pytest.mark.parametrize("block_size", [0, -16, 5000])
def test_block_size_range(block_size):
    with pytest.raises(ValueError, match=r"block_size must be in \[1, 4096\]"):
        Layout(torch.ones(1, 2, 2, dtype=torch.bool), block_size)


def test_empty_shape_is_refused():
    with pytest.raises(ValueError, match=r"at least one head and block, got \[1, 0, 2\]"):
        Layout(torch.ones(1, 0, 2, dtype=torch.bool), 16)


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ((0, 2, 2), r"n_heads must be in \[1, 1024\], got 0"),
        ((1, 2, 1 << 17), r"n_k_blocks must be in \[1, 65536\], got 131072"),
        ((1024, 8192, 2), r"n_heads \* n_q_blocks must be <= 4,194,304 for a layout held as runs"),
    ],
)
def test_zeros_checks_the_shape_before_allocating(shape, message):
    assert Layout.zeros(2, 3, 4, 16).shape == (2, 3, 4)
    with pytest.raises(ValueError, match=message):
        Layout.zeros(*shape, 16)


def test_zeros_past_the_dense_cap_is_held_as_runs():
    layout = Layout.zeros(64, 2048, 2048, 16)
    assert layout.runs is not None and layout.nnz == 0 and layout.shape == (64, 2048, 2048)
    with pytest.raises(
        ValueError, match=r"held as row runs and has no dense blocks: use layout\.runs"
    ):
        _ = layout.blocks
    assert Layout.zeros(16, 2048, 2048, 16).runs is None  # at the cap: dense, as before


def test_layout_does_not_share_memory_with_input():
    source = torch.zeros(1, 2, 2, dtype=torch.bool)
    layout = Layout(source, 16)
    source[0, 0, 0] = True
    assert layout.nnz == 0


def test_algebra_matches_elementwise_logic(rng):
    a = random_layout(rng, n_heads=3, n_q_blocks=6, n_k_blocks=5)
    b = random_layout(rng, n_heads=3, n_q_blocks=6, n_k_blocks=5)
    x, y = a.blocks.numpy(), b.blocks.numpy()
    assert np.array_equal(a.union(b).blocks.numpy(), x | y)
    assert np.array_equal(a.intersection(b).blocks.numpy(), x & y)
    assert np.array_equal(a.difference(b).blocks.numpy(), x & ~y)
    assert np.array_equal(a.complement().blocks.numpy(), ~x)
    for h in range(3):
        for m in range(6):
            for n in range(5):
                assert a.causal_clip().blocks[h, m, n] == (x[h, m, n] and n <= m)
    assert np.array_equal(a.transpose().blocks.numpy(), x.transpose(0, 2, 1))


def test_one_head_operand_broadcasts(rng):
    a = random_layout(rng, n_heads=4)
    one = random_layout(rng, n_heads=1)
    assert np.array_equal(a.union(one).blocks.numpy(), a.blocks.numpy() | one.blocks.numpy())


def test_algebra_refuses_mismatches(rng):
    a = random_layout(rng, n_heads=2, block_size=16)
    with pytest.raises(ValueError, match="same block_size, got 16 and 32"):
        a.union(random_layout(rng, n_heads=2, block_size=32))
    with pytest.raises(ValueError, match=r"same \[q_blocks, k_blocks\], got \[8, 8\] and \[8, 4\]"):
        a.intersection(random_layout(rng, n_heads=2, n_k_blocks=4))
    with pytest.raises(ValueError, match="same number of heads"):
        a.difference(random_layout(rng, n_heads=3))
    with pytest.raises(TypeError, match="union needs a Layout, got Tensor"):
        a.union(a.blocks)


def test_with_heads_and_select_heads(rng):
    base = random_layout(rng, n_heads=4)
    source = random_layout(rng, n_heads=1)
    result = base.with_heads([1, 3], source)
    assert torch.equal(result.blocks[1], source.blocks[0])
    assert torch.equal(result.blocks[3], source.blocks[0])
    assert torch.equal(result.blocks[0], base.blocks[0])
    assert torch.equal(result.select_heads([3, 0]).blocks[1], base.blocks[0])
    with pytest.raises(ValueError, match=r"heads\[0\] must be in \[0, 3\], got 4"):
        base.with_heads([4], source)
    assert base.select_heads([2]).broadcast_heads(3).n_heads == 3


def test_token_mask_expands_blocks():
    layout = Layout(torch.tensor([[[1, 0], [0, 1]]]), 2)
    expected = torch.tensor(
        [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]], dtype=torch.bool
    )
    assert torch.equal(layout.token_mask(0), expected[None])
    assert torch.equal(layout.token_mask(), expected[None])


def test_equality_and_hash():
    a = Layout(torch.eye(3, dtype=torch.bool)[None], 16)
    assert a == Layout(torch.eye(3, dtype=torch.int64)[None], 16)
    assert hash(a) == hash(Layout(torch.eye(3, dtype=torch.int64)[None], 16))
    assert a != Layout(torch.eye(3, dtype=torch.bool)[None], 32)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 3), st.integers(1, 7), st.integers(1, 7), st.integers(0, 2**32 - 1))
def test_complement_is_an_involution_and_partitions(heads, m, n, seed):
    layout = random_layout(np.random.default_rng(seed), heads, m, n, density=0.5)
    assert layout.complement().complement() == layout
    assert layout.nnz + layout.complement().nnz == heads * m * n
    assert layout.union(layout.complement()).density == 1.0
