import inspect
import random
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from designer.patterns import VariableSparsityConfig
from tests.designer.patterns.reference import PROPERTY, drawn_rows, grid


def layout_of(seq_blocks, **kwargs):
    return VariableSparsityConfig(kwargs.pop("num_heads", 1), **kwargs).make_layout(16 * seq_blocks)


def test_defaults():
    parameters = inspect.signature(VariableSparsityConfig).parameters
    defaults = {name: p.default for name, p in parameters.items() if name != "num_heads"}
    assert defaults == {
        "block": 16,
        "different_layout_per_head": False,
        "num_random_blocks": 0,
        "local_window_blocks": (4,),
        "global_block_indices": (0,),
        "global_block_end_indices": None,
        "attention": "bidirectional",
        "horizontal_global_attention": False,
    }
    config = VariableSparsityConfig(2)
    assert config.local_window_blocks == [4] and config.global_block_indices == [0]


def test_default_layout_repeats_the_last_window():
    assert torch.equal(layout_of(6)[0], grid(*["111100"] * 4, "100011", "100011"))


def test_listed_windows_then_horizontal_global():
    layout = layout_of(
        6, local_window_blocks=[1, 2], global_block_indices=[4], horizontal_global_attention=True
    )
    expected = grid("100010", "011010", "011010", "000110", "111111", "000011")
    assert torch.equal(layout[0], expected)


def test_unidirectional_global_span_starts_at_its_first_row():
    layout = layout_of(
        5,
        local_window_blocks=[2],
        global_block_indices=[1],
        global_block_end_indices=[3],
        attention="unidirectional",
    )
    assert torch.equal(layout[0], grid("10000", "11100", "01100", "01110", "01101"))


def test_zero_sized_windows_inside_the_list_are_skipped():
    layout = layout_of(4, local_window_blocks=[1, 0, 3], global_block_indices=[])
    assert torch.equal(layout[0], grid("1000", "0111", "0111", "0111"))


def test_global_indices_past_the_end_are_ignored():
    assert torch.equal(
        layout_of(4, global_block_indices=[0, 10]), layout_of(4, global_block_indices=[0])
    )


def test_empty_sequence():
    assert layout_of(0, num_heads=3).shape == (3, 0, 0)


@PROPERTY
@given(
    seed=st.integers(0, 2**32),
    n_heads=st.integers(1, 3),
    seq_blocks=st.integers(0, 9),
    count=st.integers(0, 3),
    different=st.booleans(),
    unidirectional=st.booleans(),
)
def test_random_blocks_are_the_documented_draws(
    seed, n_heads, seq_blocks, count, different, unidirectional
):
    count = min(count, seq_blocks)
    kwargs = {
        "different_layout_per_head": different,
        "local_window_blocks": [2, 3],
        "global_block_indices": [1],
        "attention": "unidirectional" if unidirectional else "bidirectional",
    }
    expected = VariableSparsityConfig(n_heads, block=4, **kwargs).make_layout(4 * seq_blocks)
    random.seed(seed)
    for h in range(n_heads if different else 1):
        expected[h] |= drawn_rows(seq_blocks, count)  # whole rows even when unidirectional
    if not different:
        expected[1:] = expected[0]
    state_after = random.getstate()

    random.seed(seed)
    config = VariableSparsityConfig(n_heads, block=4, num_random_blocks=count, **kwargs)
    assert torch.equal(config.make_layout(4 * seq_blocks), expected)
    assert random.getstate() == state_after


def test_unidirectional_random_blocks_may_land_above_the_diagonal():
    random.seed(3)
    layout = layout_of(16, num_random_blocks=8, attention="unidirectional")
    assert torch.triu(layout[0], diagonal=1).any()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"global_block_indices": [0, 4], "global_block_end_indices": [2], "attention": "x"},
            ValueError,
            "Global block start indices length, 2, must be same as global block end indices "
            "length, 1!",
        ),
        (
            {"global_block_indices": [0, 4], "global_block_end_indices": [2, 4], "attention": "x"},
            ValueError,
            "Global block start index, 4, must be smaller than global block end index, 4!",
        ),
        (
            {"attention": "causal", "horizontal_global_attention": True},
            NotImplementedError,
            'only "uni/bi-directional" attentions are supported for now!',
        ),
        (
            {"attention": "unidirectional", "horizontal_global_attention": True},
            ValueError,
            'only "bi-directional" attentions can support horizontal global attention!',
        ),
        ({"num_random_blocks": -1}, ValueError, "num_random_blocks must be >= 0, got -1"),
        ({"local_window_blocks": [2, -1]}, ValueError, "local_window_blocks[1] must be >= 0"),
        ({"global_block_indices": [-1]}, ValueError, "global_block_indices[0] must be >= 0"),
        ({"local_window_blocks": 4}, TypeError, "local_window_blocks must be a list of integers"),
        ({"global_block_end_indices": [1.5]}, TypeError, "global_block_end_indices[0] must be an"),
    ],
)
def test_constructor_checks_in_deepspeed_order(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        VariableSparsityConfig(4, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"num_random_blocks": 5},
            "Number of random blocks, 5, must be smaller than overall number of blocks in a "
            "row, 4!",
        ),
        ({"local_window_blocks": []}, "local_window_blocks must list at least one window size"),
        ({"local_window_blocks": [2, 0]}, "local_window_blocks must end with a size >= 1"),
    ],
)
def test_make_layout_checks_where_deepspeed_failed(kwargs, message):
    config = VariableSparsityConfig(2, **kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        config.make_layout(64)
