import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.formats import from_csr, to_csr
from designer.patterns import make_pattern
from tests.factories import random_layout


@st.composite
def layouts(draw):
    shape = (draw(st.integers(1, 4)), draw(st.integers(1, 7)), draw(st.integers(1, 7)))
    seed = draw(st.integers(0, 2**32 - 1))
    density = draw(st.sampled_from([0.0, 0.2, 0.6, 1.0]))
    return random_layout(np.random.default_rng(seed), *shape, density=density)


def reference_csr(layout):
    """Walk heads, rows and columns in order, appending each active block."""
    row_ptr, col_idx = [], []
    h_count, m, n = layout.shape
    for h in range(h_count):
        offsets = [len(col_idx)]
        for r in range(m):
            col_idx += [c for c in range(n) if layout.blocks[h, r, c]]
            offsets.append(len(col_idx))
        row_ptr.append(offsets)
    return row_ptr, col_idx


@settings(max_examples=100, deadline=None)
@given(layouts())
def test_csr_matches_reference_and_round_trips(layout):
    row_ptr, col_idx = to_csr(layout)
    assert row_ptr.dtype == col_idx.dtype == torch.int64
    assert (row_ptr.tolist(), col_idx.tolist()) == reference_csr(layout)
    back = from_csr(row_ptr, col_idx, layout.n_k_blocks, layout.block_size)
    assert back == layout
    assert from_csr(row_ptr.numpy(), col_idx.numpy(), layout.n_k_blocks, 16) == layout


def test_position_in_col_idx_is_the_packed_block_rank(rng):
    layout = random_layout(rng, n_heads=3, n_q_blocks=5, n_k_blocks=6)
    _, col_idx = to_csr(layout)
    assert torch.equal(col_idx, layout.blocks.nonzero()[:, 2])


GOOD_PTR = [[0, 1, 3], [3, 3, 4]]
GOOD_COL = [2, 0, 1, 2]


@pytest.mark.parametrize(
    ("row_ptr", "col_idx", "error", "message"),
    [
        ([[0, 1]], [0], TypeError, "row_ptr must be a torch tensor or numpy array, got list"),
        (torch.tensor(GOOD_PTR, dtype=torch.float32), GOOD_COL, TypeError, "row_ptr must hold int"),
        (torch.tensor([0, 1, 3]), GOOD_COL, ValueError, r"row_ptr must have rank 2, got shape \[3"),
        (torch.zeros(2, 1, dtype=torch.int64), [], ValueError, r"\[H >= 1, M \+ 1 >= 2\], got \[2"),
        (torch.tensor([[1, 1, 3], [3, 3, 4]]), GOOD_COL, ValueError, r"row_ptr\[0, 0\] must be 0"),
        (
            torch.tensor([[0, 1, 3], [2, 3, 4]]),
            GOOD_COL,
            ValueError,
            r"row_ptr\[1, 0\] must equal row_ptr\[0, 2\] \(3\), got 2",
        ),
        (
            torch.tensor([[0, 2, 1], [1, 1, 4]]),
            GOOD_COL,
            ValueError,
            r"row_ptr\[0\] must grow by 0 to n_k_blocks=3 per row, got -1 at row 1",
        ),
        (torch.tensor([[0, 4, 4], [4, 4, 4]]), GOOD_COL, ValueError, "grow by 0 to n_k_blocks=3"),
        (
            torch.tensor(GOOD_PTR),
            [2, 0, 1],
            ValueError,
            r"row_ptr\[1, 2\] must be len\(col_idx\) = 3, got 4",
        ),
        (torch.tensor(GOOD_PTR), [2, 0, 1, 3], ValueError, r"col_idx must be in \[0, 2\], got .*3"),
        (torch.tensor(GOOD_PTR), [2, 0, -1, 2], ValueError, r"got values in \[-1, 2\]"),
        (
            torch.tensor(GOOD_PTR),
            [2, 1, 0, 2],
            ValueError,
            r"ascend strictly within each row, got 1 then 0 at col_idx\[1:3\] \(head 0, row 1\)",
        ),
        (torch.tensor(GOOD_PTR), [2, 1, 1, 2], ValueError, "got 1 then 1"),
        (
            torch.tensor(GOOD_PTR),
            torch.tensor([[2, 0, 1, 2]]),
            ValueError,
            "col_idx must have rank 1",
        ),
    ],
)
def test_bad_csr_is_refused(row_ptr, col_idx, error, message):
    col_idx = torch.tensor(col_idx, dtype=torch.int64) if isinstance(col_idx, list) else col_idx
    with pytest.raises(error, match=message):
        from_csr(row_ptr, col_idx, 3, 16)


def test_good_csr_reads():
    layout = from_csr(torch.tensor(GOOD_PTR), torch.tensor(GOOD_COL), 3, 16)
    assert layout.blocks.int().tolist() == [[[0, 0, 1], [1, 1, 0]], [[0, 0, 0], [0, 0, 1]]]


def test_sizes_and_arguments_are_checked(rng):
    with pytest.raises(ValueError, match=r"n_heads \* n_q_blocks must be <= 4,194,304"):
        from_csr(
            torch.zeros(1024, 8193, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), 65536, 16
        )
    with pytest.raises(ValueError, match=r"n_k_blocks must be in \[1, 65536\], got 0"):
        from_csr(torch.tensor(GOOD_PTR), torch.tensor(GOOD_COL), 0, 16)
    with pytest.raises(ValueError, match=r"block_size must be in \[1, 4096\], got 0"):
        from_csr(torch.tensor(GOOD_PTR), torch.tensor(GOOD_COL), 3, 0)
    with pytest.raises(TypeError, match="layout must be a Layout, got Tensor"):
        to_csr(random_layout(rng).blocks)


def test_layouts_held_as_runs_convert_both_ways_without_a_grid():
    layout = make_pattern("attention_sinks", 32, 2048, 2048, 64,
                          {"sink_blocks": 1, "window_blocks": 8})  # fmt: skip
    row_ptr, col_idx = to_csr(layout, dtype=torch.int32)
    assert col_idx.dtype == torch.int32 and len(col_idx) == layout.nnz
    head = layout.select_heads([5])  # one head is small enough to hold densely
    assert head.runs is None
    head_ptr, head_cols = to_csr(head)
    first, last = int(row_ptr[5, 0]), int(row_ptr[5, -1])
    assert torch.equal(col_idx[first:last].long(), head_cols)
    assert torch.equal(row_ptr[5].long() - first, head_ptr[0])
    back = from_csr(row_ptr, col_idx, 2048, 64)
    assert back.runs is not None and back == layout
