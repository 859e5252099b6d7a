import pytest
import torch

from designer import patterns
from designer.patterns._common import block_grid, stack_heads

#: Each generator with the fewest parameters that make it valid.
MINIMAL_CALLS = {
    patterns.causal: {},
    patterns.sliding_window: {"window_blocks": 1},
    patterns.dilated_window: {"window_blocks": 1, "dilation": 1},
    patterns.global_tokens: {"global_blocks": [0]},
    patterns.attention_sinks: {"sink_blocks": 1, "window_blocks": 1},
    patterns.random_blocks: {"seed": 0, "blocks_per_row": 1},
    patterns.block_diagonal: {"chunk_blocks": 1},
    patterns.prefix_lm: {"prefix_blocks": 1},
    patterns.packed_documents: {"doc_blocks": [1]},
    patterns.vertical_slash: {"vertical_blocks": [0], "slash_offsets": [0]},
    patterns.neighborhood_2d: {"height": 1, "width": 1, "radius": 1},
}


@pytest.mark.parametrize("generator", MINIMAL_CALLS, ids=lambda g: g.__name__)
def test_every_generator_checks_its_shape_first(generator):
    kwargs = MINIMAL_CALLS[generator]
    assert generator(2, 3, 3, **kwargs).shape == (2, 3, 3)
    with pytest.raises(ValueError, match=r"n_q_blocks must be in \[1, 65536\], got 0"):
        generator(1, 0, 3, **kwargs)
    with pytest.raises(ValueError, match=r"n_heads \* n_q_blocks \* n_k_blocks must be <="):
        generator(1024, 1024, 1024, **kwargs)


@pytest.mark.parametrize("generator", MINIMAL_CALLS, ids=lambda g: g.__name__)
def test_every_generator_needs_keyword_parameters(generator):
    if MINIMAL_CALLS[generator]:
        with pytest.raises(TypeError):
            generator(1, 2, 2, *MINIMAL_CALLS[generator].values())


@pytest.mark.parametrize("generator", MINIMAL_CALLS, ids=lambda g: g.__name__)
def test_heads_do_not_share_memory(generator):
    blocks = generator(2, 3, 3, **MINIMAL_CALLS[generator])
    before = blocks[1].clone()
    blocks[0] = ~blocks[0]
    assert torch.equal(blocks[1], before)


def test_block_grid_broadcasts_rows_against_columns():
    rows, cols = block_grid(2, 3)
    assert (rows + 10 * cols).tolist() == [[0, 10, 20], [1, 11, 21]]


def test_stack_heads_builds_each_value_once():
    made = []

    def make(value):
        made.append(value)
        return torch.full((2, 2), value == "a")

    blocks = stack_heads(["a", "b", "a"], make)
    assert made == ["a", "b"]
    assert blocks[:, 0, 0].tolist() == [True, False, True]
    assert blocks.is_contiguous()
