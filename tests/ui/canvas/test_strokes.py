import base64
import copy
import json

import numpy as np
import pytest
import torch

from designer.edit import Band, Bitmap, Cells, Column, Rect, Row
from ui.canvas.strokes import (
    MAX_SEQ,
    MAX_STROKES,
    Mask,
    Paint,
    Step,
    Unreadable,
    mask_region,
    read_trigger,
)

CLIENT = "canvas-0001"


def bits(mask):
    return base64.b64encode(np.packbits(mask, axis=None).tobytes()).decode()


def stroke(seq=1, heads=None, **region):
    return {"seq": seq, "op": "paint", "head": 1, "action": "set", "heads": heads, "region": region}


def trigger(*strokes, client=CLIENT):
    return {"client": client, "strokes": list(strokes)}


def read(*strokes):
    return read_trigger(trigger(*strokes), 2, 8, 10).strokes


def test_strokes_decode_to_edit_regions():
    mask = np.array([[1, 0, 1], [0, 1, 0]], dtype=bool)
    got = read(
        stroke(1, kind="rect", row0=1, col0=2, row1=3, col1=4),
        stroke(2, kind="row", row=7),
        stroke(3, kind="column", col=9),
        stroke(4, heads=[0, 1], kind="band", low=-2, high=1),
        stroke(5, kind="mask", row0=5, col0=6, rows=2, cols=3, bits=bits(mask)),
        stroke(6, kind="mask", row0=0, col0=0, rows=1, cols=2, bits=bits(np.ones((1, 2), bool))),
        {"seq": 7, "op": "undo"},
        {"seq": 8, "op": "redo"},
    )
    regions = [s.region.region() if isinstance(s.region, Mask) else s.region for _, s in got[:6]]
    assert regions == [
        Rect(1, 2, 3, 4),
        Row(7),
        Column(9),
        Band(-2, 1),
        Cells(((5, 6), (5, 8), (6, 7))),
        Rect(0, 0, 0, 1),
    ]
    assert [seq for seq, _ in got] == list(range(1, 9))
    assert got[0][1] == Paint(1, "set", Rect(1, 2, 3, 4), None)
    assert got[3][1].heads == (0, 1) and got[4][1].region.count == 3
    assert [s for _, s in got[6:]] == [Step(back=True), Step(back=False)]


GOOD = stroke(1, kind="mask", row0=0, col0=0, rows=2, cols=3, bits=bits(np.ones((2, 3), bool)))


def broken(path, value):
    data = trigger(copy.deepcopy(GOOD))
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
        ({"strokes": [GOOD]}, ValueError, "missing 'client'"),
        (trigger(GOOD, client="short"), ValueError, "client must be"),
        (trigger(GOOD, client=["x" * 10]), ValueError, "client must be"),
        (trigger(), ValueError, "1 to 64"),
        (trigger(*[GOOD] * (MAX_STROKES + 1)), ValueError, "1 to 64"),
        ({**trigger(GOOD), "extra": 1}, ValueError, "extra"),
        (trigger(GOOD, GOOD), ValueError, "one after another"),
        (trigger(GOOD, {**GOOD, "seq": 3}), ValueError, "one after another"),
        (trigger(7), TypeError, r"strokes\[0\] must be a dict"),
        (broken(["strokes", 0, "seq"], -1), ValueError, "seq"),
        (broken(["strokes", 0, "seq"], MAX_SEQ + 1), ValueError, "seq"),
        (broken(["strokes", 0, "seq"], 1 << 60), ValueError, "seq"),
        (broken(["strokes", 0, "seq"], "1"), TypeError, "seq"),
        (broken(["strokes", 0, "seq"], KeyError), TypeError, "seq"),
    ],
)  # fmt: skip
def test_a_trigger_that_cannot_be_trusted_is_refused_whole(data, error, match):
    with pytest.raises(error, match=match):
        read_trigger(data, 2, 8, 10)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (broken(["strokes", 0, "op"], "erase"), "op"),
        (broken(["strokes", 0, "head"], 2), "head"),
        (broken(["strokes", 0, "heads"], [0, 2]), "heads"),
        (broken(["strokes", 0, "heads"], [0, 0]), "repeat"),
        (broken(["strokes", 0, "action"], "paint"), "action"),
        (broken(["strokes", 0, "region"], [1, 2]), "region"),
        (broken(["strokes", 0, "region", "kind"], "cells"), "kind"),
        (broken(["strokes", 0, "region", "rows"], 9), "rows"),
        (broken(["strokes", 0, "region", "col0"], 10), "col0"),
        (broken(["strokes", 0, "region", "bits"], "AAAA" * 2), "base64 char"),
        (broken(["strokes", 0, "region", "bits"], "!!!!"), "base64"),
        (broken(["strokes", 0, "region", "bits"], 7), "bits"),
        (broken(["strokes", 0, "region", "bits"], "AAAA"), "no cells"),
        (broken(["strokes", 0, "region", "bits"], KeyError), "bits"),
        (broken(["strokes", 0, "region"], {"kind": "rect", "row0": 0, "col0": 0,
                                            "row1": 8, "col1": 0}), "outside"),
        (broken(["strokes", 0, "region"], {"kind": "band", "low": 3, "high": 1}), "low"),
        (broken(["strokes", 0, "region", "row0"], int("9" * 4000)), "row0"),
    ],
)  # fmt: skip
def test_a_stroke_that_cannot_be_read_is_done_with_its_reason(data, match):
    ((seq, read),) = read_trigger(data, 2, 8, 10).strokes
    assert seq == 1 and isinstance(read, Unreadable)
    assert match in read.reason and len(read.reason) <= 200


def test_oversized_masks_are_refused_before_decoding():
    huge = "A" * (2 * 28 + 4)
    data = trigger(stroke(1, kind="mask", row0=0, col0=0, rows=8, cols=10, bits=huge))
    with pytest.raises(ValueError, match="must total at most"):
        read_trigger(data, 2, 8, 10)


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
