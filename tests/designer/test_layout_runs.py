"""A layout held as row runs behaves as the same layout held as its dense grid, operation by
operation (the switch point is lowered to 0 cells, so small random layouts are held as runs)."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import designer.layout
from designer.layout import Layout
from designer.threads import one_thread
from tests.factories import token_layout_of


@pytest.fixture(autouse=True)
def _runs_everywhere(monkeypatch):
    monkeypatch.setattr(designer.layout, "DENSE_CELLS", 0)
    with one_thread():
        yield


def as_runs(layout: Layout) -> Layout:
    held = Layout(layout.to_runs(), layout.block_size, layout.partials, layout.seq_q, layout.seq_k)
    assert held.runs is not None
    return held


def check_same(runs: Layout, dense: Layout) -> None:
    assert runs.runs is not None
    assert runs.shape == dense.shape and runs.block_size == dense.block_size
    assert (runs.seq_q, runs.seq_k) == (dense.seq_q, dense.seq_k)
    assert torch.equal(runs.runs.to_dense(), dense.to_runs().to_dense())
    assert runs.partials == dense.partials


@st.composite
def layouts(draw, heads=None, q_blocks=None, k_blocks=None):
    """Token-exact layouts (partial blocks, cut lengths) from random token masks."""
    h = heads or draw(st.integers(1, 3))
    m, n = q_blocks or draw(st.integers(1, 5)), k_blocks or draw(st.integers(1, 5))
    block = draw(st.sampled_from([2, 4]))
    seq_q = draw(st.integers((m - 1) * block + 1, m * block))
    seq_k = draw(st.integers((n - 1) * block + 1, n * block))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    density = draw(st.sampled_from([0.0, 0.3, 0.7, 1.0]))
    blocky = rng.random((h, m, n)) < density
    mask = np.repeat(np.repeat(blocky, block, 1), block, 2)[:, :seq_q, :seq_k]
    if draw(st.booleans()):
        mask = mask & (rng.random(mask.shape) < 0.8)
    return token_layout_of(torch.from_numpy(mask), block)


@settings(max_examples=30, deadline=None)
@given(layouts())
def test_counts_and_statistics_match(dense):
    runs = as_runs(dense)
    check_same(runs, dense)
    assert runs.nnz == dense.nnz and runs.density == dense.density
    assert runs.head_stats() == dense.head_stats()
    assert runs.token_stats() == dense.token_stats()
    assert np.array_equal(runs.row_counts(), dense.row_counts())
    h, m, n = dense.shape
    for cell in [(0, 0, 0), (h - 1, m - 1, n - 1), (0, m // 2, n // 2)]:
        assert torch.equal(runs.block_tokens(*cell), dense.block_tokens(*cell))
    assert runs == as_runs(dense) and hash(runs) == hash(as_runs(dense))


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_algebra_matches(data):
    dense = data.draw(layouts())
    h, m, n = dense.shape
    other = data.draw(layouts(heads=data.draw(st.sampled_from([1, h])), q_blocks=m, k_blocks=n))
    if dense.block_size != other.block_size or (dense.seq_len_q, dense.seq_len_k) != (
        other.seq_len_q, other.seq_len_k
    ):  # fmt: skip
        return
    runs, other_runs = as_runs(dense), as_runs(other)
    for name in ("union", "intersection", "difference"):
        check_same(getattr(runs, name)(other_runs), getattr(dense, name)(other))
        check_same(getattr(runs, name)(other), getattr(dense, name)(other))  # mixed forms
    check_same(runs.complement(), dense.complement())
    check_same(runs.causal_clip(), dense.causal_clip())
    check_same(runs.transpose(), dense.transpose())


@settings(max_examples=20, deadline=None)
@given(layouts(heads=3), st.lists(st.integers(0, 2), min_size=1, max_size=3))
def test_heads_match(dense, heads):
    runs = as_runs(dense)
    check_same(runs.select_heads(heads), dense.select_heads(heads))
    source = dense.select_heads([heads[0]])
    chosen = sorted(set(heads))
    check_same(runs.with_heads(chosen, as_runs(source)), dense.with_heads(chosen, source))
    check_same(as_runs(source).broadcast_heads(4), source.broadcast_heads(4))


def test_dense_only_views_refuse_clearly():
    runs = as_runs(Layout(torch.eye(4, dtype=torch.bool)[None], 16))
    for view in (runs.to_numpy, runs.to_int64, runs.partial_grid):
        with pytest.raises(ValueError, match=r"held as row runs and has no dense blocks"):
            view()
