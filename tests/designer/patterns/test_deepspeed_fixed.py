import inspect
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from designer.patterns import FixedSparsityConfig
from tests.designer.patterns.reference import PROPERTY, grid


def layout_of(seq_blocks, **kwargs):
    return FixedSparsityConfig(kwargs.pop("num_heads", 1), **kwargs).make_layout(16 * seq_blocks)


def test_defaults():
    defaults = {
        name: p.default for name, p in inspect.signature(FixedSparsityConfig).parameters.items()
    }
    assert defaults == {
        "num_heads": inspect.Parameter.empty,
        "block": 16,
        "different_layout_per_head": False,
        "num_local_blocks": 4,
        "num_global_blocks": 1,
        "attention": "bidirectional",
        "horizontal_global_attention": False,
        "num_different_global_patterns": 1,
    }
    config = FixedSparsityConfig(2)
    assert (config.num_local_blocks, config.num_global_blocks, config.attention) == (
        4,
        1,
        "bidirectional",
    )


def test_bidirectional_windows_and_last_block_global():
    expected = grid(*["11110001"] * 4, *["00011111"] * 4)
    assert torch.equal(layout_of(8)[0], expected)


def test_unidirectional_global_columns_start_at_their_row():
    expected = grid(
        "10000000",
        "11000000",
        "11100000",
        "11110000",
        "00011000",
        "00011100",
        "00011110",
        "00011111",
    )
    assert torch.equal(layout_of(8, attention="unidirectional")[0], expected)


def test_horizontal_global_rows():
    expected = grid("1101", "1111", "0111", "1111")
    layout = layout_of(4, num_local_blocks=2, horizontal_global_attention=True)
    assert torch.equal(layout[0], expected)


def test_global_patterns_rotate_over_heads():
    layout = layout_of(
        8, num_heads=3, different_layout_per_head=True, num_different_global_patterns=2
    )
    assert torch.equal(layout[0], grid(*["11110001"] * 4, *["00011111"] * 4))
    assert torch.equal(layout[1], grid(*["11110010"] * 4, *["00101111"] * 4))
    assert torch.equal(layout[2], layout[0])


def test_short_last_window_gets_its_global_blocks_pushed_left():
    expected = grid(*["111111"] * 4, "001111", "001111")
    assert torch.equal(layout_of(6, num_global_blocks=2)[0], expected)
    uni = layout_of(3, num_global_blocks=2, attention="unidirectional")[0]
    assert torch.equal(uni, grid("100", "111", "111"))


def test_fewer_blocks_than_global_blocks_wraps_like_a_python_slice():
    # start = min(0, 3 - 4) = -1: DeepSpeed's slice [-1:] sets only the last row.
    layout = layout_of(3, num_global_blocks=4, attention="unidirectional")[0]
    assert torch.equal(layout, grid("100", "110", "111"))


@PROPERTY
@given(
    st.integers(1, 4),
    st.sampled_from([(1, 1), (2, 1), (4, 2), (6, 3), (6, 2), (4, 4)]),
    st.booleans(),
    st.integers(0, 14),
)
def test_heads_propagate_int64_square(n_heads, sizes, unidirectional, seq_blocks):
    local, global_ = sizes
    config = FixedSparsityConfig(
        n_heads,
        block=4,
        num_local_blocks=local,
        num_global_blocks=global_,
        attention="unidirectional" if unidirectional else "bidirectional",
    )
    layout = config.make_layout(4 * seq_blocks)
    assert layout.dtype == torch.int64 and layout.shape == (n_heads, seq_blocks, seq_blocks)
    assert set(layout.unique().tolist()) <= {0, 1}
    assert all(torch.equal(layout[h], layout[0]) for h in range(n_heads))
    if seq_blocks:
        assert layout[0].diagonal().all()


ERRORS = [
    (
        {"num_local_blocks": 4, "num_global_blocks": 3, "attention": "x"},
        ValueError,
        "Number of blocks in a local window, 4, must be dividable by number of global blocks, 3!",
    ),
    (
        {"num_global_blocks": 0, "attention": "x"},
        ValueError,
        "num_global_blocks must be >= 1, got 0",
    ),
    (
        {"attention": "causal", "horizontal_global_attention": True},
        NotImplementedError,
        'only "uni/bi-directional" attentions are supported for now!',
    ),
    (
        {
            "attention": "unidirectional",
            "horizontal_global_attention": True,
            "num_different_global_patterns": 9,
        },
        ValueError,
        'only "bi-directional" attentions can support horizontal global attention!',
    ),
    (
        {"num_different_global_patterns": 9},
        ValueError,
        "Number of different layouts cannot be more than one when you have set a single layout "
        "for all heads! Set different_layout_per_head to True.",
    ),
    (
        {
            "different_layout_per_head": True,
            "num_local_blocks": 4,
            "num_global_blocks": 2,
            "num_different_global_patterns": 3,
        },
        ValueError,
        "Number of layout versions (num_different_global_patterns), 3, cannot be larger than "
        "number of local window blocks divided by number of global blocks, 4 / 2 = 2!",
    ),
    (
        {"num_local_blocks": 0},
        ValueError,
        "Number of layout versions (num_different_global_patterns), 1,",
    ),
    (
        {"num_local_blocks": -4, "num_global_blocks": -2},
        ValueError,
        "num_local_blocks must be >= 1, got -4",
    ),
    (
        {"num_different_global_patterns": 0},
        ValueError,
        "num_different_global_patterns must be >= 1, got 0",
    ),
    ({"num_local_blocks": 4.0}, TypeError, "num_local_blocks must be an integer, got float 4.0"),
    (
        {"horizontal_global_attention": 1},
        TypeError,
        "horizontal_global_attention must be True or False",
    ),
]


@pytest.mark.parametrize(("kwargs", "error", "message"), ERRORS)
def test_checks_in_deepspeed_order(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        FixedSparsityConfig(4, **kwargs)
