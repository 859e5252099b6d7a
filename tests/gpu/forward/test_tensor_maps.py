"""Tensor-map geometry of attention operands (the part of encoding that needs no GPU)."""

from __future__ import annotations

import ctypes

import pytest
import torch

from gpu.forward import tensor_maps
from gpu.forward.tensor_maps import map_geometry, rows_map, token_words_map


def test_contiguous_view_maps_its_own_strides():
    x = torch.zeros(2, 3, 100, 128, dtype=torch.float16)
    assert map_geometry(x) == ([128, 100, 3, 2], [256, 100 * 256, 300 * 256], 0)


def test_bshd_memory_keeps_its_interleaved_strides():
    x = torch.zeros(2, 100, 3, 64, dtype=torch.bfloat16).transpose(1, 2)
    assert map_geometry(x) == ([64, 100, 3, 2], [3 * 128, 128, 300 * 128], 0)


def test_broadcast_dims_get_extent_one_and_a_flag():
    row = torch.zeros(1, 1, 10, 64, dtype=torch.bfloat16)
    extents, strides, flags = map_geometry(row.expand(4, 5, 10, 64))
    assert extents == [64, 10, 1, 1] and flags == 3
    assert all(s > 0 and s % 16 == 0 for s in strides)


def test_size_one_dims_get_a_valid_stride_whatever_torch_reports():
    x = torch.zeros(1, 1, 1, 64, dtype=torch.bfloat16).as_strided((1, 1, 1, 64), (7, 5, 3, 1))
    extents, strides, flags = map_geometry(x)
    assert extents == [64, 1, 1, 1] and flags == 0
    assert strides == [128, 128, 128]


def test_a_broadcast_sequence_is_refused():
    x = torch.zeros(1, 1, 1, 64, dtype=torch.bfloat16).expand(1, 1, 8, 64)
    with pytest.raises(ValueError, match="sequence stride is 0"):
        map_geometry(x)


@pytest.fixture
def encoded(monkeypatch):
    """What each words map asks the driver for: (rank, address, extents, byte strides, box)."""
    calls = []

    def encode(out, dtype, rank, address, extents, strides, box, steps, *modes):
        calls.append((rank, address, list(extents), list(strides[: rank - 1]), list(box)))
        assert dtype == 2 and list(steps) == [1] * rank and modes[:2] == (0, 0)  # u32, plain
        ctypes.memset(out, rank, 128)
        return 0

    monkeypatch.setattr(tensor_maps, "_encoder", lambda: encode)
    tensor_maps._words_map.cache_clear()
    yield calls
    tensor_maps._words_map.cache_clear()


def test_the_rows_map_boxes_one_step_of_lse2_and_delta_together(encoded):
    rows = torch.zeros(2, 640)
    assert rows_map(rows, 64) == bytes([3]) * 128
    assert encoded == [(3, rows.data_ptr(), [64, 10, 2], [256, 2560], [64, 1, 2])]
    rows_map(rows, 64)  # the same buffer again: cached, no second driver call
    assert len(encoded) == 1


def test_the_token_map_boxes_one_tile_as_rows_of_32_words(encoded):
    words = torch.zeros(3, 128, 2, dtype=torch.int32)
    assert token_words_map(words) == bytes([2]) * 128
    assert encoded == [(2, words.data_ptr(), [32, 24], [128], [32, 8])]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: rows_map(torch.zeros(2, 100), 64), "multiple of 64"),
        (lambda: rows_map(torch.zeros(3, 128), 64), r"\[2, n\]"),
        (lambda: rows_map(torch.zeros(2, 128, dtype=torch.float64), 64), "fp32"),
        (lambda: rows_map(torch.zeros(128, 2).t(), 64), "contiguous"),
        (lambda: token_words_map(torch.zeros(2, 3, 2, dtype=torch.int32)), "32-word rows"),
        (lambda: token_words_map(torch.zeros(2, 64, 2, dtype=torch.int64)), "32-bit"),
    ],
)
def test_words_maps_refuse_what_their_boxes_cannot_read(encoded, call, match):
    with pytest.raises(ValueError, match=match):
        call()
    assert encoded == []
