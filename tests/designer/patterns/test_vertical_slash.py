import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from designer.patterns import sliding_window, vertical_slash
from tests.designer.patterns.reference import (
    PROPERTY,
    SHAPES,
    above_diagonal,
    assert_blocks,
    from_rule,
    shapes,
)


def reference(shape, vertical_blocks, slash_offsets, causal):
    def rule(h, row, col):
        hit = col in vertical_blocks or row - col in slash_offsets
        return hit and (col <= row or not causal)

    return from_rule(*shape, rule)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("is_causal", [True, False])
def test_matches_reference(shape, is_causal):
    n_q, n_k = shape[1:]
    for vertical, offsets in [
        ([0], [0]),
        ([n_k - 1], []),
        ([], [n_q - 1]),
        (sorted({0, n_k // 2}), sorted({0, n_q // 2, n_q - 1})),
    ]:
        actual = vertical_slash(
            *shape, vertical_blocks=vertical, slash_offsets=offsets, causal=is_causal
        )
        assert_blocks(actual, reference(shape, vertical, offsets, is_causal))


def test_negative_offsets_reach_above_the_diagonal():
    actual = vertical_slash(1, 3, 5, vertical_blocks=[], slash_offsets=[-2], causal=False)
    assert actual[0].int().tolist() == [[0, 0, 1, 0, 0], [0, 0, 0, 1, 0], [0, 0, 0, 0, 1]]


@PROPERTY
@given(shapes(), st.integers(1, 6))
def test_consecutive_slashes_are_a_causal_window(shape, window):
    offsets = list(range(min(window, shape[1])))
    blocks = vertical_slash(*shape, vertical_blocks=[], slash_offsets=offsets)
    assert torch.equal(blocks, sliding_window(*shape, window_blocks=len(offsets)))


@PROPERTY
@given(shapes(), st.data())
def test_causal_verticals_stay_on_or_below_the_diagonal(shape, data):
    columns = data.draw(st.lists(st.integers(0, shape[2] - 1), max_size=4))
    blocks = vertical_slash(*shape, vertical_blocks=columns, slash_offsets=[0])
    assert above_diagonal(blocks) == 0
    for col in columns:
        assert blocks[:, col:, col].all()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"vertical_blocks": [5], "slash_offsets": [0]},
            ValueError,
            r"vertical_blocks\[0\] must be in \[0, 4\], got 5",
        ),
        (
            {"vertical_blocks": [], "slash_offsets": [-1]},
            ValueError,
            r"slash_offsets must be >= 0 when causal: offsets are row - col, so -1 lies above",
        ),
        (
            {"vertical_blocks": [], "slash_offsets": [3]},
            ValueError,
            r"slash_offsets\[0\] must be in \[-4, 2\], got 3",
        ),
        (
            {"vertical_blocks": [], "slash_offsets": [-5], "causal": False},
            ValueError,
            r"slash_offsets\[0\] must be in \[-4, 2\], got -5",
        ),
        ({"vertical_blocks": [], "slash_offsets": []}, ValueError, r"must not both be empty"),
        (
            {"vertical_blocks": 0, "slash_offsets": [0]},
            TypeError,
            r"vertical_blocks must be a list",
        ),
        (
            {"vertical_blocks": [0], "slash_offsets": "0"},
            TypeError,
            r"slash_offsets must be a list",
        ),
        ({"vertical_blocks": [0], "slash_offsets": [0], "causal": 0}, TypeError, r"causal must be"),
    ],
)
def test_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        vertical_slash(1, 3, 5, **kwargs)
