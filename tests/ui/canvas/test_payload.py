import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from designer.segment import sdd_segment
from designer.segment_stats import UNTILED, tile_maps
from designer.storage import load_default_design
from ui.canvas.payload import ODD_FLAG, head_payload, payload_bytes, read_head
from ui.pictures import max_pool, width_colour

KB, MB = 1000, 1000 * 1000


def tiles(blocks, start_width):
    widths, odd = tile_maps(blocks[None], sdd_segment(blocks[None], start_width))
    return widths[0], odd[0]


def expected_codes(widths, odd):
    table = sorted(set(widths[(widths > 0) & (widths != UNTILED)].tolist()))
    codes = np.zeros(widths.shape, dtype=np.uint8)  # inactive, or active in no tile
    for code, width in enumerate(table, 1):
        codes[widths == width] = code
    return codes | (odd.astype(np.uint8) * ODD_FLAG), table


@settings(max_examples=60, deadline=None)
@given(arrays(bool, st.tuples(st.integers(1, 40), st.integers(1, 40))), st.integers(0, 8))
def test_head_payload_round_trips_cells_and_tiles(blocks, start_width):
    widths, odd = tiles(blocks, start_width)
    payload = head_payload(blocks, widths, odd)
    cells, codes = read_head(payload)
    assert np.array_equal(cells, blocks)
    want, table = expected_codes(widths, odd)
    assert payload["codes_scale"] == 1 and np.array_equal(codes, want)
    assert payload["widths"] == table
    assert payload["colours"] == [width_colour(w) for w in table]
    assert (payload["rows"], payload["cols"]) == blocks.shape


def test_scattered_tiles_are_downsampled_past_the_budget(monkeypatch):
    import ui.canvas.payload as module

    monkeypatch.setattr(module, "MAX_CODE_BYTES", 5 * 200)
    blocks = np.zeros((64, 64), dtype=bool)
    blocks[::2, ::2] = True
    widths, odd = tiles(blocks, 1)
    payload = head_payload(blocks, widths, odd)
    cells, codes = read_head(payload)
    scale = payload["codes_scale"]
    assert scale > 1 and np.array_equal(cells, blocks)  # the cells stay exact
    want, _ = expected_codes(max_pool(widths, scale), max_pool(odd, scale))
    assert np.array_equal(codes, want)


@pytest.mark.parametrize(
    ("n_blocks", "block_size", "budget"), [(256, 64, 100 * KB), (4096, 16, 2 * MB)]
)
def test_payloads_of_the_default_recipe_fit_their_budget(n_blocks, block_size, budget):
    from dataclasses import replace

    default = load_default_design()
    recipe = replace(
        default.recipe, n_heads=1, n_q_blocks=n_blocks, n_k_blocks=n_blocks, block_size=block_size
    )
    blocks = recipe.build().blocks[0].numpy()
    payload = head_payload(blocks, *tiles(blocks, 128 // block_size))
    assert payload_bytes(payload) <= budget
    assert np.array_equal(read_head(payload)[0], blocks)


def test_a_dense_random_head_of_256_blocks_fits_100_kb():
    blocks = np.random.default_rng(1).random((256, 256)) < 0.5
    assert payload_bytes(head_payload(blocks, *tiles(blocks, 2))) <= 100 * KB
