"""``gpu.plan`` of a layout given by its row runs: the same plan as from the dense layout, with
tables built from the runs alone, partial blocks included (CPU, runs in CI)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings

import gpu
from designer.run_arrays import RunArrays, contains, dense_blocks, repeat_heads, run_keys
from gpu.backward.lut import build_backward_lut, build_backward_lut_runs
from gpu.forward.lut import build_fused_lut
from gpu.forward.run_lut import build_fused_lut_runs
from gpu.partials import check_partials
from gpu.sdd.lut import build_tables
from tests.designer.run_layouts import dense_layouts, dense_to_runs
from tests.gpu.tables import random_partials, token_layouts


def sinks_and_window(n_heads: int, n_rows: int, n_cols: int) -> np.ndarray:
    rows, cols = np.arange(n_rows)[:, None], np.arange(n_cols)[None, :]
    head = (cols <= rows) & ((cols < 1) | (rows - cols < 5))
    return np.stack([head if h % 2 else ~head for h in range(n_heads)])


def same_fields(a, b) -> bool:
    for field in dataclasses.fields(b):
        x, y = getattr(a, field.name), getattr(b, field.name)
        same = torch.equal(x, y) if isinstance(y, torch.Tensor) else x == y
        if not same:
            return False
    return True


@pytest.mark.parametrize("causal_alignment", ["top_left", "bottom_right"])
def test_a_runs_plan_equals_the_dense_plan(causal_alignment):
    blocks = sinks_and_window(3, 20, 16)
    layout = SimpleNamespace(runs=dense_to_runs(blocks), block_size=64)
    options = {"causal": True, "causal_alignment": causal_alignment, "seq_q": 1270,
               "seq_k": 1000, "device": "cpu"}  # fmt: skip
    from_runs = gpu.plan(layout, **options)
    dense = gpu.plan(torch.from_numpy(blocks), 64, **options)
    assert from_runs.runs is not None and dense.runs is None
    for name in ("n_heads", "n_q_blocks", "n_k_blocks", "seq_q", "seq_k", "causal_offset",
                 "block_size"):  # fmt: skip
        assert getattr(from_runs, name) == getattr(dense, name)
    assert from_runs.density == pytest.approx(dense.density, rel=1e-6)  # dense: float32
    assert torch.equal(from_runs.blocks, dense.blocks)
    for tiles in ((128, 64), (64, 128), (64, 64)):
        assert from_runs.tile_work(*tiles) == dense.tile_work(*tiles)  # counted from the runs
        assert from_runs.tiles() == {}
    for tiles in ((128, 64), (64, 128), (64, 64)):
        assert same_fields(from_runs.forward_lut(*tiles), dense.forward_lut(*tiles))
        assert same_fields(from_runs.backward_lut(*tiles), dense.backward_lut(*tiles))
        assert from_runs.tile_work(*tiles) == dense.tile_work(*tiles)


def test_the_reference_attention_is_the_dense_plans():
    blocks = sinks_and_window(2, 4, 4)
    from_runs = gpu.plan(SimpleNamespace(runs=dense_to_runs(blocks)), 16, causal=True,
                         device="cpu")  # fmt: skip
    dense = gpu.plan(torch.from_numpy(blocks), 16, causal=True, device="cpu")
    q, k, v = torch.randn(3, 1, 2, 64, 32, dtype=torch.float64)
    out = gpu.block_sparse_attention(q, k, v, from_runs, impl="reference")
    assert torch.equal(out, gpu.block_sparse_attention(q, k, v, dense, impl="reference"))


@pytest.mark.parametrize("start_width", [None, 1, 3])
def test_sdd_tables_from_runs_equal_the_dense_ones(start_width):
    blocks = sinks_and_window(2, 24, 24)
    blocks[1, 3:9, 2:12] = True
    want = build_tables(torch.from_numpy(blocks), 16, start_width)
    found = build_tables(dense_to_runs(blocks), 16, start_width)
    assert [(t.width, t.piece) for t in found.widths] == [(t.width, t.piece) for t in want.widths]
    assert all(torch.equal(a.groups, b.groups) for a, b in zip(found.widths, want.widths,
                                                                strict=True))  # fmt: skip
    for name in ("row_ptr", "col_idx", "row_order"):
        assert torch.equal(getattr(found, name), getattr(want, name)), name
    assert found.nnz == want.nnz


def test_repeat_heads_and_dense_blocks():
    one = dense_to_runs(sinks_and_window(1, 6, 5))
    three = repeat_heads(one, 3)
    want = np.repeat(sinks_and_window(1, 6, 5), 3, axis=0)
    assert all(np.array_equal(a, b) for a, b in zip(three[1:], dense_to_runs(want)[1:],
                                                    strict=True))  # fmt: skip
    assert torch.equal(dense_blocks(three, 90), torch.from_numpy(want))
    with pytest.raises(ValueError, match="would hold 90 cells; at most 89"):
        dense_blocks(three, 89)
    with pytest.raises(ValueError, match="only a one-head layout repeats"):
        repeat_heads(three, 2)


def test_a_huge_runs_plan_never_builds_its_grid():
    """4 heads of 2**16 x 2**16 blocks (2**34 cells), one diagonal block per row."""
    n_heads, n = 4, 1 << 16
    row_ptr = np.arange(n_heads * n + 1, dtype=np.int64)
    starts = np.tile(np.arange(n, dtype=np.int32), n_heads)
    runs = RunArrays((n_heads, n, n), row_ptr, starts, starts + 1)
    planned = gpu.plan(SimpleNamespace(runs=runs, block_size=64), causal=True, device="cpu")
    assert planned.density == pytest.approx(1 / n)
    lut = planned.forward_lut(128, 128)
    assert lut.n_tiles == n_heads * n // 2 and lut.items.shape == (n_heads * n // 2, 4)
    with pytest.raises(ValueError, match="a dense copy of this"):
        _ = planned.blocks


def test_runs_layouts_are_checked():
    runs = dense_to_runs(sinks_and_window(1, 4, 4))
    with pytest.raises(ValueError, match=r"block_size \(32\) must equal the layout's"):
        gpu.plan(SimpleNamespace(runs=runs, block_size=64), 32, device="cpu")
    with pytest.raises(TypeError, match="block_size is required"):
        gpu.plan(SimpleNamespace(runs=runs), device="cpu")
    with pytest.raises(ValueError, match="at least one head and block"):
        empty = RunArrays((1, 0, 4), np.zeros(1, np.int64), *[np.zeros(0, np.int32)] * 2)
        gpu.plan(SimpleNamespace(runs=empty), 64, device="cpu")
    with pytest.raises(ValueError, match="seq_q"):
        gpu.plan(SimpleNamespace(runs=runs), 64, seq_q=10, device="cpu")


# --------------------------------------------------------------------------- partial blocks
@settings(max_examples=60, deadline=None)
@given(token_layouts())
def test_token_tables_from_runs_equal_the_dense_ones(drawn):
    """Every table the dense path builds with partial blocks (token tiles, their numbers and
    words, the dropped ones, the work items), built from the runs and the partials alone."""
    case, partials = drawn
    blocks, block_size, (block_m, block_n), causal, (seq_q, seq_k), offset = case
    dense, runs = torch.from_numpy(blocks), dense_to_runs(blocks)
    options = {"block_m": block_m, "block_n": block_n, "causal": causal,
               "causal_offset": offset, "seq_q": seq_q, "seq_k": seq_k}  # fmt: skip
    from_dense = check_partials(partials, dense, block_size)
    from_runs = check_partials(partials, runs, block_size)
    assert (from_dense is None) == (from_runs is None)
    assert from_dense is None or from_runs.same_as(from_dense)
    assert same_fields(
        build_fused_lut_runs(runs, block_size, **options, partials=from_runs),
        build_fused_lut(dense, block_size, **options, partials=from_dense),
    )
    assert same_fields(
        build_backward_lut_runs(runs, block_size, **options, partials=from_runs),
        build_backward_lut(dense, block_size, **options, partials=from_dense),
    )


@pytest.mark.parametrize("causal_alignment", ["top_left", "bottom_right"])
def test_a_runs_plan_with_partials_equals_the_dense_plan(causal_alignment):
    blocks = sinks_and_window(3, 20, 16)
    partials = random_partials(blocks, 64, seed=3)
    options = {"causal": True, "causal_alignment": causal_alignment, "seq_q": 1270,
               "seq_k": 1000, "partials": partials, "device": "cpu"}  # fmt: skip
    from_runs = gpu.plan(SimpleNamespace(runs=dense_to_runs(blocks), block_size=64), **options)
    dense = gpu.plan(torch.from_numpy(blocks), 64, **options)
    assert from_runs.n_partials == dense.n_partials > 0
    assert all(torch.equal(a, b) for a, b in zip(from_runs.partials, dense.partials,
                                                 strict=True))  # fmt: skip
    for tiles in ((128, 64), (64, 128), (64, 64)):
        assert from_runs.tile_work(*tiles) == dense.tile_work(*tiles)
        assert same_fields(from_runs.forward_lut(*tiles), dense.forward_lut(*tiles))
        assert same_fields(from_runs.backward_lut(*tiles), dense.backward_lut(*tiles))
    q = torch.randn(1, 3, 1270, 16, dtype=torch.float64)
    k, v = torch.randn(2, 1, 3, 1000, 16, dtype=torch.float64)
    out = gpu.block_sparse_attention(q, k, v, from_runs, impl="reference")
    assert torch.equal(out, gpu.block_sparse_attention(q, k, v, dense, impl="reference"))


def test_a_designer_layout_held_as_runs_brings_its_partials(monkeypatch):
    import designer.layout
    from designer.block_runs import BlockRuns
    from designer.partials import PartialBlocks

    blocks = sinks_and_window(2, 8, 8)
    index, bits = random_partials(blocks, 16, seed=5)
    monkeypatch.setattr(designer.layout, "DENSE_CELLS", 0)  # held as runs at this size
    layout = designer.layout.Layout(BlockRuns.from_dense(torch.from_numpy(blocks)), 16,
                                    PartialBlocks(index, bits), seq_q=120)  # fmt: skip
    assert layout.runs is not None and layout.partials is not None
    from_runs = gpu.plan(layout, causal=True, device="cpu")
    dense = gpu.plan(
        layout.runs.to_dense(),
        16,
        causal=True,
        seq_q=120,
        partials=(layout.partials.index, layout.partials.bits),
        device="cpu",
    )
    assert from_runs.runs is not None and from_runs.n_partials == layout.n_partial
    assert same_fields(from_runs.forward_lut(64, 64), dense.forward_lut(64, 64))
    assert same_fields(from_runs.backward_lut(64, 64), dense.backward_lut(64, 64))


def test_partials_beside_runs_are_checked():
    runs = dense_to_runs(sinks_and_window(1, 4, 4))
    bits = torch.zeros(1, 64, 8, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"row 0 \[0, 0, 0\] names an inactive block"):
        gpu.plan(SimpleNamespace(runs=runs), 64, partials=(torch.tensor([[0, 0, 0]],
                 dtype=torch.int32), bits), device="cpu")  # fmt: skip
    with pytest.raises(ValueError, match="k_block must be in \\[0, 3\\]"):
        gpu.plan(SimpleNamespace(runs=runs), 64, partials=(torch.tensor([[0, 0, 4]],
                 dtype=torch.int32), bits), device="cpu")  # fmt: skip
    own = SimpleNamespace(index=torch.tensor([[0, 1, 2]], dtype=torch.int32), bits=bits)
    with pytest.raises(ValueError, match="partials must equal the layout's partials"):
        gpu.plan(SimpleNamespace(runs=runs, partials=own), 64, partials=(own.index, bits + 1),
                 device="cpu")  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(dense_layouts())
def test_contains_is_the_grid(dense):
    runs = dense_to_runs(dense)
    cells = np.indices(dense.shape).reshape(3, -1)
    np.testing.assert_array_equal(contains(runs, run_keys(runs), *cells), dense.reshape(-1))
