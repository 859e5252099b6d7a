import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from designer.patterns import block_diagonal, causal
from tests.designer.patterns.reference import (
    PROPERTY,
    SHAPES,
    assert_blocks,
    from_rule,
    of_head,
    shapes,
)


def reference(shape, chunk_blocks, causal):
    def rule(h, row, col):
        chunk = of_head(chunk_blocks, h)
        first = row - row % chunk  # first block of the query's chunk
        return first <= col < first + chunk and (col <= row or not causal)

    return from_rule(*shape, rule)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("chunk_blocks", [1, 2, 3, 50])
@pytest.mark.parametrize("is_causal", [False, True])
def test_matches_reference(shape, chunk_blocks, is_causal):
    actual = block_diagonal(*shape, chunk_blocks=chunk_blocks, causal=is_causal)
    assert_blocks(actual, reference(shape, chunk_blocks, is_causal))


def test_chunks_per_head():
    actual = block_diagonal(2, 7, 5, chunk_blocks=[2, 3], causal=True)
    assert_blocks(actual, reference((2, 7, 5), [2, 3], True))


@PROPERTY
@given(shapes(), st.integers(1, 6))
def test_chunks_partition_the_square(shape, chunk):
    blocks = block_diagonal(*shape, chunk_blocks=chunk)
    if shape[1] == shape[2]:
        assert torch.equal(blocks, blocks.transpose(1, 2))
    whole = block_diagonal(*shape, chunk_blocks=max(shape[1:]), causal=True)
    assert torch.equal(whole, causal(*shape))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"chunk_blocks": 0}, ValueError, r"chunk_blocks must be in \[1, 65536\], got 0"),
        ({"chunk_blocks": [2, 0]}, ValueError, r"chunk_blocks\[1\] must be in \[1, 65536\]"),
        ({"chunk_blocks": None}, TypeError, r"chunk_blocks must be an integer, got NoneType"),
        ({"chunk_blocks": 2, "causal": "no"}, TypeError, r"causal must be True or False"),
    ],
)
def test_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        block_diagonal(2, 4, 4, **kwargs)
