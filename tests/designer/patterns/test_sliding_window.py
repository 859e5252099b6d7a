import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from designer.patterns import causal, sliding_window
from tests.designer.patterns.reference import (
    PROPERTY,
    SHAPES,
    above_diagonal,
    assert_blocks,
    from_rule,
    of_head,
    shapes,
)


def reference(shape, window_blocks, causal):
    def rule(h, row, col):
        window = of_head(window_blocks, h)
        if causal:
            return 0 <= row - col < window
        return abs(row - col) < window

    return from_rule(*shape, rule)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("window_blocks", [1, 2, 3, 100])
@pytest.mark.parametrize("is_causal", [True, False])
def test_matches_reference(shape, window_blocks, is_causal):
    actual = sliding_window(*shape, window_blocks=window_blocks, causal=is_causal)
    assert_blocks(actual, reference(shape, window_blocks, is_causal))


@pytest.mark.parametrize("is_causal", [True, False])
def test_window_per_head(is_causal):
    windows = [1, 3, 2]
    actual = sliding_window(3, 6, 9, window_blocks=windows, causal=is_causal)
    assert_blocks(actual, reference((3, 6, 9), windows, is_causal))


def test_picture():
    assert sliding_window(1, 4, 4, window_blocks=2, causal=False)[0].int().tolist() == [
        [1, 1, 0, 0],
        [1, 1, 1, 0],
        [0, 1, 1, 1],
        [0, 0, 1, 1],
    ]


@PROPERTY
@given(shapes(), st.integers(1, 14), st.booleans())
def test_window_grows_monotonically(shape, window, is_causal):
    smaller = sliding_window(*shape, window_blocks=window, causal=is_causal)
    larger = sliding_window(*shape, window_blocks=window + 1, causal=is_causal)
    assert not (smaller & ~larger).any()
    if is_causal:
        assert above_diagonal(larger) == 0
    elif shape[1] == shape[2]:
        assert torch.equal(larger, larger.transpose(1, 2))


@PROPERTY
@given(shapes())
def test_a_window_over_the_whole_grid_is_causal_or_dense(shape):
    whole = max(shape[1:])
    assert torch.equal(sliding_window(*shape, window_blocks=whole), causal(*shape))
    assert sliding_window(*shape, window_blocks=whole, causal=False).all()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"window_blocks": 0}, ValueError, r"window_blocks must be in \[1, 65536\], got 0"),
        ({"window_blocks": 1.5}, TypeError, r"window_blocks must be an integer, got float 1.5"),
        ({"window_blocks": [1, 2, 3]}, ValueError, r"one per head \(2\), got 3 values"),
        ({"window_blocks": [1, -1]}, ValueError, r"window_blocks\[1\] must be in \[1, 65536\]"),
        ({"window_blocks": 2, "causal": 1}, TypeError, r"causal must be True or False, got int"),
    ],
)
def test_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        sliding_window(2, 4, 4, **kwargs)
