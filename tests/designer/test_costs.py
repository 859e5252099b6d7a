"""Costs at the model's shape, against token-level counts made the obvious way."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import designer.layout
from designer.block_runs import BlockRuns
from designer.costs import attention_costs
from designer.design import Design
from designer.layout import Layout
from designer.model_shape import ModelShape, model_shape_from_dict
from tests.factories import random_layout


def token_pairs(layout: Layout, causal: bool) -> int:
    """Every computed (q, k) pair, counted on the token masks."""
    total = 0
    for h in range(layout.n_heads):
        mask = layout.token_mask(h)
        if causal:
            mask = mask & torch.ones_like(mask).tril()
        total += int(mask.sum())
    return total


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("m", "n"), [(6, 6), (4, 7), (7, 3)])
def test_flops_and_memory_count_every_pair_at_the_shape(rng, causal, m, n):
    layout = random_layout(rng, n_heads=2, n_q_blocks=m, n_k_blocks=n, density=0.5, block_size=8)
    design = Design(layout, causal=causal)
    shape = ModelShape(batch=3, heads=2, kv_heads=1, head_dim=32)
    costs = attention_costs(design, shape)
    pairs = token_pairs(layout, causal)
    assert costs.flops == 4 * 32 * 3 * pairs
    dense = token_pairs(Layout(torch.ones_like(layout.blocks), 8), causal)
    assert costs.dense_flops == 4 * 32 * 3 * dense
    assert costs.dense_kind == ("causal dense" if causal else "dense")
    sq, sk = m * 8, n * 8
    assert costs.input_bytes == 3 * 32 * 2 * (2 * 2 * sq + 2 * 1 * sk)  # q, o: 2 heads; k, v: 1
    assert costs.score_bytes == 3 * layout.nnz * 64 * 2


def test_a_causal_design_is_compared_with_causal_dense():
    causal = Design(Layout(torch.ones(1, 8, 8, dtype=torch.bool).tril(), 64), causal=True)
    assert attention_costs(causal).vs_dense == 1.0
    window = Design(Layout(torch.ones(1, 8, 8, dtype=torch.bool).tril(), 64), causal=False)
    assert attention_costs(window).vs_dense == pytest.approx(36 / 64)


def test_one_head_serves_every_head_and_other_counts_are_refused():
    one = Design(Layout(torch.ones(1, 2, 2, dtype=torch.bool), 16))
    assert attention_costs(one, ModelShape(heads=8)).flops == 8 * attention_costs(one).flops
    two = Design(Layout(torch.ones(2, 2, 2, dtype=torch.bool), 16))
    with pytest.raises(ValueError, match=r"heads must be 2 for this 2-head design.*got 8"):
        attention_costs(two, ModelShape(heads=8))


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"batch": 0}, r"batch must be in \[1, 65536\], got 0"),
        ({"head_dim": 0}, r"head dim must be in \[1, 1024\], got 0"),
        ({"heads": 8, "kv_heads": 3}, "kv heads must divide heads"),
    ],
)
def test_a_bad_shape_is_refused_naming_the_value(values, match):
    with pytest.raises(ValueError, match=match):
        ModelShape(**values)


def test_a_shape_round_trips_and_its_reader_checks_keys():
    shape = ModelShape(batch=2, heads=32, kv_heads=8, head_dim=64)
    assert model_shape_from_dict(shape.to_dict()) == shape
    with pytest.raises(ValueError, match="must have the keys"):
        model_shape_from_dict({"batch": 1})


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 3), st.integers(1, 9), st.integers(1, 9), st.integers(0, 2**32 - 1),
       st.booleans())  # fmt: skip
def test_costs_of_a_layout_held_as_runs_are_the_dense_ones(heads, m, n, seed, causal):
    grid = torch.from_numpy(np.random.default_rng(seed).random((heads, m, n)) < 0.5)
    dense = Design(Layout(grid, 16), causal=causal)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(designer.layout, "DENSE_CELLS", 0)
        held = Design(Layout(BlockRuns.from_dense(grid), 16), causal=causal)
        assert held.layout.runs is not None
        assert attention_costs(held) == attention_costs(dense)
