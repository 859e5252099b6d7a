"""A layout's blocks bit-packed: one bit per block, eight blocks per byte.

``{"bits": uint8 [ceil(H * M * N / 8)], "shape": [H, M, N]}``: the blocks in ``[H, M, N]``
row-major order, the first block in the most significant bit of byte 0 (``numpy.packbits``), the
unused low bits of the last byte zero. A 4 × 4096 × 4096 layout is 8 MiB (as int64: 512 MiB).
Plain ``numpy`` reads it back::

    blocks = np.unpackbits(bits.numpy(), count=h * m * n).reshape(h, m, n)

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

from designer.formats.torch_file import file_tensor
from designer.layout import Layout
from designer.partials import PartialBlocks
from designer.validate import check_int_list, check_keys, check_layout_shape


def pack_blocks(layout: Layout) -> dict[str, Any]:
    """``layout``'s blocks as packed bits and their shape (see the module docstring)."""
    bits = np.packbits(layout.to_numpy().reshape(-1))
    return {"bits": torch.from_numpy(bits), "shape": list(layout.shape)}


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
