"""The BlockMask of a layout held as row runs: its tiles, lists and mask_mod equal the dense
path's (``tile_classes``, ``to_block_mask``, ``create_mask``), and it round-trips."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention.flex_attention import BlockMask, create_mask, flex_attention

import designer.layout
from designer.block_runs import BlockRuns
from designer.design import Design
from designer.formats import block_mask_tensors, from_block_mask, read_design_file, to_block_mask
from designer.formats.flex_tiles import flex_tile_size, tile_classes
from designer.formats.runs_block_mask import (
    MAX_MASK_PARTIALS,
    MAX_MASK_RUNS,
    runs_block_mask,
    runs_kv_arguments,
    runs_mask_mod,
    sinks_window,
    sinks_window_mask_mod,
)
from designer.formats.runs_tiles import kv_lists_of_runs, tile_runs
from designer.layout import Layout
from designer.partials import PartialBlocks
from designer.patterns.attention_sinks import attention_sinks, attention_sinks_runs
from tests.designer.formats.flash_rules import flash_problems
from tests.designer.formats.flex_reference import layouts, lengths_and_offsets, token_masks
from tests.factories import random_token_mask, token_layout_of

LISTS = [f"{prefix}{side}_{part}" for prefix in ("", "full_") for side in ("kv", "q")
         for part in ("num_blocks", "indices")]  # fmt: skip


def _divides_tiles(layout: Layout) -> bool:
    return flex_tile_size(layout.block_size) % layout.block_size == 0


@settings(max_examples=80, deadline=None)
@given(st.data(), layouts(), st.booleans(), st.booleans())
def test_tiles_from_runs_are_the_dense_grids_tiles(data, layout, causal, with_partials):
    """Causal at any offset, lengths ending inside the last blocks, partial blocks never full."""
    tile = flex_tile_size(layout.block_size)
    if tile % layout.block_size:
        tile = layout.block_size * data.draw(st.integers(1, 3))  # tiles of whole blocks
    lengths, offset = data.draw(lengths_and_offsets(layout))
    partial = cells = None
    if with_partials and layout.nnz:
        active = layout.blocks.nonzero()
        cells = active[torch.randperm(len(active))[: max(1, len(active) // 3)]]
        partial = torch.zeros_like(layout.blocks)
        partial[tuple(cells.T)] = True
    full, partial_tiles = tile_runs(
        layout.to_runs(), layout.block_size, causal=causal, tile_size=tile,
        seq_lengths=lengths, causal_offset=offset, partial_cells=cells,
    )  # fmt: skip
    want_full, want_partial = tile_classes(
        layout.blocks, layout.block_size, causal=causal, tile_size=tile,
        seq_lengths=lengths, causal_offset=offset, partial=partial,
    )  # fmt: skip
    assert torch.equal(full.to_dense(), want_full)
    assert torch.equal(partial_tiles.to_dense(), want_partial)


def _listed(num: torch.Tensor, indices: torch.Tensor) -> list[list[int]]:
    return [indices[0, h, m, : num[0, h, m]].tolist()
            for h in range(num.shape[1]) for m in range(num.shape[2])]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(layouts(max_tokens=600), st.booleans(), st.sampled_from(["top_left", "bottom_right"]))
def test_every_list_equals_the_dense_paths_block_mask(layout, causal, alignment):
    """kv and q lists, partial and full: the same counts, and each row the same tiles in the
    same (column) order; a compact row's entries past its count are 0, one entry beyond the
    longest row is kept (Flex's kernels read one index ahead)."""
    if not _divides_tiles(layout):
        return
    seq_q = max(1, layout.seq_len_q - layout.block_size // 2)
    want = to_block_mask(layout, causal=causal, causal_alignment=alignment, seq_q=seq_q)
    offset = want.mask_mod.causal_offset
    got = runs_kv_arguments(layout, causal, want.seq_lengths, offset)
    assert got["BLOCK_SIZE"] == want.BLOCK_SIZE and got["seq_lengths"] == want.seq_lengths
    for prefix in ("", "full_"):
        for side in ("kv", "q"):
            num = got[f"{prefix}{side}_num_blocks"]
            indices = got[f"{prefix}{side}_indices"]
            want_num = getattr(want, f"{prefix}{side}_num_blocks")
            assert torch.equal(num, want_num)
            assert _listed(num, indices) == _listed(
                want_num, getattr(want, f"{prefix}{side}_indices")
            )
            assert indices.shape[-1] == (int(num.max()) if num.numel() else 0) + 1
            beyond = torch.arange(indices.shape[-1]) >= num[..., None]
            assert not bool(indices[beyond].any())
    wide = runs_kv_arguments(layout, causal, want.seq_lengths, offset, width="tiles")
    assert wide["kv_indices"].shape == want.kv_indices.shape
    assert wide["q_indices"].shape == want.q_indices.shape


@settings(max_examples=40, deadline=None)
@given(layouts(max_tokens=300), st.booleans(), st.integers(-64, 64))
def test_the_runs_mask_mod_is_the_dense_layouts_token_mask(layout, causal, offset):
    runs = layout.to_runs()
    if int((runs.row_ptr[1:] - runs.row_ptr[:-1]).max()) > MAX_MASK_RUNS:
        return
    block, (h, m, n) = layout.block_size, layout.shape
    mask_mod = runs_mask_mod(runs, block, causal=causal, causal_offset=offset, spare_rows=2)
    got = create_mask(mask_mod, 1, h, m * block, n * block, device="cpu")
    want = layout.token_mask()[None]
    if causal:
        keys, queries = torch.arange(n * block)[None, :], torch.arange(m * block)[:, None]
        want = want & (keys <= queries + offset)
    assert torch.equal(got, want)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 24), st.integers(0, 30), st.integers(1, 30))
def test_sinks_and_window_are_recognised_and_their_closed_form_is_exact(heads, n, sink, window):
    runs = attention_sinks_runs(heads, n, n, sink_blocks=sink, window_blocks=window)
    found = sinks_window(runs)
    assert found is not None  # the same blocks, maybe by other parameters
    assert attention_sinks_runs(heads, n, n, sink_blocks=found[0], window_blocks=found[1]) == runs
    mask_mod = sinks_window_mask_mod(16, *found, causal=True)
    got = create_mask(mask_mod, 1, 1, n * 16, n * 16, device="cpu")[0, 0]
    blocks = attention_sinks(1, n, n, sink_blocks=sink, window_blocks=window)[0]
    want = blocks.repeat_interleave(16, 0).repeat_interleave(16, 1)
    assert torch.equal(got, want & torch.ones_like(want).tril())


def test_other_layouts_are_not_taken_for_sinks():
    band = BlockRuns.from_dense(torch.ones(1, 8, 8, dtype=torch.bool).triu(-2).tril(2))
    assert sinks_window(band) is None
    assert sinks_window(BlockRuns.from_dense(torch.ones(1, 4, 6, dtype=torch.bool))) is None
    assert sinks_window(BlockRuns.empty(2, 5, 5)) is None


def test_compact_lists_hold_one_entry_beyond_the_longest_row():
    tiles = BlockRuns.from_dense(torch.tensor([[[1, 0, 1], [0, 0, 0]]], dtype=torch.bool))
    num, indices = kv_lists_of_runs(tiles)
    assert num.tolist() == [[[2, 0]]] and indices.tolist() == [[[[0, 2, 0], [0, 0, 0]]]]
    assert kv_lists_of_runs(tiles, 3)[1].shape == (1, 1, 2, 3)
    with pytest.raises(ValueError, match="width must hold the longest row's 2 tiles, got 1"):
        kv_lists_of_runs(tiles, 1)


def test_what_runs_cannot_express_is_refused_with_the_reason():
    runs = BlockRuns.from_dense(torch.ones(1, 4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="tile_size must be a multiple of block_size 96"):
        tile_runs(runs, 96, causal=False, tile_size=128)
    with pytest.raises(ValueError, match="blocks that divide 128-token tiles, got block_size 96"):
        runs_kv_arguments(Layout(runs, 96), False)
    comb = BlockRuns.from_dense(torch.arange(40).remainder(2).bool().view(1, 2, 20))
    with pytest.raises(ValueError, match=f"at most {MAX_MASK_RUNS} runs in a block row, and "
                                         "this layout has 10"):  # fmt: skip
        runs_mask_mod(comb, 16, causal=False)
    with pytest.raises(ValueError, match="width must be one of"):
        runs_kv_arguments(Layout(runs, 64), False, width="dense")


def test_wide_lists_past_their_budget_are_refused(monkeypatch):
    import designer.formats.runs_block_mask as module

    monkeypatch.setattr(module, "MAX_LIST_ENTRIES", 60)
    layout = Layout(BlockRuns.from_dense(torch.ones(2, 8, 8, dtype=torch.bool).tril()), 64)
    compact = runs_kv_arguments(layout, True, q_lists=False)  # 2 x 4 rows of 2 + 4 entries
    assert compact["kv_indices"].shape == (1, 2, 4, 2) and compact["q_indices"] is None
    with pytest.raises(ValueError, match=r"would hold 64 int32 entries, more than the 60 "
                                         r"allowed: they are one entry per tile wide"):  # fmt: skip
        runs_kv_arguments(layout, True, width="tiles", q_lists=False)
    auto = runs_kv_arguments(layout, True, width="auto", q_lists=False)  # past the cap: compact
    assert torch.equal(auto["kv_indices"], compact["kv_indices"])
    monkeypatch.setattr(module, "MAX_LIST_ENTRIES", 64)
    wide = runs_kv_arguments(layout, True, width="auto", q_lists=False)  # within it: tiles
    assert wide["kv_indices"].shape == (1, 2, 4, 4)
    monkeypatch.setattr(module, "MAX_LIST_ENTRIES", 100)
    sink = Layout(attention_sinks_runs(2, 16, 16, sink_blocks=1, window_blocks=1), 64)
    assert runs_kv_arguments(sink, True, q_lists=False)["kv_indices"].shape[-1] == 3
    with pytest.raises(ValueError, match="the most-attended key tile"):  # a sink: every query
        runs_kv_arguments(sink, True)


def test_a_backward_block_mask_takes_lists_one_entry_per_tile_or_is_refused(monkeypatch):
    """Compiled Flex's backward reads compact lists out of range (the H200 probe): a BlockMask
    with q lists is tiles wide, and past the lists' budget only a forward one is made."""
    import designer.formats.runs_block_mask as module

    layout = Layout(BlockRuns.from_dense(torch.ones(2, 8, 8, dtype=torch.bool).tril()), 64)
    mask = runs_block_mask(layout, causal=True)
    assert mask.kv_indices.shape == mask.q_indices.shape == (1, 2, 4, 4)
    with pytest.raises(ValueError, match="pass width='tiles', or q_lists=False"):
        runs_block_mask(layout, causal=True, width="compact")
    assert runs_block_mask(layout, causal=True, width="compact", q_lists=False).kv_indices.shape \
        == (1, 2, 4, 2)  # fmt: skip
    monkeypatch.setattr(module, "MAX_LIST_ENTRIES", 63)  # 2 tiles-wide lists of 32: not 4
    forward = runs_block_mask(layout, causal=True, q_lists=False)
    assert forward.kv_indices.shape == (1, 2, 4, 2) and forward.q_indices is None
    with pytest.raises(ValueError, match="only a forward-only BlockMask"):
        runs_block_mask(layout, causal=True)


@pytest.fixture
def runs_form(monkeypatch):
    """Layouts built from runs stay runs at any size (as past the dense grid's cap)."""
    monkeypatch.setattr(designer.layout, "DENSE_CELLS", 0)


@pytest.mark.parametrize("causal", [False, True])
def test_a_runs_layouts_block_mask_round_trips_and_runs_in_eager_flex(runs_form, causal):
    layout = Layout(attention_sinks_runs(2, 12, 12, sink_blocks=1, window_blocks=3), 32)
    banded = Layout(BlockRuns.from_dense(torch.ones(2, 12, 12, dtype=torch.bool).tril(1)), 32)
    for each in (layout, banded):
        assert each.runs is not None
        mask = to_block_mask(each, causal=causal)
        assert from_block_mask(mask) == (each, 32)
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 2, 384, 16, generator=gen) for _ in range(3))
        out = flex_attention(q, k, v, block_mask=mask)
        allowed = each.to_runs().to_dense().repeat_interleave(32, 1).repeat_interleave(32, 2)
        if causal:
            allowed = allowed & torch.ones(384, 384, dtype=torch.bool).tril()
        scores = (q @ k.transpose(-1, -2) / 4).masked_fill(~allowed, float("-inf"))
        assert torch.allclose(out, torch.softmax(scores, -1) @ v, atol=1e-5)


def test_a_runs_block_mask_whose_lists_were_changed_is_refused(runs_form):
    layout = Layout(attention_sinks_runs(1, 12, 12, sink_blocks=1, window_blocks=3), 32)
    mask = to_block_mask(layout, causal=True)
    mask.full_kv_num_blocks[0, 0, -1] -= 1
    with pytest.raises(ValueError, match="block_mask full_kv_indices are not the tiles"):
        from_block_mask(mask)


def test_the_block_mask_file_of_a_runs_design_reads_back_exactly(runs_form):
    layout = Layout(attention_sinks_runs(2, 20, 20, sink_blocks=2, window_blocks=5), 64)
    tensors = block_mask_tensors(layout, causal=True)
    assert set(tensors["layout"]) == {"shape", "row_runs", "starts", "stops", "block_size",
                                      "causal"}  # fmt: skip
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    loaded = read_design_file(io.BytesIO(buffer.getvalue())).design
    assert loaded.layout == layout and loaded.causal
    plain = {key: value for key, value in tensors.items() if key != "layout"}
    rebuilt = BlockMask.from_kv_blocks(**plain)  # torch transposes the lists by their width
    want = runs_kv_arguments(layout, True, width="tiles")
    for name in ("q", "full_q"):
        num = getattr(rebuilt, f"{name}_num_blocks")
        assert torch.equal(num, want[f"{name}_num_blocks"])
        assert _listed(num, getattr(rebuilt, f"{name}_indices")) == _listed(
            num, want[f"{name}_indices"]
        )
    tensors["kv_indices"][0, 1, 3, 0] += 1
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    with pytest.raises(ValueError, match="file kv_indices are not the tiles of its layout"):
        read_design_file(io.BytesIO(buffer.getvalue()))
    assert Design(layout, causal=True)  # the design itself is untouched


def _token_layouts(seed: int, heads: int, seq_q: int, seq_k: int, block: int):
    """A token-exact layout (partial blocks, lengths inside the last blocks) on its dense grid,
    and the same held as runs."""
    mask = random_token_mask(np.random.default_rng(seed), heads, seq_q, seq_k, block)
    dense = token_layout_of(mask, block)
    saved, designer.layout.DENSE_CELLS = designer.layout.DENSE_CELLS, 0
    try:
        runs = Layout(dense.to_runs(), block, dense.partials, seq_q, seq_k)
    finally:
        designer.layout.DENSE_CELLS = saved
    assert dense.runs is None and runs.runs is not None
    return dense, runs


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(1, 300), st.integers(1, 300),
       st.sampled_from([16, 32, 64, 128]), st.booleans())  # fmt: skip
def test_a_runs_layouts_partial_blocks_are_exact_in_its_block_mask(
    seed, heads, seq_q, seq_k, block, causal
):
    """Every token pair of the lists' tiles as the dense path's BlockMask of the same layout
    has it: the same tiles, and inside them the same mask (its partial blocks' own bits)."""
    dense, layout = _token_layouts(seed, heads, seq_q, seq_k, block)
    got, want = to_block_mask(layout, causal=causal), to_block_mask(dense, causal=causal)
    for name in LISTS:
        num_or_indices = getattr(got, name)
        assert (num_or_indices is None) == (getattr(want, name) is None)
    for prefix in ("", "full_"):
        num = getattr(got, f"{prefix}kv_num_blocks")
        assert torch.equal(num, getattr(want, f"{prefix}kv_num_blocks"))
        assert sorted(_listed(num, getattr(got, f"{prefix}kv_indices"))) == sorted(
            _listed(num, getattr(want, f"{prefix}kv_indices"))
        )
    tokens = create_mask(got.mask_mod, 1, heads, seq_q, seq_k, device="cpu")[0]
    assert torch.equal(tokens, token_masks(layout, causal, seq_q, seq_k))
    assert flash_problems(got.mask_mod) == []  # what FLASH (FA4) compiles


def test_a_runs_layout_with_partial_blocks_round_trips_and_runs_in_eager_flex(runs_form):
    layout = _token_layouts(7, 2, 300, 260, 32)[1]
    mask = to_block_mask(layout, causal=True)
    assert from_block_mask(mask)[0].token_mask().equal(layout.token_mask())
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 16, generator=gen, dtype=torch.float64)
               for n in (300, 260, 260))  # fmt: skip
    out = flex_attention(q, k, v, block_mask=mask)
    allowed = token_masks(layout, True, 300, 260)
    scores = (q @ k.transpose(-1, -2) / 4).masked_fill(~allowed, float("-inf"))
    want = torch.softmax(scores, -1).nan_to_num() @ v  # rows with no key give 0, as Flex does
    assert torch.allclose(out, want, atol=1e-9)


def test_the_block_mask_file_of_a_token_exact_runs_design_reads_back_exactly(runs_form):
    layout = _token_layouts(3, 2, 500, 480, 64)[1]
    tensors = block_mask_tensors(layout, causal=False)
    assert {"partials", "seq_lengths"} <= set(tensors["layout"])
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    loaded = read_design_file(io.BytesIO(buffer.getvalue())).design.layout
    assert loaded.runs is not None and loaded == layout


def test_a_block_row_with_more_partial_blocks_than_the_mask_mod_reads_is_refused(runs_form):
    blocks = torch.ones(1, 2, MAX_MASK_PARTIALS + 1, dtype=torch.bool)
    masks = torch.eye(16, dtype=torch.bool).expand(MAX_MASK_PARTIALS + 1, 16, 16)
    index = torch.tensor([[0, 0, col] for col in range(MAX_MASK_PARTIALS + 1)])
    layout = Layout(BlockRuns.from_dense(blocks), 16, PartialBlocks.of_masks(index, masks))
    with pytest.raises(ValueError, match=f"at most {MAX_MASK_PARTIALS} partial blocks in a "
                                         f"block row, and this layout has "
                                         f"{MAX_MASK_PARTIALS + 1} in one"):  # fmt: skip
        to_block_mask(layout)
