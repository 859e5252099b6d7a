import base64
import copy
import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from designer.edit import Band, Bitmap, Cells, Column, Rect, Row
from designer.segment import sdd_segment
from designer.segment_stats import UNTILED, tile_maps
from designer.storage import load_default_design
from ui.canvas.payload import (
    MAX_STROKES,
    ODD_FLAG,
    Paint,
    Step,
    head_payload,
    mask_region,
    newest_seq,
    payload_bytes,
    read_head,
    read_strokes,
)
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


# --------------------------------------------------------------------------- strokes
def bits(mask):
    return base64.b64encode(np.packbits(mask, axis=None).tobytes()).decode()


def stroke(seq=1, **region):
    return {"seq": seq, "op": "paint", "head": 1, "action": "set", "region": region}


def read(*strokes, applied=0):
    return read_strokes({"strokes": list(strokes)}, 2, 8, 10, applied=applied)


def test_strokes_decode_to_edit_regions():
    mask = np.array([[1, 0, 1], [0, 1, 0]], dtype=bool)
    got = read(
        stroke(1, kind="rect", row0=1, col0=2, row1=3, col1=4),
        stroke(2, kind="row", row=7),
        stroke(3, kind="column", col=9),
        stroke(4, kind="band", lo=-1, hi=2),
        stroke(5, kind="mask", row0=5, col0=6, rows=2, cols=3, bits=bits(mask)),
        stroke(6, kind="mask", row0=0, col0=0, rows=1, cols=2, bits=bits(np.ones((1, 2), bool))),
        {"seq": 7, "op": "undo"},
        {"seq": 8, "op": "redo"},
    )
    assert got == [
        (1, Paint(1, "set", Rect(1, 2, 3, 4))),
        (2, Paint(1, "set", Row(7))),
        (3, Paint(1, "set", Column(9))),
        (4, Paint(1, "set", Band(-1, 2))),
        (5, Paint(1, "set", Cells(((5, 6), (5, 8), (6, 7))))),
        (6, Paint(1, "set", Rect(0, 0, 0, 1))),
        (7, Step(back=True)),
        (8, Step(back=False)),
    ]


def test_strokes_already_applied_are_skipped():
    strokes = [stroke(seq, kind="row", row=seq) for seq in (3, 4, 5)]
    assert [seq for seq, _ in read(*strokes, applied=4)] == [5]


GOOD = stroke(1, kind="mask", row0=0, col0=0, rows=2, cols=3, bits=bits(np.ones((2, 3), bool)))


def broken(path, value):
    data = {"strokes": [copy.deepcopy(GOOD)]}
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        ("strokes", TypeError, "canvas edit must be a dict"),
        ({"strokes": []}, ValueError, "1 to 64"),
        ({"strokes": [GOOD] * (MAX_STROKES + 1)}, ValueError, "1 to 64"),
        ({"strokes": [GOOD], "extra": 1}, ValueError, "extra"),
        ({"strokes": [GOOD, GOOD]}, ValueError, "increasing"),
        (broken(["strokes", 0, "seq"], -1), ValueError, "seq"),
        (broken(["strokes", 0, "seq"], "1"), TypeError, "seq"),
        (broken(["strokes", 0, "op"], "erase"), ValueError, "op"),
        (broken(["strokes", 0, "head"], 2), ValueError, "head"),
        (broken(["strokes", 0, "action"], "paint"), ValueError, "action"),
        (broken(["strokes", 0, "region"], [1, 2]), TypeError, "region"),
        (broken(["strokes", 0, "region", "kind"], "cells"), ValueError, "kind"),
        (broken(["strokes", 0, "region", "rows"], 9), ValueError, "rows"),
        (broken(["strokes", 0, "region", "col0"], 10), ValueError, "col0"),
        (broken(["strokes", 0, "region", "bits"], "AAAA" * 100), ValueError, "base64 char"),
        (broken(["strokes", 0, "region", "bits"], "!!!!"), ValueError, "base64"),
        (broken(["strokes", 0, "region", "bits"], 7), TypeError, "bits"),
        (broken(["strokes", 0, "region", "bits"], "AAAA"), ValueError, "no cells"),
        (broken(["strokes", 0, "region", "bits"], KeyError), ValueError, "bits"),
        (broken(["strokes", 0, "region"], {"kind": "rect", "row0": 0, "col0": 0,
                                            "row1": 8, "col1": 0}), ValueError, "outside"),
        (broken(["strokes", 0, "region"], {"kind": "band", "lo": 3, "hi": 1}), ValueError, "lo"),
    ],
)  # fmt: skip
def test_malformed_strokes_get_a_clear_message(data, error, match):
    with pytest.raises(error, match=match):
        read_strokes(data, 2, 8, 10, applied=0)


def test_oversized_masks_are_refused_before_decoding():
    huge = "A" * (2 * 28 + 4)
    data = {"strokes": [stroke(1, kind="mask", row0=0, col0=0, rows=8, cols=10, bits=huge)]}
    with pytest.raises(ValueError, match="must total at most"):
        read_strokes(data, 2, 8, 10, applied=0)


def test_newest_seq_reads_what_it_can():
    assert newest_seq({"strokes": [{"seq": 4}, {"seq": "x"}, 3, {"seq": True}]}, 2) == 4
    assert newest_seq("junk", 2) == newest_seq({"strokes": "x"}, 2) == 2


def test_mask_region_picks_a_rect_or_cells():
    assert mask_region(np.zeros((2, 2), bool)) is None
    assert mask_region(np.ones((2, 3), bool), 4, 5) == Rect(4, 5, 5, 7)
    assert mask_region(np.eye(2, dtype=bool), 1, 1) == Cells(((1, 1), (2, 2)))


def test_a_lasso_of_many_scattered_blocks_is_one_compact_bitmap():
    rows, cols = np.ogrid[-535:536, -535:536]
    disc = rows**2 + cols**2 <= 535**2  # 0.9M blocks: 20 MB of cell pairs in a recipe
    region = mask_region(disc, 100, 200)
    assert isinstance(region, Bitmap) and region.count == int(disc.sum())
    assert torch.equal(region.mask(2048, 2048)[100:1171, 200:1271], torch.from_numpy(disc))
    assert len(json.dumps(region.to_dict())) < 50_000
