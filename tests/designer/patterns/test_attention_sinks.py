import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from designer.patterns import attention_sinks, sliding_window
from tests.designer.patterns.reference import (
    PROPERTY,
    SHAPES,
    above_diagonal,
    assert_blocks,
    from_rule,
    of_head,
    shapes,
)


def reference(shape, sink_blocks, window_blocks):
    def rule(h, row, col):
        in_sink = col < of_head(sink_blocks, h)
        in_window = row - col < of_head(window_blocks, h)
        return col <= row and (in_sink or in_window)

    return from_rule(*shape, rule)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("sink_blocks", "window_blocks"), [(0, 1), (1, 1), (1, 3), (2, 2), (9, 9)])
def test_matches_reference(shape, sink_blocks, window_blocks):
    actual = attention_sinks(*shape, sink_blocks=sink_blocks, window_blocks=window_blocks)
    assert_blocks(actual, reference(shape, sink_blocks, window_blocks))


def test_per_head():
    sinks, windows = [0, 2, 1], [3, 1, 2]
    actual = attention_sinks(3, 7, 5, sink_blocks=sinks, window_blocks=windows)
    assert_blocks(actual, reference((3, 7, 5), sinks, windows))


@PROPERTY
@given(shapes(), st.integers(0, 5), st.integers(1, 5))
def test_is_a_causal_window_plus_sink_columns(shape, sinks, window):
    blocks = attention_sinks(*shape, sink_blocks=sinks, window_blocks=window)
    assert above_diagonal(blocks) == 0
    window_only = sliding_window(*shape, window_blocks=window)
    assert torch.equal(blocks[:, :, sinks:], window_only[:, :, sinks:])
    assert not (window_only & ~blocks).any()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"sink_blocks": -1, "window_blocks": 1},
            ValueError,
            r"sink_blocks must be in \[0, 65536\]",
        ),
        (
            {"sink_blocks": 1, "window_blocks": 0},
            ValueError,
            r"window_blocks must be in \[1, 65536\]",
        ),
        ({"sink_blocks": [1], "window_blocks": 1}, ValueError, r"sink_blocks must be one value or"),
        ({"sink_blocks": 1.0, "window_blocks": 1}, TypeError, r"sink_blocks must be an integer"),
    ],
)
def test_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        attention_sinks(2, 4, 4, **kwargs)
