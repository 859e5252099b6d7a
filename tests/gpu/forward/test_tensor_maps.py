"""Tensor-map geometry of attention operands (the part of encoding that needs no GPU)."""

from __future__ import annotations

import pytest
import torch

from gpu.forward.tensor_maps import map_geometry


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
