import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from designer.patterns import dilated_window, sliding_window
from tests.designer.patterns.reference import (
    PROPERTY,
    SHAPES,
    above_diagonal,
    assert_blocks,
    from_rule,
    of_head,
    shapes,
)


def reference(shape, window_blocks, dilation, causal):
    """Offsets 0, dilation, ..., (window_blocks - 1) * dilation back (and forward if not causal)."""

    def rule(h, row, col):
        window, step = of_head(window_blocks, h), of_head(dilation, h)
        reach = {k * step for k in range(window)}
        if causal:
            return row - col in reach
        return row - col in reach or col - row in reach

    return from_rule(*shape, rule)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("window_blocks", "dilation"), [(1, 1), (2, 2), (3, 2), (2, 3), (9, 4)])
@pytest.mark.parametrize("is_causal", [True, False])
def test_matches_reference(shape, window_blocks, dilation, is_causal):
    actual = dilated_window(
        *shape, window_blocks=window_blocks, dilation=dilation, causal=is_causal
    )
    assert_blocks(actual, reference(shape, window_blocks, dilation, is_causal))


def test_window_and_dilation_per_head():
    windows, dilations = [2, 3], [3, 1]
    actual = dilated_window(2, 9, 7, window_blocks=windows, dilation=dilations, causal=False)
    assert_blocks(actual, reference((2, 9, 7), windows, dilations, False))


def test_picture():
    assert dilated_window(1, 5, 5, window_blocks=2, dilation=2)[0].int().tolist() == [
        [1, 0, 0, 0, 0],
        [0, 1, 0, 0, 0],
        [1, 0, 1, 0, 0],
        [0, 1, 0, 1, 0],
        [0, 0, 1, 0, 1],
    ]


@PROPERTY
@given(shapes(), st.integers(1, 6), st.booleans())
def test_dilation_one_is_the_sliding_window(shape, window, is_causal):
    dilated = dilated_window(*shape, window_blocks=window, dilation=1, causal=is_causal)
    plain = sliding_window(*shape, window_blocks=window, causal=is_causal)
    assert torch.equal(dilated, plain)


@PROPERTY
@given(shapes(), st.integers(1, 6), st.integers(1, 5))
def test_causal_rows_have_at_most_window_blocks(shape, window, dilation):
    blocks = dilated_window(*shape, window_blocks=window, dilation=dilation)
    assert above_diagonal(blocks) == 0
    assert int(blocks.sum(dim=2).max()) <= window


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"window_blocks": 0, "dilation": 1}, ValueError, r"window_blocks must be in \[1, 65536\]"),
        (
            {"window_blocks": 2, "dilation": 0},
            ValueError,
            r"dilation must be in \[1, 65536\], got 0",
        ),
        ({"window_blocks": 2, "dilation": [1]}, ValueError, r"dilation must be one value or one"),
        ({"window_blocks": 2, "dilation": "2"}, TypeError, r"dilation must be an integer, got str"),
        ({"window_blocks": 2, "dilation": 2, "causal": None}, TypeError, r"causal must be True"),
    ],
)
def test_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        dilated_window(2, 4, 4, **kwargs)
