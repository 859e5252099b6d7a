import dataclasses

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.design import Design
from designer.layout import Layout
from designer.ui.analysis import analyse, design_digest
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
    if start_width == 0:
        assert not analysis.widths.any()
        return
    assert np.array_equal(analysis.widths > 0, active)
    for row in analysis.stats.widths:
        assert (analysis.widths == row.width).sum() == row.blocks
    assert analysis.stats.coverage == (1.0 if active.any() else 0.0)


def test_lints_come_with_the_analysis():
    layout = Layout(torch.tensor([[[1, 1], [0, 0]]]), 64)
    codes = [lint.code for lint in analyse(Design(layout, causal=True)).lints]
    assert codes == ["causal-violation", "empty-query-rows"]
