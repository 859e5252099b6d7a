"""Two designs side by side: figures at one shape, and a diff checked block by block."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from designer.compare import (
    BOTH,
    NEITHER,
    ONLY_FIRST,
    ONLY_SECOND,
    compare_figures,
    diff_heads,
    diff_refusal,
    head_diff,
    shared_shape,
)
from designer.design import Design
from designer.layout import Layout
from designer.model_shape import ModelShape
from tests.factories import random_layout


def test_a_diff_codes_every_block_and_counts_them(rng):
    first = Design(random_layout(rng, n_heads=3, n_q_blocks=7, n_k_blocks=5))
    second = Design(random_layout(rng, n_heads=3, n_q_blocks=7, n_k_blocks=5))
    for head in range(3):
        found = head_diff(first, second, head)
        a, b = (d.layout.blocks[head].numpy() for d in (first, second))
        for r in range(7):
            for c in range(5):
                want = {(1, 1): BOTH, (1, 0): ONLY_FIRST, (0, 1): ONLY_SECOND, (0, 0): NEITHER}
                assert found.codes[r, c] == want[(int(a[r, c]), int(b[r, c]))]
        assert found.only_first == int((a & ~b).sum()) and found.both == int((a & b).sum())
        assert found.differing == int((a ^ b).sum())


def test_a_one_head_design_pairs_with_every_head_and_grids_must_match(rng):
    one = Design(Layout(torch.ones(1, 4, 4, dtype=torch.bool), 16))
    many = Design(Layout(torch.eye(4, dtype=torch.bool).expand(6, 4, 4).contiguous(), 16))
    assert diff_heads(one, many) == 6 and head_diff(one, many, 5).only_first == 12
    other = Design(Layout(torch.ones(2, 4, 8, dtype=torch.bool), 16))
    assert "the grids differ (4 × 4 blocks of 16 against 4 × 8 of 16)" in diff_refusal(one, other)
    with pytest.raises(ValueError, match="no diff: the grids differ"):
        head_diff(one, other, 0)
    with pytest.raises(ValueError, match=r"head must be in \[0, 5\], got 6"):
        head_diff(one, many, 6)


def test_figures_are_costed_at_one_shape_when_both_designs_serve_it():
    blocks = torch.ones(2, 4, 4, dtype=torch.bool)
    first = replace(Design(Layout(blocks, 16)), model_shape=ModelShape(batch=4, head_dim=64))
    half = Design(Layout(blocks.tril().contiguous(), 16))
    assert shared_shape(first, half) == ModelShape(batch=4, heads=2, head_dim=64)
    rows = {label: (a, b) for label, a, b in compare_figures(first, half)}
    assert rows["Density"] == ("100.00%", "62.50%")
    assert rows["Attention FLOPs"][0] == "8.39 MFLOP"  # 4·D · batch 4 · 2 heads · 64² pairs
    eight = Design(Layout(torch.ones(8, 4, 4, dtype=torch.bool), 16))
    assert shared_shape(first, eight) is None  # 2 heads: an 8-head design cannot serve it
    rows = {label: (a, b) for label, a, b in compare_figures(first, eight)}
    assert rows["Attention FLOPs"][1] == "16.78 MFLOP"  # at its own: 4·128 · 8 heads · 64²
