import inspect
import random
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from designer.patterns import (
    BigBirdSparsityConfig,
    BSLongformerSparsityConfig,
    LocalSlidingWindowSparsityConfig,
)
from tests.designer.patterns.reference import PROPERTY, drawn_rows, grid


def defaults_of(config_class):
    parameters = inspect.signature(config_class).parameters
    return {name: p.default for name, p in parameters.items() if name != "num_heads"}


# ----------------------------------------------------------------------------------- BigBird
def test_bigbird_defaults():
    assert defaults_of(BigBirdSparsityConfig) == {
        "block": 16,
        "different_layout_per_head": False,
        "num_random_blocks": 1,
        "num_sliding_window_blocks": 3,
        "num_global_blocks": 1,
        "attention": "bidirectional",
    }


def test_bigbird_window_and_global_blocks():
    layout = BigBirdSparsityConfig(1, num_random_blocks=0).make_layout(64)[0]
    assert torch.equal(layout, grid("1111", "1110", "1111", "1011"))


def test_bigbird_unidirectional_is_the_lower_triangle_of_the_whole_layout():
    layout = BigBirdSparsityConfig(1, num_random_blocks=0, attention="unidirectional")
    assert torch.equal(layout.make_layout(64)[0], grid("1000", "1100", "1110", "1011"))


def test_even_window_acts_one_wider():
    config = BigBirdSparsityConfig(
        1, num_random_blocks=0, num_sliding_window_blocks=2, num_global_blocks=0
    )
    assert torch.equal(config.make_layout(64)[0], grid("1100", "1110", "0111", "0011"))


@PROPERTY
@given(
    seed=st.integers(0, 2**32),
    n_heads=st.integers(1, 3),
    seq_blocks=st.integers(3, 9),
    different=st.booleans(),
    unidirectional=st.booleans(),
    count=st.integers(0, 3),
)
def test_bigbird_random_blocks_are_the_documented_draws(
    seed, n_heads, seq_blocks, different, unidirectional, count
):
    count = min(count, 1) if unidirectional else count
    kwargs = {
        "different_layout_per_head": different,
        "attention": "unidirectional" if unidirectional else "bidirectional",
    }
    expected = BigBirdSparsityConfig(n_heads, 4, num_random_blocks=0, **kwargs).make_layout(
        4 * seq_blocks
    )
    random.seed(seed)
    for h in range(n_heads if different else 1):
        expected[h] |= drawn_rows(seq_blocks, count, causal=unidirectional)
    if not different:
        expected[1:] = expected[0]
    state_after = random.getstate()

    random.seed(seed)
    config = BigBirdSparsityConfig(n_heads, 4, num_random_blocks=count, **kwargs)
    assert torch.equal(config.make_layout(4 * seq_blocks), expected)
    assert random.getstate() == state_after


def test_bigbird_unidirectional_random_blocks_stay_causal():
    random.seed(0)
    layout = BigBirdSparsityConfig(2, num_random_blocks=1, attention="unidirectional")
    assert not torch.triu(layout.make_layout(256), diagonal=1).any()


def test_bigbird_one_block_sequence_fails_on_the_default_window():
    message = (
        "Number of sliding window blocks, 3, must be smaller than overall number of blocks in a "
        "row, 1!"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        BigBirdSparsityConfig(2).make_layout(16)


@pytest.mark.parametrize(
    ("kwargs", "seq_blocks", "error", "message"),
    [
        ({"attention": "causal"}, 4, NotImplementedError, 'only "uni/bi-directional" attentions'),
        (
            {"num_random_blocks": 5, "num_sliding_window_blocks": 5, "num_global_blocks": 5},
            4,
            ValueError,
            "Number of random blocks, 5, must be smaller than overall number of blocks in a "
            "row, 4!",
        ),
        (
            {"num_random_blocks": 2, "attention": "unidirectional", "num_sliding_window_blocks": 9},
            4,
            ValueError,
            "num_random_blocks must be <= 1 with unidirectional attention",
        ),
        (
            {"num_sliding_window_blocks": 5, "num_global_blocks": 5},
            4,
            ValueError,
            "Number of sliding window blocks, 5, must be smaller than overall number of blocks",
        ),
        (
            {"num_global_blocks": 5},
            4,
            ValueError,
            "Number of global blocks, 5, must be smaller than overall number of blocks in a "
            "row, 4!",
        ),
        ({}, 0, ValueError, "Number of random blocks, 1, must be smaller than"),
        ({"num_global_blocks": -1}, 4, ValueError, "num_global_blocks must be >= 0, got -1"),
        ({"num_random_blocks": -1}, 4, ValueError, "num_random_blocks must be >= 0, got -1"),
        ({"num_sliding_window_blocks": 3.0}, 4, TypeError, "num_sliding_window_blocks must be an"),
    ],
)
def test_bigbird_checks_in_deepspeed_order(kwargs, seq_blocks, error, message):
    with pytest.raises(error, match=re.escape(message)):
        BigBirdSparsityConfig(2, **kwargs).make_layout(16 * seq_blocks)


def test_bigbird_empty_sequence_without_random_window_or_global_blocks():
    config = BigBirdSparsityConfig(
        3, num_random_blocks=0, num_sliding_window_blocks=0, num_global_blocks=0
    )
    assert config.make_layout(0).shape == (3, 0, 0)


# ----------------------------------------------------------------------------------- Longformer
def test_longformer_defaults():
    assert defaults_of(BSLongformerSparsityConfig) == {
        "block": 16,
        "different_layout_per_head": False,
        "num_sliding_window_blocks": 3,
        "global_block_indices": (0,),
        "global_block_end_indices": None,
        "attention": "bidirectional",
    }


def test_longformer_global_rows_and_columns():
    layout = BSLongformerSparsityConfig(2, global_block_indices=[2, 9]).make_layout(80)
    expected = grid("11100", "11100", "11111", "00111", "00111")
    assert torch.equal(layout[0], expected) and torch.equal(layout[1], expected)


@pytest.mark.parametrize(
    ("attention", "expected"),
    [
        ("bidirectional", grid("11100", "11111", "11111", "01110", "01101")),
        ("anything else", grid("11100", "11111", "11111", "01110", "01101")),
        ("unidirectional", grid("10000", "11000", "11100", "01110", "01101")),
    ],
)
def test_longformer_spans_and_unchecked_attention(attention, expected):
    config = BSLongformerSparsityConfig(
        1,
        num_sliding_window_blocks=1,
        global_block_indices=[1],
        global_block_end_indices=[3],
        attention=attention,
    )
    assert torch.equal(config.make_layout(80)[0], expected)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"global_block_indices": [0], "global_block_end_indices": [], "attention": 7},
            ValueError,
            "Global block start indices length, 1, must be same as global block end indices "
            "length, 0!",
        ),
        (
            {"global_block_indices": [3], "global_block_end_indices": [2]},
            ValueError,
            "Global block start index, 3, must be smaller than global block end index, 2!",
        ),
        (
            {"num_sliding_window_blocks": -1},
            ValueError,
            "num_sliding_window_blocks must be >= 0",
        ),
        ({"global_block_indices": [-2]}, ValueError, "global_block_indices[0] must be >= 0"),
        ({"global_block_indices": 0}, TypeError, "global_block_indices must be a list of integers"),
    ],
)
def test_longformer_constructor_checks(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        BSLongformerSparsityConfig(2, **kwargs)


def test_longformer_window_must_fit():
    message = "Number of sliding window blocks, 3, must be smaller than overall number of blocks"
    with pytest.raises(ValueError, match=re.escape(message)):
        BSLongformerSparsityConfig(2).make_layout(32)


# ----------------------------------------------------------------------------- LocalSlidingWindow
def test_local_sliding_window_defaults_and_single_layout():
    assert defaults_of(LocalSlidingWindowSparsityConfig) == {
        "block": 16,
        "num_sliding_window_blocks": 3,
        "attention": "unidirectional",
    }
    config = LocalSlidingWindowSparsityConfig(3)
    assert not config.different_layout_per_head and config.num_layout_heads == 1


def test_local_sliding_window_has_no_layout_per_head_parameter():
    with pytest.raises(TypeError):
        LocalSlidingWindowSparsityConfig(4, different_layout_per_head=True)


@pytest.mark.parametrize(
    ("attention", "expected"),
    [
        ("unidirectional", grid("100000", "110000", "111000", "011100", "001110", "000111")),
        ("other", grid("100000", "110000", "111000", "011100", "001110", "000111")),
        ("bidirectional", grid("111000", "111100", "111110", "011111", "001111", "000111")),
    ],
)
def test_local_sliding_window_of_four(attention, expected):
    config = LocalSlidingWindowSparsityConfig(2, num_sliding_window_blocks=4, attention=attention)
    layout = config.make_layout(96)
    assert layout.dtype == torch.int64
    assert torch.equal(layout[0], expected) and torch.equal(layout[1], expected)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: LocalSlidingWindowSparsityConfig(2).make_layout(0),
            ValueError,
            "Number of sliding window blocks, 3, must be smaller than overall number of blocks in "
            "a row, 0!",
        ),
        (
            lambda: LocalSlidingWindowSparsityConfig(2, num_sliding_window_blocks=-3),
            ValueError,
            "num_sliding_window_blocks must be >= 0, got -3",
        ),
        (
            lambda: LocalSlidingWindowSparsityConfig(2, 16, True),
            TypeError,
            "num_sliding_window_blocks must be an integer, got bool",
        ),
    ],
)
def test_local_sliding_window_checks(call, error, message):
    with pytest.raises(error, match=re.escape(message)):
        call()
