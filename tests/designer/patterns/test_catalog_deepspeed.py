"""The DeepSpeed registry entries: global indices checked, shared layouts built once."""

import random

import pytest
import torch

from designer.patterns import BigBirdSparsityConfig, VariableSparsityConfig
from designer.patterns.registry import make_pattern


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
