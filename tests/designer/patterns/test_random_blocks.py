import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from designer.patterns import random_blocks
from tests.designer.patterns.reference import (
    PROPERTY,
    SHAPES,
    above_diagonal,
    assert_blocks,
    shapes,
)


def reference(shape, seed, blocks_per_row=None, probability=None, causal=False):
    """The docstring's draw, cell by cell: one key grid per head, smallest allowed keys win."""
    n_heads, n_q, n_k = shape
    if isinstance(seed, list):
        generators = [np.random.default_rng(s) for s in seed]
    else:
        generators = [np.random.default_rng(seed)] * n_heads
    out = torch.zeros(shape, dtype=torch.bool)
    for h, rng in enumerate(generators):
        keys = rng.random((n_q, n_k)).tolist()
        for row in range(n_q):
            allowed = [col for col in range(n_k) if col <= row or not causal]
            if probability is None:
                count = blocks_per_row[h] if isinstance(blocks_per_row, list) else blocks_per_row
                chosen = sorted(allowed, key=lambda col: (keys[row][col], col))[:count]
            else:
                p = probability[h] if isinstance(probability, list) else probability
                chosen = [col for col in allowed if keys[row][col] < p]
            for col in chosen:
                out[h, row, col] = True
    return out


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("blocks_per_row", [0, 1, 2, 9])
@pytest.mark.parametrize("causal", [False, True])
def test_per_row_matches_reference(shape, blocks_per_row, causal):
    actual = random_blocks(*shape, seed=7, blocks_per_row=blocks_per_row, causal=causal)
    assert_blocks(actual, reference(shape, 7, blocks_per_row=blocks_per_row, causal=causal))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("probability", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("causal", [False, True])
def test_probability_matches_reference(shape, probability, causal):
    actual = random_blocks(*shape, seed=11, probability=probability, causal=causal)
    assert_blocks(actual, reference(shape, 11, probability=probability, causal=causal))


def test_per_head_seeds_counts_and_probabilities():
    shape = (3, 6, 8)
    actual = random_blocks(*shape, seed=[5, 6, 5], blocks_per_row=[1, 2, 3])
    assert_blocks(actual, reference(shape, [5, 6, 5], blocks_per_row=[1, 2, 3]))
    actual = random_blocks(*shape, seed=[1, 2, 3], probability=[0.1, 0.5, 0.9], causal=True)
    assert_blocks(actual, reference(shape, [1, 2, 3], probability=[0.1, 0.5, 0.9], causal=True))


def test_a_head_seeded_alone_matches_the_same_seed_in_a_list():
    alone = random_blocks(1, 5, 5, seed=42, blocks_per_row=2)
    listed = random_blocks(2, 5, 5, seed=[3, 42], blocks_per_row=2)
    assert torch.equal(alone[0], listed[1])


@PROPERTY
@given(shapes(), st.integers(0, 2**63 - 1), st.integers(0, 6), st.booleans())
def test_reproducible_and_counts_exact(shape, seed, count, causal):
    first = random_blocks(*shape, seed=seed, blocks_per_row=count, causal=causal)
    assert torch.equal(first, random_blocks(*shape, seed=seed, blocks_per_row=count, causal=causal))
    for row in range(shape[1]):
        allowed = min(row + 1, shape[2]) if causal else shape[2]
        assert first[:, row].sum(dim=1).tolist() == [min(count, allowed)] * shape[0]
    if causal:
        assert above_diagonal(first) == 0


def test_different_seeds_give_different_layouts():
    layouts = {
        random_blocks(2, 16, 16, seed=s, probability=0.5).numpy().tobytes() for s in range(20)
    }
    assert len(layouts) == 20


def test_heads_of_one_seed_differ():
    blocks = random_blocks(4, 16, 16, seed=0, blocks_per_row=4)
    assert len({blocks[h].numpy().tobytes() for h in range(4)}) == 4


def test_density_is_near_the_probability():
    for probability in (0.05, 0.3, 0.8):
        blocks = random_blocks(1, 200, 200, seed=1, probability=probability)
        assert abs(float(blocks.float().mean()) - probability) < 0.01  # 4 standard deviations


def test_per_row_picks_columns_uniformly():
    counts = random_blocks(1, 4000, 10, seed=2, blocks_per_row=3)[0].sum(dim=0)
    assert counts.sum() == 12000
    assert int((counts - 1200).abs().max()) < 150  # 5 standard deviations (29 each)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"seed": 0}, ValueError, r"give exactly one of blocks_per_row and probability"),
        ({"seed": 0, "blocks_per_row": 1, "probability": 0.5}, ValueError, r"exactly one of"),
        (
            {"seed": -1, "blocks_per_row": 1},
            ValueError,
            r"seed must be in \[0, 9223372036854775807\]",
        ),
        ({"seed": 2**63, "blocks_per_row": 1}, ValueError, r"seed must be in \[0, "),
        ({"seed": "1", "blocks_per_row": 1}, TypeError, r"seed must be an integer, got str"),
        ({"seed": [1], "blocks_per_row": 1}, ValueError, r"seed must be one value or one per head"),
        ({"seed": [1, -2], "blocks_per_row": 1}, ValueError, r"seed\[1\] must be in \[0, "),
        ({"seed": 0, "blocks_per_row": -1}, ValueError, r"blocks_per_row must be in \[0, 65536\]"),
        (
            {"seed": 0, "probability": 1.5},
            ValueError,
            r"probability must be in \[0.0, 1.0\], got 1.5",
        ),
        ({"seed": 0, "probability": float("nan")}, ValueError, r"probability must be finite"),
        ({"seed": 0, "probability": [0.1, 2]}, ValueError, r"probability\[1\] must be in"),
        ({"seed": 0, "probability": 0.5, "causal": 1}, TypeError, r"causal must be True or False"),
    ],
)
def test_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        random_blocks(2, 4, 4, **kwargs)
