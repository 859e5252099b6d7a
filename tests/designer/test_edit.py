import base64
import json
import time
import zlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.edit import (
    Band,
    Bitmap,
    Cells,
    Column,
    CopyHead,
    EditOp,
    Rect,
    Row,
    Transpose,
    apply_edit,
    edit_from_dict,
    region_from_dict,
)
from designer.layout import Layout
from designer.regions import MAX_COORD
from designer.validate import check_int_list
from tests.designer.formats.strategies import edits
from tests.factories import random_layout


# --------------------------------------------------------------------------- slow references
def reference_cells(region, n_rows, n_cols):
    """The set of (row, col) a region covers, one cell at a time."""
    if isinstance(region, Cells):
        return set(region.cells)
    if isinstance(region, Bitmap):  # the file's bytes, read bit by bit
        packed = zlib.decompress(base64.b64decode(region.deflated))
        return {
            (region.row0 + i // region.cols, region.col0 + i % region.cols)
            for i in range(region.rows * region.cols)
            if packed[i // 8] >> (7 - i % 8) & 1
        }
    covered = set()
    for r in range(n_rows):
        for c in range(n_cols):
            if isinstance(region, Rect):
                inside = region.row0 <= r <= region.row1 and region.col0 <= c <= region.col1
            elif isinstance(region, Row):
                inside = r == region.row
            elif isinstance(region, Column):
                inside = c == region.col
            else:
                inside = region.low <= r - c <= region.high
            if inside:
                covered.add((r, c))
    return covered


def reference_cell_pairs(cells):
    """Cells checked one coordinate at a time, as ``check_int_list`` reads each pair."""
    return tuple(
        tuple(check_int_list(f"cells[{i}]", cell, low=0, high=MAX_COORD, min_len=2, max_len=2))
        for i, cell in enumerate(cells)
    )


def reference_apply(layout, op):
    """Apply an edit with Python lists and loops, cell by cell."""
    grid = layout.blocks.tolist()
    h_count, m, n = layout.shape
    if isinstance(op, Transpose):
        grid = [[[grid[h][r][c] for r in range(m)] for c in range(n)] for h in range(h_count)]
    elif isinstance(op, CopyHead):
        for t in op.targets:
            grid[t] = [row[:] for row in layout.blocks[op.source].tolist()]
    else:
        heads = range(h_count) if op.heads is None else op.heads
        for h in heads:
            for r, c in reference_cells(op.region, m, n):
                old = grid[h][r][c]
                grid[h][r][c] = {"set": True, "clear": False, "toggle": not old}[op.action]
    return grid


@st.composite
def layouts_and_edits(draw):
    shape = (draw(st.integers(1, 4)), draw(st.integers(1, 7)), draw(st.integers(1, 7)))
    seed = draw(st.integers(0, 2**32 - 1))
    layout = random_layout(np.random.default_rng(seed), *shape, density=0.4)
    return layout, draw(edits(shape))


# --------------------------------------------------------------------------- behaviour
@settings(max_examples=200, deadline=None)
@given(layouts_and_edits())
def test_apply_edit_matches_cell_by_cell_reference(case):
    layout, op = case
    before = layout.blocks.clone()
    edited = apply_edit(layout, op)
    assert edited.blocks.tolist() == reference_apply(layout, op)
    assert edited.block_size == layout.block_size
    assert torch.equal(layout.blocks, before), "the input layout must not change"


@settings(max_examples=150, deadline=None)
@given(st.tuples(st.integers(1, 4), st.integers(1, 7), st.integers(1, 7)).flatmap(edits))
def test_edit_dict_round_trip_through_json(op):
    text = json.dumps(op.to_dict())
    assert edit_from_dict(json.loads(text)) == op


def test_band_is_clipped_to_the_grid():
    layout = apply_edit(Layout.zeros(1, 3, 5, 16), EditOp("set", Band(-1, 10)))
    assert layout.blocks[0].int().tolist() == [
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0],
    ]
    far = apply_edit(layout, EditOp("set", Band(-12, -9)))
    assert far == layout


def test_toggle_twice_restores_and_heads_are_respected(rng):
    layout = random_layout(rng, n_heads=3, n_q_blocks=5, n_k_blocks=6)
    op = EditOp("toggle", Rect(1, 2, 3, 5), heads=(0, 2))
    once = apply_edit(layout, op)
    assert torch.equal(once.blocks[1], layout.blocks[1])
    assert not torch.equal(once.blocks[0], layout.blocks[0])
    assert apply_edit(once, op) == layout


def test_copy_head_and_transpose_reuse_layout_operations(rng):
    layout = random_layout(rng, n_heads=3, n_q_blocks=4, n_k_blocks=6)
    copied = apply_edit(layout, CopyHead(2, (0, 1)))
    assert all(torch.equal(copied.blocks[h], layout.blocks[2]) for h in range(3))
    assert apply_edit(layout, Transpose()) == layout.transpose()
    assert apply_edit(layout, Transpose()).shape == (3, 6, 4)


#: Coordinates a painted or uploaded cell list may hold, good and bad, each kind of them.
COORDINATES = st.one_of(
    st.integers(0, 8),
    st.sampled_from([-1, MAX_COORD, MAX_COORD + 1, 2**63, 2**64, -(2**63) - 1]),
    st.sampled_from([True, False, 1.0, 2.5, "3", None, np.int64(2), np.uint8(1), np.bool_(True)]),
)
CELL_ITEMS = st.one_of(
    st.tuples(st.integers(0, 8), st.integers(0, 8)),
    st.lists(COORDINATES, min_size=2, max_size=2).map(tuple),
    st.lists(COORDINATES, min_size=0, max_size=3),
    st.sampled_from([5, "ab", b"\x01\x02", None, {0: 1, 1: 2}, np.array([1, 2])]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(CELL_ITEMS, min_size=1, max_size=6), st.booleans())
def test_cells_are_checked_as_the_pair_by_pair_reference_checks_them(cells, as_tuple):
    cells = tuple(cells) if as_tuple else cells
    try:
        expected = reference_cell_pairs(cells)
    except (TypeError, ValueError) as error:
        with pytest.raises(type(error)) as caught:
            Cells(cells)
        assert str(caught.value) == str(error)
        return
    region = Cells(cells)
    assert region.cells == expected
    assert all(type(v) is int for pair in region.cells for v in pair)
    mask = region.mask(max(r for r, _ in expected) + 1, max(c for _, c in expected) + 1)
    assert set(map(tuple, mask.nonzero().tolist())) == set(expected)


def test_a_lasso_of_31k_cells_names_the_first_bad_coordinate():
    rng = np.random.default_rng(0)
    flat = rng.choice(256 * 256, 31_000, replace=False)
    cells = list(zip((flat // 256).tolist(), (flat % 256).tolist(), strict=True))
    region = Cells(tuple(cells))
    assert region.cells == tuple(cells) and int(region.mask(256, 256).sum()) == 31_000
    first = next(k for k, (_, col) in enumerate(cells) if col >= 128)
    with pytest.raises(ValueError, match=rf"^cells\[{first}\] = \({cells[first][0]}, \d+\) is out"):
        region.mask(256, 128)
    bad = [*cells[:20_000], (cells[20_000][0], -5), *cells[20_001:]]
    with pytest.raises(ValueError, match=r"^cells\[20000\]\[1\] must be in \[0, 65536\], got -5$"):
        Cells(bad)
    bad = [*cells[:30_000], (1.5, 0), *cells[30_001:]]
    with pytest.raises(TypeError, match=r"^cells\[30000\]\[0\] must be an integer, got float"):
        Cells(bad)


def test_values_are_normalised_and_hashable():
    op = EditOp("set", Cells([[1, 2], (np.int64(3), 4)]), heads=[np.int64(1), 0])
    assert op.region.cells == ((1, 2), (3, 4)) and op.heads == (1, 0)
    assert op == EditOp("set", Cells(((1, 2), (3, 4))), heads=(1, 0))
    assert len({op, EditOp("set", Cells(((1, 2), (3, 4))), heads=(1, 0))}) == 1


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("region", "message"),
    [
        (Cells(((0, 0), (4, 1))), r"cells\[1\] = \(4, 1\) is outside the grid of 4 q_blocks x 6"),
        (Cells(((0, 6),)), r"cells\[0\] = \(0, 6\) is outside .* \(rows 0..3, cols 0..5\)"),
        (Rect(0, 0, 4, 2), r"rect corner \(row1, col1\) = \(4, 2\) is outside the grid"),
        (Rect(1, 1, 2, 6), r"rect corner \(row1, col1\) = \(2, 6\) is outside the grid"),
        (Row(4), r"row = 4 is outside the grid of 4 q_blocks x 6 k_blocks"),
        (Column(6), r"col = 6 is outside the grid of 4 q_blocks x 6 k_blocks"),
    ],
)
def test_region_outside_the_grid_is_refused(rng, region, message):
    layout = random_layout(rng, n_heads=2, n_q_blocks=4, n_k_blocks=6)
    before = layout.blocks.clone()
    with pytest.raises(ValueError, match=message):
        apply_edit(layout, EditOp("set", region))
    assert torch.equal(layout.blocks, before)


def test_heads_outside_the_layout_are_refused(rng):
    layout = random_layout(rng, n_heads=2)
    with pytest.raises(ValueError, match=r"heads\[1\] = 2 is outside the layout's 2 heads \(0..1"):
        apply_edit(layout, EditOp("set", Row(0), heads=(0, 2)))
    with pytest.raises(ValueError, match=r"source\[0\] = 5 is outside the layout's 2 heads"):
        apply_edit(layout, CopyHead(5, (0,)))
    with pytest.raises(ValueError, match=r"targets\[0\] = 3 is outside the layout's 2 heads"):
        apply_edit(layout, CopyHead(0, (3,)))


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: EditOp("paint", Row(0)), ValueError, "action must be one of 'set', 'clear'"),
        (lambda: EditOp("set", {"kind": "row"}), TypeError, "region must be a Cells, Rect, .*dict"),
        (lambda: EditOp("set", Row(0), heads=()), ValueError, r"heads must have 1 to 1024 items"),
        (lambda: EditOp("set", Row(0), heads=(1, 1)), ValueError, "must not repeat a head"),
        (lambda: EditOp("set", Row(0), heads=(-1,)), ValueError, r"heads\[0\] must be in \[0, 10"),
        (lambda: EditOp("set", Row(0), heads=1), TypeError, "heads must be a list of integers"),
        (lambda: Cells(()), ValueError, r"cells must list 1 to 1048576 blocks, got 0"),
        (lambda: Cells("ab"), TypeError, "cells must be a list of .row, col. pairs, got str"),
        (lambda: Cells(((1, 2, 3),)), ValueError, r"cells\[0\] must have 2 items, got 3"),
        (lambda: Cells(((1, 2.5),)), TypeError, r"cells\[0\]\[1\] must be an integer"),
        (lambda: Rect(3, 0, 1, 2), ValueError, r"row0 <= row1 .* got rows 3..1 and cols 0..2"),
        (lambda: Rect(0, 0, True, 1), TypeError, "row1 must be an integer, got bool"),
        (lambda: Row(-1), ValueError, r"row must be in \[0, 65536\], got -1"),
        (lambda: Column("2"), TypeError, "col must be an integer, got str"),
        (lambda: Band(2, 1), ValueError, "band must have low <= high .*, got low=2, high=1"),
        (lambda: Band(0, 1 << 20), ValueError, r"band high must be in \[-65536, 65536\]"),
        (lambda: CopyHead(0, ()), ValueError, r"targets must have 1 to 1024 items, got 0"),
        (lambda: CopyHead(None, (1,)), TypeError, "source must be an integer, got NoneType"),
    ],
)
def test_bad_edit_values_are_refused(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_apply_edit_checks_its_arguments(rng):
    layout = random_layout(rng)
    with pytest.raises(TypeError, match="layout must be a Layout, got Tensor"):
        apply_edit(layout.blocks, Transpose())
    with pytest.raises(TypeError, match="op must be an EditOp, CopyHead or Transpose, got dict"):
        apply_edit(layout, {"op": "transpose"})


ROW_EDIT = {"op": "edit", "action": "set", "region": {"kind": "row", "row": 1}, "heads": None}


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        ([], TypeError, "edit must be a dict, got list"),
        ({}, ValueError, "edit is missing 'op'"),
        ({"op": "erase"}, ValueError, "edit op must be one of 'edit', 'copy_head', 'transpose'"),
        ({"op": "transpose", "heads": None}, ValueError, r"transpose edit has unknown keys"),
        ({"op": "edit", "action": "set", "heads": None}, ValueError, "edit is missing 'region'"),
        ({"op": "copy_head", "source": 0}, ValueError, "copy_head edit is missing 'targets'"),
        ({**ROW_EDIT, "colour": 1}, ValueError, r"edit has unknown keys \['colour'\]"),
        ({**ROW_EDIT, "region": {"kind": "hex"}}, ValueError, "region kind must be one of 'cells'"),
        ({**ROW_EDIT, "region": {"kind": "row", "col": 1}}, ValueError, "row region is missing"),
        ({**ROW_EDIT, "region": {"kind": "row", "row": 1, "z": 1}}, ValueError, r"keys \['z'\]"),
        ({**ROW_EDIT, "region": "row 1"}, TypeError, "region must be a dict, got str"),
        ({**ROW_EDIT, "region": {"kind": "row", "row": "1"}}, TypeError, "row must be an integer"),
        ({**ROW_EDIT, "heads": [0, 0]}, ValueError, r"heads must not repeat a head, got \[0, 0\]"),
    ],
)
def test_bad_edit_dicts_are_refused(data, error, message):
    with pytest.raises(error, match=message):
        edit_from_dict(data)


def test_region_from_dict_reads_every_kind():
    for region in (Cells(((0, 1),)), Rect(0, 1, 2, 3), Row(2), Column(0), Band(-2, 1)):
        assert region_from_dict(region.to_dict()) == region


def test_a_bitmap_is_its_mask_cropped_and_reads_back_from_its_dict():
    mask = np.zeros((6, 7), dtype=bool)
    mask[[1, 2, 4], [2, 6, 3]] = True
    region = Bitmap.of(mask, 10, 20)
    assert (region.row0, region.col0, region.rows, region.cols, region.count) == (11, 22, 4, 5, 3)
    assert reference_cells(region, 40, 40) == {(11, 22), (12, 26), (14, 23)}
    assert region_from_dict(json.loads(json.dumps(region.to_dict()))) == region
    assert Bitmap.of(np.zeros((3, 3), dtype=bool)) is None
    with pytest.raises(ValueError, match=r"bitmap corner .* = \(14, 26\) is outside the grid"):
        region.check_fits(14, 40)


def _deflated(raw: bytes) -> str:
    return base64.b64encode(zlib.compress(raw)).decode()


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ((0, 0, 2, 4, "not base64!"), ValueError, "not base64 of zlib data"),
        ((0, 0, 2, 4, base64.b64encode(b"plain").decode()), ValueError, "not base64 of zlib"),
        ((0, 0, 2, 4, _deflated(b"\x01\x02")), ValueError, r"must be 1 bytes .*, got 2"),
        ((0, 0, 2, 4, _deflated(b"")), ValueError, r"must be 1 bytes for 8 blocks, got 0"),
        ((0, 0, 1, 3, _deflated(b"\x01")), ValueError, "past the last block must be 0"),
        ((0, 0, 2, 4, _deflated(b"\x00")), ValueError, "must set at least one block"),
        ((0, 0, 2, 4, 7), TypeError, "deflated must be a base64 string"),
        ((0, 0, 0, 4, _deflated(b"\x01")), ValueError, r"rows must be in \[1, "),
        ((65536, 0, 2, 4, _deflated(b"\x01")), ValueError, r"rows must be in \[1, 1\], got 2"),
        ((0, 0, 1 << 14, 1 << 14, "A" * 10), ValueError, "at most 67,108,864 blocks"),
        ((0, 0, 1, 8, "A" * 200), ValueError, r"at most \d+ characters for 8 blocks"),
    ],
)
def test_bad_bitmaps_are_refused(fields, error, message):
    with pytest.raises(error, match=message):
        Bitmap(*fields)


def test_a_zlib_bomb_in_a_bitmap_is_refused_without_inflating_it():
    bomb = _deflated(bytes(64 << 20))  # 64 MiB of zeros in 65 KB
    start = time.process_time()
    with pytest.raises(ValueError, match="must be 8 bytes for 64 blocks, got 9 or more"):
        Bitmap(0, 0, 8, 8, bomb[:100])  # within the length bound; inflates past the box
    assert time.process_time() - start < 0.1
