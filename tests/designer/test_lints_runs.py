"""Lints and statistics of a layout held as row runs are those of the same dense layout."""

from contextlib import contextmanager

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import designer.layout
from designer.analysis import analyse, design_digest
from designer.design import Design
from designer.layout import Layout
from designer.layout_stats import layout_stats
from designer.lints import lint_design
from designer.patterns import make_pattern
from designer.threads import one_thread


@contextmanager
def runs_everywhere():
    """Every layout built inside from runs is held as runs (the switch point at 0 cells)."""
    with pytest.MonkeyPatch.context() as patch, one_thread():
        patch.setattr(designer.layout, "DENSE_CELLS", 0)
        yield


def as_runs(layout: Layout) -> Layout:
    return Layout(layout.to_runs(), layout.block_size, layout.partials, layout.seq_q, layout.seq_k)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.tuples(st.integers(1, 3), st.integers(1, 9), st.integers(1, 9)),
    st.sampled_from([0.0, 0.1, 0.5, 1.0]),
    st.sampled_from([8, 16, 32, 64]),
    st.booleans(),
    st.sampled_from([None, 0, 1, 3, 4]),
    st.booleans(),
)
def test_lints_and_stats_on_runs_are_the_dense_ones(
    seed, shape, density, block, causal, width, same_heads
):
    rng = np.random.default_rng(seed)
    grid = rng.random(shape) < density
    if same_heads:
        grid[:] = grid[0]
    dense = Layout(torch.from_numpy(grid), block)
    with runs_everywhere():
        runs = as_runs(dense)
        assert runs.runs is not None
        a = Design(dense, causal=causal, start_width=width)
        b = Design(runs, causal=causal, start_width=width)
        assert lint_design(b) == lint_design(a)
        assert layout_stats(b) == layout_stats(a)
        assert design_digest(b) == design_digest(Design(as_runs(dense), causal=causal,
                                                        start_width=width))  # fmt: skip


def test_analyse_refuses_runs_saying_what_works():
    with runs_everywhere():
        design = Design(as_runs(Layout(torch.eye(4, dtype=torch.bool)[None], 64)))
    with pytest.raises(ValueError, match=r"held as row runs: use designer\.layout_stats"):
        analyse(design)


def test_long_context_lints_say_what_they_did_not_scan():
    layout = make_pattern("attention_sinks", 32, 16384, 16384, 16,
                          {"sink_blocks": 4, "window_blocks": 64})  # fmt: skip
    lints = lint_design(Design(layout, causal=True))
    codes = [lint.code for lint in lints]
    assert "causal-violation" not in codes and "empty-query-rows" not in codes
    assert "identical-heads" in codes and "deepspeed-unchecked" in codes
    stats = layout_stats(Design(layout))
    assert stats.active_blocks == layout.nnz and stats.empty_rows == 0
    assert stats.head_blocks == (layout.nnz // 32,) * 32
