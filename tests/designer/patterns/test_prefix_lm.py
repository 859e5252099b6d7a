import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from designer.patterns import causal, prefix_lm
from tests.designer.patterns.reference import (
    PROPERTY,
    SHAPES,
    assert_blocks,
    from_rule,
    of_head,
    shapes,
)


def reference(shape, prefix_blocks):
    def rule(h, row, col):
        prefix = of_head(prefix_blocks, h)
        both_in_prefix = row < prefix and col < prefix
        return both_in_prefix or col <= row or col < prefix

    return from_rule(*shape, rule)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("prefix_blocks", [0, 1, 2, 5, 100])
def test_matches_reference(shape, prefix_blocks):
    assert_blocks(prefix_lm(*shape, prefix_blocks=prefix_blocks), reference(shape, prefix_blocks))


def test_prefix_per_head():
    assert_blocks(prefix_lm(2, 6, 4, prefix_blocks=[3, 0]), reference((2, 6, 4), [3, 0]))


@PROPERTY
@given(shapes(), st.integers(0, 12))
def test_prefix_is_bidirectional_and_the_rest_causal(shape, prefix):
    blocks = prefix_lm(*shape, prefix_blocks=prefix)
    inside = min(prefix, shape[1], shape[2])
    assert blocks[:, :inside, :inside].all()
    assert torch.equal(blocks[:, :, prefix:], causal(*shape)[:, :, prefix:])
    assert torch.equal(prefix_lm(*shape, prefix_blocks=0), causal(*shape))


@pytest.mark.parametrize(
    ("prefix_blocks", "error", "message"),
    [
        (-1, ValueError, r"prefix_blocks must be in \[0, 65536\], got -1"),
        ([1, 2, 3], ValueError, r"prefix_blocks must be one value or one per head \(2\)"),
        (True, TypeError, r"prefix_blocks must be an integer, got bool"),
    ],
)
def test_errors(prefix_blocks, error, message):
    with pytest.raises(error, match=message):
        prefix_lm(2, 4, 4, prefix_blocks=prefix_blocks)
