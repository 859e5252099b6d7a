"""``sdd_segment`` against the slow transcription of the specification, and its safe-mode rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import designer.segment as segment_module
from designer.layout import Layout
from designer.segment import deepspeed_repeats, sdd_segment
from tests.designer.segment_reference import reference_sdd_segment


def as_lists(segments):
    return [(width, rows.tolist()) for width, rows in segments]


def reference_lists(layout, start_width, *, safe=False):
    return [
        (width, [list(row) for row in rows])
        for width, rows in reference_sdd_segment(layout, start_width, refuse_invalid=safe)
    ]


def all_rows(segments) -> np.ndarray:
    return np.concatenate([rows.numpy() for _, rows in segments]) if segments else np.zeros((0, 4))


def longformer_layout() -> torch.Tensor:
    """DeepSpeed's ``BSLongformerSparsityConfig``: window 5, globals [0, 9], 32 x 32 blocks."""
    layout = torch.zeros(1, 32, 32, dtype=torch.int64)
    for row in range(32):
        layout[0, row, max(0, row - 2) : row + 3] = 1
    for index in (0, 9):
        layout[0, index, :] = 1
        layout[0, :, index] = 1
    return layout


PHANTOM_EXAMPLE = torch.tensor([[[0, 1, 1, 1], [1, 1, 1, 1], [1, 0, 1, 1]]], dtype=torch.int32)


# ------------------------------------------------------------------ the specification's examples
@pytest.mark.parametrize("mode", ["safe", "deepspeed"])
@pytest.mark.parametrize("start_width", [64, 2])
def test_all_ones_3x3(mode, start_width):
    out = sdd_segment(torch.ones(1, 3, 3, dtype=torch.int32), start_width, mode=mode)
    assert as_lists(out) == [
        (2, [[0, 0, 0, 0], [0, 0, 1, 1], [0, 1, 0, 3], [0, 1, 1, 4]]),
        (1, [[0, 0, 2, 2], [0, 1, 2, 5], [0, 2, 0, 6], [0, 2, 1, 7], [0, 2, 2, 8]]),
    ]
    assert all(rows.dtype == torch.int64 for _, rows in out)


def test_phantom_example_deepspeed_output():
    out = sdd_segment(PHANTOM_EXAMPLE, 3, mode="deepspeed")
    group = [  # rows {0, 1, 2} x cols {0, 2, 3}; (0, 0) is absent and reported as orig_idx 0
        [0, 0, 0, 0], [0, 0, 2, 1], [0, 0, 3, 2],
        [0, 1, 0, 3], [0, 1, 2, 5], [0, 1, 3, 6],
        [0, 2, 0, 7], [0, 2, 2, 8], [0, 2, 3, 9],
    ]  # fmt: skip
    assert as_lists(out) == [(3, group), (1, [[0, 0, 1, 0], [0, 1, 1, 4]])]


def test_phantom_example_safe_refuses_the_group():
    out = sdd_segment(PHANTOM_EXAMPLE, 3)
    singles = [[0, int(r), int(c), i] for i, (_, r, c) in enumerate(PHANTOM_EXAMPLE.nonzero())]
    assert as_lists(out) == [(1, singles)]


def test_even_rows_and_cols_make_one_non_contiguous_group():
    layout = torch.zeros(1, 16, 16, dtype=torch.int32)
    layout[0, ::2, ::2] = 1
    out = sdd_segment(layout, 8)
    expected = [[0, 2 * i, 2 * j, 8 * i + j] for i in range(8) for j in range(8)]
    assert as_lists(out) == [(8, expected)]


@pytest.mark.parametrize(("start_width", "widths"), [(5, [5, 2, 1]), (6, [6, 3, 1]), (3, [3, 1])])
def test_halving_chain(start_width, widths):
    layout = torch.ones(2, 9, 11, dtype=torch.int64)
    out = sdd_segment(layout, start_width)
    assert [width for width, _ in out] == widths
    assert as_lists(out) == reference_lists(layout, start_width)


@pytest.mark.parametrize("mode", ["safe", "deepspeed"])
def test_nothing_to_do(mode):
    assert sdd_segment(torch.zeros(2, 5, 7, dtype=torch.int32), 4, mode=mode) == []
    assert sdd_segment(torch.ones(2, 5, 7, dtype=torch.int32), 0, mode=mode) == []
    assert sdd_segment(torch.ones(2, 0, 7, dtype=torch.int32), 4, mode=mode) == []


def test_huge_start_width_is_clamped_without_changing_the_result():
    layout = torch.ones(1, 3, 3, dtype=torch.int32)
    assert as_lists(sdd_segment(layout, 2**40)) == as_lists(sdd_segment(layout, 64))
    layout = torch.ones(2, 5, 6, dtype=torch.int32)
    huge = 10**18 + 7
    tail = huge
    while tail > 5:  # the part of the halving chain that fits in 5 x 6
        tail //= 2
    assert as_lists(sdd_segment(layout, huge)) == reference_lists(layout, tail)


def test_longformer_example_emits_the_corner_three_times_in_deepspeed_mode():
    layout = longformer_layout()
    deepspeed = all_rows(sdd_segment(layout, 4, mode="deepspeed"))
    corner = (deepspeed[:, 1] == 0) & (deepspeed[:, 2] == 0)
    assert corner.sum() == 3 and len(deepspeed) == int(layout.sum()) + 2
    safe = all_rows(sdd_segment(layout, 4))
    assert len(safe) == int(layout.sum())


def test_deepspeed_rows_beyond_the_spare_room_are_rerun(monkeypatch):
    layout = torch.cat([longformer_layout(), torch.tensor(1) - longformer_layout()])
    monkeypatch.setattr(segment_module, "_DEEPSPEED_SPARE_ROWS", 0.0)
    out = sdd_segment(layout, 4, mode="deepspeed")
    assert as_lists(out) == reference_lists(layout, 4)


def test_deepspeed_repeats():
    repeats = deepspeed_repeats(PHANTOM_EXAMPLE, 3)
    assert repeats.dtype == np.int32 and repeats.shape == (1, 3, 4)
    assert np.argwhere(repeats).tolist() == [[0, 0, 0]] and repeats[0, 0, 0] == 1
    longformer = deepspeed_repeats(longformer_layout(), 4)
    assert np.argwhere(longformer).tolist() == [[0, 0, 0]] and longformer[0, 0, 0] == 2
    for start_width in (0, 1, 2):
        assert not deepspeed_repeats(longformer_layout(), start_width).any()
    assert not deepspeed_repeats(torch.zeros(2, 3, 3, dtype=torch.int32), 4).any()


# ------------------------------------------------------------------ against the reference
DTYPES = [torch.int32, torch.int64, torch.bool, torch.uint8]


@st.composite
def layouts(draw, max_side=24):
    n_heads = draw(st.integers(1, 3))
    n_rows = draw(st.integers(1, max_side))
    n_cols = draw(st.integers(1, max_side))
    density = draw(st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 1.0)))
    seed = draw(st.integers(0, 2**32 - 1))
    blocks = np.random.default_rng(seed).random((n_heads, n_rows, n_cols)) < density
    tensor = torch.from_numpy(blocks).to(draw(st.sampled_from(DTYPES)))
    return tensor.numpy() if draw(st.booleans()) else tensor


@settings(max_examples=150, deadline=None)
@given(layouts(), st.integers(0, 9))
def test_deepspeed_mode_equals_the_reference(layout, start_width):
    out = sdd_segment(layout, start_width, mode="deepspeed")
    assert as_lists(out) == reference_lists(layout, start_width)


@settings(max_examples=150, deadline=None)
@given(layouts(), st.integers(0, 9))
def test_safe_mode_equals_the_reference_with_its_refusal_rule(layout, start_width):
    out = sdd_segment(layout, start_width)
    assert as_lists(out) == reference_lists(layout, start_width, safe=True)


def test_larger_layout_equals_the_reference(rng):
    layout = torch.from_numpy(rng.random((2, 48, 40)) < 0.8)
    for mode, safe in (("deepspeed", False), ("safe", True)):
        assert as_lists(sdd_segment(layout, 8, mode=mode)) == reference_lists(layout, 8, safe=safe)


def test_threads_do_not_change_the_result(rng, monkeypatch):
    """A layout large enough for threads equals its heads segmented one by one, on one thread."""
    layout = torch.from_numpy(rng.random((4, 128, 128)) < 0.7)
    assert layout.numel() >= segment_module._THREADED_MIN_CELLS
    for mode in ("safe", "deepspeed"):
        together = sdd_segment(layout, 8, mode=mode)
        monkeypatch.setattr(segment_module, "_usable_cpus", lambda: 1)
        alone = sdd_segment(layout, 8, mode=mode)
        monkeypatch.undo()
        assert [w for w, _ in alone] == [w for w, _ in together]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(alone, together, strict=True))
        first_idx = 0
        per_width: dict[int, list[torch.Tensor]] = {}
        for h in range(4):
            for width, rows in sdd_segment(layout[h : h + 1], 8, mode=mode):
                rows = rows.clone()
                rows[:, 0] = h
                rows[:, 3] += first_idx * layout[h][rows[:, 1], rows[:, 2]]  # phantoms keep 0
                per_width.setdefault(width, []).append(rows)
            first_idx += int(layout[h].sum())
        assert [w for w, _ in together] == sorted(per_width, reverse=True)
        for width, rows in together:
            assert torch.equal(rows, torch.cat(per_width[width]))


# ------------------------------------------------------------------ safe-mode properties
@settings(max_examples=200, deadline=None)
@given(layouts(max_side=32), st.integers(0, 12))
def test_safe_mode_properties(layout, start_width):
    before = layout.copy() if isinstance(layout, np.ndarray) else layout.clone()
    out = sdd_segment(layout, start_width)
    blocks = torch.as_tensor(layout).numpy() != 0
    assert np.array_equal(np.asarray(layout), np.asarray(before))  # never mutated
    if start_width == 0 or not blocks.any():
        assert out == []
        return
    widths = [width for width, _ in out]
    assert widths == sorted(set(widths), reverse=True)
    rows = all_rows(out)
    cells = [tuple(cell) for cell in rows[:, :3].tolist()]
    assert sorted(cells) == [tuple(cell) for cell in np.argwhere(blocks).tolist()]  # once each
    rank = {tuple(cell): i for i, cell in enumerate(np.argwhere(blocks).tolist())}
    assert [rank[cell] for cell in cells] == rows[:, 3].tolist()
    for width, tensor in out:
        check_groups(width, tensor.numpy())


def check_groups(width: int, rows: np.ndarray) -> None:
    """Rows are consecutive groups, each one head's ``R x C`` row-major, R and C ascending."""
    assert len(rows) % (width * width) == 0
    groups = rows.reshape(-1, width * width, 4)
    assert np.all(np.diff(groups[:, 0, 0]) >= 0)  # ascending head
    for group in groups:
        assert np.all(group[:, 0] == group[0, 0])
        grid = group[:, 1:3].reshape(width, width, 2)
        group_rows, group_cols = grid[:, 0, 0], grid[0, :, 1]
        assert np.all(np.diff(group_rows) > 0) and np.all(np.diff(group_cols) > 0)
        assert np.array_equal(grid[:, :, 0], np.repeat(group_rows[:, None], width, 1))
        assert np.array_equal(grid[:, :, 1], np.repeat(group_cols[None, :], width, 0))


@settings(max_examples=150, deadline=None)
@given(layouts(max_side=32), st.integers(1, 12))
def test_safe_equals_deepspeed_where_deepspeed_is_valid(layout, start_width):
    deepspeed = sdd_segment(layout, start_width, mode="deepspeed")
    rows = all_rows(deepspeed)
    valid = len(rows) == int((np.asarray(layout) != 0).sum())  # no phantom, no duplicate
    safe = sdd_segment(layout, start_width)
    assert (as_lists(safe) == as_lists(deepspeed)) == valid


# ------------------------------------------------------------------ inputs
def test_accepts_layouts_arrays_and_any_non_zero_value():
    blocks = torch.tensor([[[1, 0, 1], [1, 1, 0], [0, 1, 1]]])
    expected = as_lists(sdd_segment(blocks, 2))
    assert as_lists(sdd_segment(Layout(blocks, 16), 2)) == expected
    assert as_lists(sdd_segment(blocks.numpy().astype(np.int8) * 7, 2)) == expected
    assert as_lists(sdd_segment(blocks * 3, 2)) == expected


def test_non_contiguous_input():
    blocks = torch.from_numpy(np.random.default_rng(3).random((2, 9, 7)) < 0.6)
    transposed = blocks.transpose(1, 2)
    assert not transposed.is_contiguous()
    assert as_lists(sdd_segment(transposed, 4)) == reference_lists(transposed.contiguous(), 4)


def test_int32_input_is_not_zeroed():
    """DeepSpeed's C++ zeroed an int32 input in place; we never touch it."""
    blocks = torch.ones(2, 4, 4, dtype=torch.int32)
    sdd_segment(blocks, 2, mode="deepspeed")
    assert bool((blocks == 1).all())


@pytest.mark.parametrize(
    ("layout", "error", "match"),
    [
        (torch.ones(1, 2, 2), TypeError, r"layout must hold integers or bools, got dtype"),
        (np.ones((1, 2, 2), dtype=np.float32), TypeError, r"layout must hold integers or bools"),
        ([[[1]]], TypeError, r"layout must be a torch tensor or numpy array, got list"),
        (torch.ones(2, 2, dtype=torch.int32), ValueError, r"layout must have rank 3 .*got shape"),
        (torch.ones(1, 1, 2, 2, dtype=torch.int32), ValueError, r"rank 3 .*\[1, 1, 2, 2\]"),
        (
            torch.tensor([[[1, -2]]]),
            ValueError,
            r"layout must not hold negative values, got minimum -2",
        ),
    ],
)
def test_bad_layouts(layout, error, match):
    with pytest.raises(error, match=match):
        sdd_segment(layout, 2)


def test_huge_layout_is_refused_before_any_work():
    huge = torch.zeros(1, 1, 1, dtype=torch.bool).expand(1, 1 << 14, 1 << 13)
    with pytest.raises(ValueError, match=r"layout has 134,217,728 cells .* more than the limit"):
        sdd_segment(huge, 2)


@pytest.mark.parametrize(
    ("start_width", "error", "match"),
    [
        (True, TypeError, r"start_width must be an integer, got bool True"),
        (2.0, TypeError, r"start_width must be an integer, got float 2.0"),
        (-1, ValueError, r"start_width must be >= 0, got -1"),
    ],
)
def test_bad_start_width(start_width, error, match):
    with pytest.raises(error, match=match):
        sdd_segment(torch.ones(1, 2, 2, dtype=torch.int32), start_width)


def test_bad_mode():
    with pytest.raises(ValueError, match=r"mode must be one of 'safe', 'deepspeed', got 'fast'"):
        sdd_segment(torch.ones(1, 2, 2, dtype=torch.int32), 2, mode="fast")
