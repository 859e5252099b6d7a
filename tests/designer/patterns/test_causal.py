import pytest
from hypothesis import given

from designer.layout import Layout
from designer.patterns import causal
from tests.designer.patterns.reference import (
    PROPERTY,
    SHAPES,
    above_diagonal,
    assert_blocks,
    from_rule,
    shapes,
)


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_reference(shape):
    assert_blocks(causal(*shape), from_rule(*shape, lambda h, row, col: col <= row))


def test_picture():
    assert causal(1, 3, 4)[0].int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]]


@PROPERTY
@given(shapes())
def test_is_what_causal_clip_keeps_of_dense(shape):
    blocks = causal(*shape)
    assert above_diagonal(blocks) == 0
    dense = Layout.from_array(blocks | True, 16)
    assert_blocks(blocks, dense.causal_clip().blocks)
