import dataclasses
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer import analysis as analysis_module
from designer.analysis import HEAD_DIM, analyse, design_digest, head_tiles
from designer.design import Design
from designer.layout import Layout
from designer.segment import sdd_segment
from designer.segment_stats import UNTILED, head_tile_maps, segment_stats, tile_maps
from tests.factories import random_layout


def test_digest_sees_every_block_and_setting(rng):
    layout = random_layout(rng, 2, 64, 64, density=0.5)
    design = Design(layout)
    digest = design_digest(design)
    assert digest == design_digest(Design(Layout(layout.blocks.clone(), layout.block_size)))
    flipped = layout.blocks.clone()
    flipped[1, 63, 17] ^= True
    assert design_digest(Design(Layout(flipped, layout.block_size))) != digest
    assert design_digest(dataclasses.replace(design, causal=True)) != digest
    assert design_digest(dataclasses.replace(design, start_width=1)) != digest


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), density=st.floats(0, 1), start_width=st.integers(0, 5))
def test_maps_mark_every_active_block_once(seed, density, start_width):
    layout = random_layout(np.random.default_rng(seed), 2, 7, 9, density=density)
    analysis = analyse(Design(layout, start_width=start_width))
    active = layout.to_numpy().astype(bool)
    widths = np.stack(analysis.widths)
    assert np.array_equal(widths > 0, active)  # every active block is drawn, tiled or not
    if start_width == 0:
        assert np.all(widths[active] == UNTILED) and analysis.stats.tiles == 0
        return
    for row in analysis.stats.widths:
        assert (widths == row.width).sum() == row.blocks
    assert analysis.stats.coverage == (1.0 if active.any() else 0.0)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**16), density=st.floats(0, 1), start_width=st.integers(0, 5))
def test_head_by_head_stats_equal_the_whole_layouts(seed, density, start_width):
    layout = random_layout(np.random.default_rng(seed), 3, 9, 7, density=density)
    stats = analyse(Design(layout, start_width=start_width)).stats
    whole = segment_stats(layout, sdd_segment(layout, start_width), head_dim=HEAD_DIM)
    assert stats == whole


@pytest.fixture
def segmented(monkeypatch):
    """The number of heads of each segmentation the analysis runs from now on."""
    calls = []
    real = analysis_module.head_tile_maps

    def counting(blocks, start_width):
        calls.append(len(blocks[None]))
        return real(blocks, start_width)

    monkeypatch.setattr(analysis_module, "head_tile_maps", counting)
    return calls


def test_heads_are_segmented_once_per_content(rng, segmented):
    layout = random_layout(rng, 3, 16, 16, density=0.4)
    first = analyse(Design(layout))
    segmented.clear()
    edited = layout.blocks.clone()
    edited[1] = ~edited[1]
    second = analyse(Design(Layout(edited, layout.block_size)))
    assert segmented == [1]  # only the edited head
    assert second.heads[0] is first.heads[0] and second.heads[2] is first.heads[2]
    assert analyse(Design(layout)).heads[1] is first.heads[1]  # undo: found again
    assert segmented == [1]


def test_head_tiles_of_one_head():
    tiles = head_tiles(np.ones((4, 6), dtype=np.uint8), 2)
    assert tiles.tiles == ((2, 6),) and tiles.active == 24
    assert list(tiles.row_blocks) == [6] * 4
    assert not tiles.widths.flags.writeable


def test_lints_come_with_the_analysis():
    layout = Layout(torch.tensor([[[1, 1], [0, 0]]]), 64)
    codes = [lint.code for lint in analyse(Design(layout, causal=True)).lints]
    assert codes == ["causal-violation", "empty-query-rows"]


def test_equal_heads_are_segmented_once(rng, segmented):
    head = random_layout(rng, 1, 16, 16, density=0.3).blocks
    layout = Layout(head.expand(3, -1, -1).clone(), 64)
    analysis = analyse(Design(layout, start_width=3))
    assert segmented == [1]
    assert analysis.heads[0] is analysis.heads[1] is analysis.heads[2]
    assert analysis.stats.active_blocks == layout.nnz


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), density=st.floats(0, 1), start_width=st.integers(0, 5))
def test_one_heads_compact_maps_equal_the_full_segmentations(seed, density, start_width):
    blocks = random_layout(np.random.default_rng(seed), 1, 11, 9, density=density).to_numpy()
    widths, odd, tiles = head_tile_maps(blocks[0], start_width)
    segments = sdd_segment(blocks, start_width)
    expected = tile_maps(blocks, segments)
    assert np.array_equal(widths, expected[0][0]) and np.array_equal(odd, expected[1][0])
    assert tiles == tuple((w, len(rows) // (w * w)) for w, rows in segments)


SIGNATURES_AFTER = """
import numba, sys, torch
from designer import segment_runs_scan, segment_scan
from designer.analysis import analyse, analyse_runs, load_scan_kernels
from designer.design import Design
from designer.layout import Layout
from designer.patterns.attention_sinks import attention_sinks_runs

def signatures():
    return {(module.__name__, name): len(kernel.signatures)
            for module in (segment_runs_scan, segment_scan)
            for name, kernel in vars(module).items()
            if isinstance(kernel, numba.core.registry.CPUDispatcher)}

load_scan_kernels()
loaded = signatures()
grid = Layout(torch.rand(4, 256, 256) < 0.3, 64)  # past the threaded size: on scan threads
analyse(Design(grid, causal=True))
analyse_runs(Design(Layout(attention_sinks_runs(8, 512, 512, sink_blocks=1, window_blocks=8), 64)))
assert sum(loaded.values()) > 0 and signatures() == loaded, (loaded, signatures())
"""


def test_loading_the_scan_kernels_compiles_what_the_analyses_call():
    """An analysis's scan threads run at a lower priority: they must find every kernel compiled
    (in a fresh process, so kernels compiled by other tests cannot hide a missing one)."""
    subprocess.run([sys.executable, "-c", SIGNATURES_AFTER], check=True, timeout=600)
