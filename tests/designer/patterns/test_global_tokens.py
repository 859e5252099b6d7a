import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from designer.patterns import global_tokens
from tests.designer.patterns.reference import PROPERTY, SHAPES, assert_blocks, from_rule, shapes


def reference(shape, global_blocks, rows, columns):
    def rule(h, row, col):
        return (rows and row in global_blocks) or (columns and col in global_blocks)

    return from_rule(*shape, rule)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("rows", "columns"), [(True, True), (True, False), (False, True)])
def test_matches_reference(shape, rows, columns):
    last = min(shape[1] if rows else shape[2], shape[2] if columns else shape[1]) - 1
    for global_blocks in ([0], [last], sorted({0, last // 2, last})):
        actual = global_tokens(*shape, global_blocks=global_blocks, rows=rows, columns=columns)
        assert_blocks(actual, reference(shape, global_blocks, rows, columns))


def test_columns_only_may_use_keys_beyond_the_queries():
    actual = global_tokens(1, 2, 6, global_blocks=[5], rows=False)
    assert actual[0].int().tolist() == [[0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 1]]


@PROPERTY
@given(shapes(), st.data())
def test_global_rows_and_columns_are_full(shape, data):
    n_heads, n_q, n_k = shape
    indices = data.draw(st.lists(st.integers(0, min(n_q, n_k) - 1), min_size=1, max_size=4))
    blocks = global_tokens(*shape, global_blocks=indices)
    assert blocks[:, indices, :].all() and blocks[:, :, indices].all()
    assert int(blocks.sum()) == n_heads * (len(set(indices)) * (n_q + n_k) - len(set(indices)) ** 2)
    assert torch.equal(blocks[0], blocks[-1])


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"global_blocks": []}, ValueError, r"global_blocks must have at least 1 item, got 0"),
        ({"global_blocks": [3]}, ValueError, r"global_blocks\[0\] must be in \[0, 2\], got 3"),
        ({"global_blocks": [0, -1]}, ValueError, r"global_blocks\[1\] must be in \[0, 2\]"),
        ({"global_blocks": [5], "rows": False}, ValueError, r"must be in \[0, 4\], got 5"),
        ({"global_blocks": [4], "columns": False}, ValueError, r"must be in \[0, 2\], got 4"),
        ({"global_blocks": 1}, TypeError, r"global_blocks must be a list of integers, got int"),
        ({"global_blocks": [0], "rows": "yes"}, TypeError, r"rows must be True or False"),
        ({"global_blocks": [0], "columns": 0}, TypeError, r"columns must be True or False"),
        (
            {"global_blocks": [0], "rows": False, "columns": False},
            ValueError,
            r"rows and columns must not both be False",
        ),
    ],
)
def test_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        global_tokens(1, 3, 5, **kwargs)
