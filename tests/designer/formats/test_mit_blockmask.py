import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.formats import MIT_BLOCK_SIZE, from_base_blockmask, to_base_blockmask
from tests.factories import random_layout


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(1, 6),
    st.integers(1, 6),
    st.integers(1, 3),
    st.integers(0, 2**32 - 1),
)
def test_round_trip_is_exact_and_every_batch_entry_is_the_layout(h, m, n, batch, seed):
    layout = random_layout(np.random.default_rng(seed), h, m, n, block_size=128)
    mask = to_base_blockmask(layout, batch_size=batch)
    assert mask.dtype == torch.bool and mask.shape == (batch, h, m, n) and mask.is_contiguous()
    for b in range(batch):
        for head in range(h):
            for r in range(m):
                for c in range(n):
                    assert bool(mask[b, head, r, c]) == bool(layout.blocks[head, r, c])
    assert from_base_blockmask(mask) == layout


def test_integer_masks_and_their_block_size(rng):
    layout = random_layout(rng, block_size=128)
    assert MIT_BLOCK_SIZE == 128
    assert from_base_blockmask(layout.blocks[None].to(torch.int32)) == layout
    mask = to_base_blockmask(layout)
    mask[0, 0, 0, 0] = not mask[0, 0, 0, 0]
    assert layout.blocks[0, 0, 0] != mask[0, 0, 0, 0], "the mask must not share the layout's memory"


def test_other_block_sizes_are_refused(rng):
    with pytest.raises(ValueError, match="uses 128-token blocks; the layout has block_size 64"):
        to_base_blockmask(random_layout(rng, block_size=64))


@pytest.mark.parametrize(
    ("mask", "error", "message"),
    [
        (np.ones((1, 1, 2, 2)), TypeError, "base_blockmask must be a torch tensor, got ndarray"),
        (torch.ones(2, 2, 2, dtype=torch.bool), ValueError, r"rank 4 \[batch, heads, q_blocks"),
        (torch.ones(1, 1, 2, 2), TypeError, r"base_blockmask\[0\]: layout must hold integers"),
        (torch.full((1, 1, 2, 2), 2), ValueError, r"base_blockmask\[0\]: layout must hold only 0"),
        (torch.ones(0, 1, 2, 2, dtype=torch.bool), ValueError, r"batch must be in \[1, 4096\]"),
        (torch.tensor([[[[1]]], [[[0]]], [[[1]]]]), ValueError, "entry 1 differs from entry 0"),
        (torch.tensor([[[[1]]], [[[1]]], [[[2]]]]), ValueError, "entry 2 differs from entry 0"),
    ],
)
def test_bad_masks_are_refused(mask, error, message):
    with pytest.raises(error, match=message):
        from_base_blockmask(mask)


def test_bad_arguments_are_refused(rng):
    layout = random_layout(rng, block_size=128)
    with pytest.raises(ValueError, match=r"batch_size must be in \[1, 4096\], got 0"):
        to_base_blockmask(layout, batch_size=0)
    with pytest.raises(TypeError, match="layout must be a Layout, got Tensor"):
        to_base_blockmask(layout.blocks)
