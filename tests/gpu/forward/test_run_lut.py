"""The kernels' tables built from row runs are bit-identical to those built from the dense
layout (CPU, runs in CI)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.backward.lut import build_backward_lut, build_backward_lut_runs
from gpu.forward.lut import build_fused_lut
from gpu.forward.run_lut import build_fused_lut_runs, tile_work_of_runs
from tests.designer.run_layouts import dense_layouts, dense_to_runs
from tests.gpu.tables import TILES, partial_layouts


def assert_same_tables(blocks: np.ndarray, block_size: int, **options) -> None:
    runs = dense_to_runs(blocks)
    dense = torch.from_numpy(blocks)
    for dense_build, runs_build in (
        (build_fused_lut, build_fused_lut_runs),
        (build_backward_lut, build_backward_lut_runs),
    ):
        want = dense_build(dense, block_size, **options)
        found = runs_build(runs, block_size, **options)
        if dense_build is build_fused_lut:
            assert tile_work_of_runs(runs, block_size, **options) == want.work
        for field in dataclasses.fields(want):
            a, b = getattr(found, field.name), getattr(want, field.name)
            if isinstance(b, torch.Tensor):
                assert a.dtype == b.dtype and a.shape == b.shape, field.name
                assert torch.equal(a, b), field.name
            else:
                assert a == b, field.name


@settings(max_examples=120, deadline=None)
@given(partial_layouts())
def test_random_layouts_lengths_and_causal_offsets(case):
    blocks, block_size, (block_m, block_n), causal, (seq_q, seq_k), offset = case
    assert_same_tables(blocks, block_size, block_m=block_m, block_n=block_n, causal=causal,
                       causal_offset=offset, seq_q=seq_q, seq_k=seq_k)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    dense_layouts(max_side=20),
    st.sampled_from([16, 32, 64, 128]),
    st.sampled_from(TILES),
    st.booleans(),
)
def test_structured_layouts(blocks, block_size, tiles, causal):
    """Empty and all-ones heads, bands, whole rows and sinks beside a window, M != N."""
    assert_same_tables(blocks, block_size, block_m=tiles[0], block_n=tiles[1], causal=causal)


@pytest.mark.parametrize(("block_size", "tiles"), [(16, (128, 128)), (64, (128, 64)),
                                                   (128, (64, 64)), (32, (32, 16))])  # fmt: skip
def test_sinks_and_window_bottom_right(block_size, tiles):
    rows, cols = np.arange(48)[:, None], np.arange(40)[None, :]
    head = (cols <= rows) & ((cols < 2) | (rows - cols < 7))
    blocks = np.stack([head, ~head, np.zeros_like(head), np.ones_like(head)])
    seq_q, seq_k = 48 * block_size - 5, 40 * block_size - 3
    assert_same_tables(blocks, block_size, block_m=tiles[0], block_n=tiles[1], causal=True,
                       causal_offset=seq_k - seq_q, seq_q=seq_q, seq_k=seq_k)  # fmt: skip


def test_bad_tiles_are_named():
    runs = dense_to_runs(np.ones((1, 2, 2), dtype=bool))
    with pytest.raises(ValueError, match="block_m must be one of"):
        build_fused_lut_runs(runs, 64, block_m=48, block_n=64, causal=False)
    with pytest.raises(ValueError, match="the mask word allows at most 64"):
        build_backward_lut_runs(runs, 8, block_m=128, block_n=128, causal=False)
