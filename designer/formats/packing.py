"""A layout's blocks bit-packed: one bit per block, eight blocks per byte.

``{"bits": uint8 [ceil(H * M * N / 8)], "shape": [H, M, N]}``: the blocks in ``[H, M, N]``
row-major order, the first block in the most significant bit of byte 0 (``numpy.packbits``), the
unused low bits of the last byte zero. A 4 × 4096 × 4096 layout is 8 MiB (as int64: 512 MiB).
Plain ``numpy`` reads it back::

    blocks = np.unpackbits(bits.numpy(), count=h * m * n).reshape(h, m, n)

A layout held as row runs (past a dense grid's size) is stored by its runs instead:
``{"shape": [H, M, N], "row_runs": int32 [H * M], "starts": int32 [R], "stops": int32 [R]}``,
``row_runs`` the number of runs of each block row (``designer.block_runs``: ``row_ptr`` is their
running sum). 32 heads x 1M tokens of a sliding window plus sinks is about 10 MiB.

>>> packed = pack_blocks(Layout(torch.eye(3, dtype=torch.bool)[None], 16))
>>> packed["bits"].tolist(), packed["shape"]
([136, 128], [1, 3, 3])
>>> unpack_blocks(packed).int().tolist()
[[[1, 0, 0], [0, 1, 0], [0, 0, 1]]]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from designer.block_runs import BlockRuns
from designer.formats.torch_file import file_tensor
from designer.layout import Layout
from designer.partials import PartialBlocks
from designer.validate import (
    MAX_RUNS,
    check_int_list,
    check_keys,
    check_layout_shape,
    check_runs_shape,
)

#: The keys of a layout stored by its runs.
RUNS_KEYS = ("shape", "row_runs", "starts", "stops")


def pack_blocks(layout: Layout) -> dict[str, Any]:
    """``layout``'s blocks as packed bits and their shape (see the module docstring)."""
    bits = np.packbits(layout.to_numpy().reshape(-1))
    return {"bits": torch.from_numpy(bits), "shape": list(layout.shape)}


def pack_runs(layout: Layout) -> dict[str, Any]:
    """A layout held as runs, by its runs (see the module docstring)."""
    runs = layout.runs
    counts = (runs.row_ptr[1:] - runs.row_ptr[:-1]).to(torch.int32)
    return {"shape": list(runs.shape), "row_runs": counts, "starts": runs.starts,
            "stops": runs.stops}  # fmt: skip


def unpack_runs(packed: Any) -> BlockRuns:
    """The runs of a ``pack_runs`` dict read from a file: shape, dtypes, lengths and counts
    checked before anything is built, then the runs' own checks (sorted, disjoint, in range)."""
    check_keys("layout", packed, RUNS_KEYS)
    shape = check_runs_shape(*check_int_list("layout shape", packed["shape"], min_len=3, max_len=3))
    tensors = {key: file_tensor(f"layout {key}", packed[key]) for key in RUNS_KEYS[1:]}
    counts, starts, stops = tensors["row_runs"], tensors["starts"], tensors["stops"]
    for key, tensor in tensors.items():
        if tensor.dtype != torch.int32 or tensor.dim() != 1:
            raise ValueError(
                f"layout {key} must be int32 [n], got {tensor.dtype} {list(tensor.shape)}"
            )
    if len(counts) != shape[0] * shape[1] or len(starts) > MAX_RUNS or len(stops) != len(starts):
        raise ValueError(
            f"layout runs must have {shape[0] * shape[1]:,} row counts and at most {MAX_RUNS:,} "
            f"starts and as many stops, got {len(counts):,}, {len(starts):,} and {len(stops):,}"
        )
    if len(counts) and int(counts.min()) < 0:
        raise ValueError("layout row_runs must be >= 0")
    row_ptr = torch.cat(
        [torch.zeros(1, dtype=torch.int64), torch.cumsum(counts.to(torch.int64), 0)]
    )
    return BlockRuns(shape, row_ptr, starts.clone(), stops.clone())


def unpack_blocks(packed: Any) -> torch.Tensor:
    """The bool ``[H, M, N]`` blocks of a ``pack_blocks`` dict read from a file, checked first.

    The shape is checked against the layout limits and the bit count before anything is
    unpacked, so the work is bounded by the bytes the file really holds.
    """
    check_keys("layout", packed, ("bits", "shape"))
    shape = check_layout_shape(
        *check_int_list("layout shape", packed["shape"], min_len=3, max_len=3)
    )
    bits = file_tensor("layout bits", packed["bits"])
    cells = shape[0] * shape[1] * shape[2]
    need = -(-cells // 8)
    if bits.dtype != torch.uint8 or bits.dim() != 1 or bits.numel() != need:
        raise ValueError(
            f"layout bits must be uint8 [{need}] for shape {list(shape)}, "
            f"got {bits.dtype} {list(bits.shape)}"
        )
    unpacked = np.unpackbits(bits.contiguous().numpy())
    if unpacked[cells:].any():
        raise ValueError("layout bits past the last block must be 0")
    return torch.from_numpy(unpacked[:cells].view(np.bool_).reshape(shape))


def pack_partials(layout: Layout) -> dict[str, torch.Tensor] | None:
    """``layout``'s partial blocks for a file: ``{"index": int32 [P, 3], "bits": uint8 [P, b,
    ceil(b / 8)]}`` (``designer.partials``), or None."""
    partials = layout.partials
    return None if partials is None else {"index": partials.index, "bits": partials.bits}


def read_partials(value: Any) -> PartialBlocks | None:
    """The partial blocks of a ``pack_partials`` value read from a file, its tensors checked
    (real storage, dtype, shape, order, size) before any is used."""
    if value is None:
        return None
    check_keys("partials", value, ("index", "bits"))
    return PartialBlocks(file_tensor("index", value["index"]), file_tensor("bits", value["bits"]))
