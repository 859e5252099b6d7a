import random
import re

import pytest
import torch

from designer.patterns import (
    BigBirdSparsityConfig,
    BSLongformerSparsityConfig,
    DenseSparsityConfig,
    FixedSparsityConfig,
    LocalSlidingWindowSparsityConfig,
    SparsityConfig,
    VariableSparsityConfig,
)
from designer.patterns.registry import make_pattern

SUBCLASSES = [
    DenseSparsityConfig,
    FixedSparsityConfig,
    VariableSparsityConfig,
    BigBirdSparsityConfig,
    BSLongformerSparsityConfig,
    LocalSlidingWindowSparsityConfig,
]


def test_stores_parameters_and_layout_heads():
    config = SparsityConfig(4)
    assert (config.num_heads, config.block, config.different_layout_per_head) == (4, 16, False)
    assert config.num_layout_heads == 1
    assert SparsityConfig(4, 32, True).num_layout_heads == 4


def test_setup_layout_is_int64_zeros():
    layout = SparsityConfig(3, block=8).setup_layout(40)
    assert layout.dtype == torch.int64 and layout.shape == (3, 5, 5) and not layout.any()
    assert SparsityConfig(2).setup_layout(0).shape == (2, 0, 0)


@pytest.mark.parametrize("seq_len", [1, 17, 100])
def test_setup_layout_needs_whole_blocks(seq_len):
    message = f"Sequence Length, {seq_len}, needs to be dividable by Block size 16!"
    with pytest.raises(ValueError, match=re.escape(message)):
        SparsityConfig(2).setup_layout(seq_len)


def test_base_class_has_no_make_layout():
    with pytest.raises(AttributeError):
        SparsityConfig(num_heads=4).make_layout(64)


def test_propagation_copies_head_zero_in_place():
    layout = torch.zeros(3, 2, 2, dtype=torch.int64)
    layout[0, 0, 1] = 1
    result = SparsityConfig(3).check_and_propagate_first_head_layout(layout)
    assert result is layout and layout[:, 0, 1].tolist() == [1, 1, 1] and layout.sum() == 3


def test_propagation_does_nothing_with_a_layout_per_head():
    layout = torch.zeros(3, 2, 2, dtype=torch.int64)
    layout[0, 0, 1] = 1
    SparsityConfig(3, different_layout_per_head=True).check_and_propagate_first_head_layout(layout)
    assert layout.sum() == 1


@pytest.mark.parametrize("different", [False, True])
def test_dense_is_all_ones(different):
    layout = DenseSparsityConfig(2, block=4, different_layout_per_head=different).make_layout(12)
    assert layout.dtype == torch.int64 and layout.shape == (2, 3, 3) and layout.all()
    assert DenseSparsityConfig(2).make_layout(0).shape == (2, 0, 0)


@pytest.mark.parametrize("config_class", SUBCLASSES, ids=lambda c: c.__name__)
def test_every_config_is_a_sparsity_config_and_checks_seq_len(config_class):
    config = config_class(2, block=8)
    assert isinstance(config, SparsityConfig) and config.block == 8
    with pytest.raises(ValueError, match=re.escape("Sequence Length, 20, needs to be dividable")):
        config.make_layout(20)


@pytest.mark.parametrize("config_class", SUBCLASSES, ids=lambda c: c.__name__)
def test_constructors_draw_no_randomness(config_class):
    state = random.getstate()
    config_class(2, block=8)
    assert random.getstate() == state


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: SparsityConfig(0), ValueError, r"num_heads must be >= 1, got 0"),
        (lambda: SparsityConfig(2.0), TypeError, r"num_heads must be an integer, got float"),
        (lambda: SparsityConfig(2, block=0), ValueError, r"block must be >= 1, got 0"),
        (lambda: SparsityConfig(2, "16"), TypeError, r"block must be an integer, got str"),
        (lambda: SparsityConfig(2, 16, 1), TypeError, r"different_layout_per_head must be True"),
        (lambda: SparsityConfig(2).setup_layout(32.0), TypeError, r"seq_len must be an integer"),
        (lambda: SparsityConfig(2).setup_layout(-32), ValueError, r"seq_len must be >= 0"),
        (lambda: SparsityConfig(2).setup_layout(-33), ValueError, r"Sequence Length, -33,"),
    ],
)
def test_argument_checks(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ------------------------------------------ the registry entries: global indices, shared layouts
@pytest.mark.parametrize("pattern", ["deepspeed_variable", "deepspeed_longformer"])
@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"global_block_indices": [8]}, r"global_block_indices\[0\] must be in \[0, 7\] .*got 8"),
        (
            {"global_block_indices": [0, 2], "global_block_end_indices": [1, 9]},
            r"global_block_end_indices\[1\] must be in \[0, 8\] .*got 9",
        ),
    ],
)
def test_global_indices_past_the_layout_are_refused(pattern, params, message):
    with pytest.raises(ValueError, match=message):
        make_pattern(pattern, 2, 8, 8, 16, params)


def test_global_indices_inside_the_layout_still_work():
    layout = make_pattern("deepspeed_longformer", 1, 8, 8, 16, {"global_block_indices": [7]})
    assert layout.blocks[0, 7].all() and layout.blocks[0, :, 7].all()


@pytest.mark.parametrize("different", [False, True])
@pytest.mark.parametrize(
    ("pattern", "config_class"),
    [("deepspeed_bigbird", BigBirdSparsityConfig), ("deepspeed_variable", VariableSparsityConfig)],
)
def test_shared_and_per_head_layouts_equal_deepspeed(different, pattern, config_class):
    """Building one head and broadcasting it gives DeepSpeed's layout and draws."""
    params = {"num_random_blocks": 2, "different_layout_per_head": different, "seed": 7}
    made = make_pattern(pattern, 3, 8, 8, 16, params)
    random.seed(7)
    expected = config_class(
        3, 16, different_layout_per_head=different, num_random_blocks=2
    ).make_layout(128)
    assert torch.equal(made.blocks, expected.bool())
