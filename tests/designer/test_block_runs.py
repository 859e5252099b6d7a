import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.block_runs import BlockRuns
from designer.threads import one_thread


@pytest.fixture(autouse=True)
def _one_thread():
    """Small tensor operations on one thread (the pool's spinning costs 20x on a busy box)."""
    with one_thread():
        yield


@st.composite
def grids(draw, heads=None):
    h = heads or draw(st.integers(1, 3))
    m, n = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    seed = draw(st.integers(0, 2**31 - 1))
    density = draw(st.sampled_from([0.0, 0.2, 0.5, 0.8, 1.0]))
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(h, m, n, generator=generator) < density


@st.composite
def grid_pairs(draw):
    a = draw(grids())
    h, m, n = a.shape
    seed = draw(st.integers(0, 2**31 - 1))
    heads = draw(st.sampled_from([1, h]))
    b = torch.rand(heads, m, n, generator=torch.Generator().manual_seed(seed)) < 0.5
    return a, b


def check_canonical(runs: BlockRuns) -> None:
    """Canonical by construction: rebuilding from its dense grid gives the same arrays."""
    assert runs == BlockRuns.from_dense(runs.to_dense())


@settings(max_examples=50, deadline=None)
@given(grids())
def test_round_trip_and_counts_match_the_grid(grid):
    runs = BlockRuns.from_dense(grid)
    assert torch.equal(runs.to_dense(), grid)
    assert runs.nnz == int(grid.sum())
    assert torch.equal(runs.row_counts(), grid.sum(dim=2))
    assert torch.equal(runs.head_counts(), grid.sum(dim=(1, 2)))
    assert runs.density == pytest.approx(grid.float().mean().item())
    for col in range(grid.shape[2]):
        assert torch.equal(runs.column_counts(col), grid[:, :, col].sum(dim=1))
    cells = torch.cartesian_prod(*(torch.arange(s) for s in grid.shape))
    assert torch.equal(runs.contains(cells), grid.reshape(-1))


@settings(max_examples=50, deadline=None)
@given(grid_pairs())
def test_algebra_matches_the_grid(pair):
    a, b = pair
    ra, rb = BlockRuns.from_dense(a), BlockRuns.from_dense(b)
    for got, want in (
        (ra.union(rb), a | b),
        (ra.intersection(rb), a & b),
        (ra.difference(rb), a & ~b),
        (ra.complement(), ~a),
        (ra.causal_clip(), torch.tril(a)),
    ):
        assert torch.equal(got.to_dense(), want)
        check_canonical(got)


@settings(max_examples=50, deadline=None)
@given(grids())
def test_transpose_matches_the_grid(grid):
    got = BlockRuns.from_dense(grid).transpose()
    assert got.shape == (grid.shape[0], grid.shape[2], grid.shape[1])
    assert torch.equal(got.to_dense(), grid.transpose(1, 2))
    check_canonical(got)


@settings(max_examples=40, deadline=None)
@given(grids(heads=3), st.lists(st.integers(0, 2), min_size=1, max_size=4))
def test_heads_select_and_replace(grid, heads):
    runs = BlockRuns.from_dense(grid)
    assert torch.equal(runs.select_heads(heads).to_dense(), grid[heads])
    source = grid[:1].clone()
    replaced = grid.clone()
    replaced[sorted(set(heads))] = source
    got = runs.with_heads(sorted(set(heads)), BlockRuns.from_dense(source))
    assert torch.equal(got.to_dense(), replaced)


@settings(max_examples=40, deadline=None)
@given(grids(), st.integers(0, 2**31 - 1))
def test_intervals_and_cells_give_their_union(grid, seed):
    h, m, n = grid.shape
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, h * m, (12,), generator=generator)
    starts = torch.randint(-2, n + 2, (12,), generator=generator)
    stops = starts + torch.randint(-1, 4, (12,), generator=generator)
    want = torch.zeros(h * m, n, dtype=torch.bool)
    for row, start, stop in zip(rows.tolist(), starts.tolist(), stops.tolist(), strict=True):
        want[row, max(start, 0) : max(min(stop, n), 0)] = True
    got = BlockRuns.from_intervals((h, m, n), rows, starts, stops)
    assert torch.equal(got.to_dense(), want.view(h, m, n))
    cells = torch.nonzero(grid)
    assert torch.equal(BlockRuns.from_cells(grid.shape, cells).to_dense(), grid)


def test_equality_and_hash_follow_the_blocks():
    grid = torch.eye(4, dtype=torch.bool)[None]
    assert BlockRuns.from_dense(grid) == BlockRuns.from_dense(grid.clone())
    assert hash(BlockRuns.from_dense(grid)) == hash(BlockRuns.from_dense(grid.clone()))
    assert BlockRuns.from_dense(grid) != BlockRuns.from_dense(~grid)


def test_full_and_empty():
    assert BlockRuns.full(2, 3, 5).nnz == 30 and BlockRuns.full(2, 3, 5).n_runs == 6
    assert BlockRuns.empty(2, 3, 5).nnz == 0


def test_to_dense_refuses_past_the_cap():
    with pytest.raises(ValueError, match=r"16,777,216 cells, more than the limit of 1,000"):
        BlockRuns.full(1, 4096, 4096).to_dense(max_cells=1000)


@pytest.mark.parametrize(
    ("row_ptr", "starts", "stops", "match"),
    [
        ([0, 1], [0], [3], r"H\*M \+ 1 = 3 entries, got 2"),
        ([0, 1, 1], [0], [5], r"key blocks \[0, 4\]"),
        ([0, 1, 1], [2], [2], "non-empty"),
        ([0, 2, 2], [0, 2], [2, 3], "not touching"),
        ([0, 2, 1], [0, 2], [1, 3], "go from 0 to the 2 runs|non-decreasing"),
    ],
)
def test_invalid_runs_are_refused(row_ptr, starts, stops, match):
    with pytest.raises(ValueError, match=match):
        BlockRuns((1, 2, 4), torch.tensor(row_ptr), torch.tensor(starts, dtype=torch.int32),
                  torch.tensor(stops, dtype=torch.int32))  # fmt: skip


def test_wrong_dtype_is_refused():
    with pytest.raises(ValueError, match=r"starts must be a 1-D torch\.int32 tensor"):
        BlockRuns((1, 1, 4), torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([1]))
