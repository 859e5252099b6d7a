"""TMA tensor maps of attention operands, for the Hopper kernels (forward and backward).

A tensor map (the driver's 128-byte ``CUtensorMap``) tells the copy engine where a tensor lies
and which box one load moves. The kernel takes q, k and v as 4-d maps ``[D, S, H, B]``
(innermost first) with boxes of 64 head dims x ``rows`` rows, swizzled by 128 bytes (the layout
``wgmma`` reads); rows past S read as zeros. Maps hold the tensor's address, so they are encoded
per call; ``RowMaps`` keeps the last few by address, shape and strides, so a training loop that
reuses its buffers pays a dictionary lookup instead of three driver calls.

A dim of extent 1 or stride 0 (a broadcast view) is encoded with extent 1, and its bit in the
returned ``broadcast`` flags tells the kernel to use coordinate 0 there.

Words that threads read with plain loads after the copy (the backward's lse2 and Δ rows, the
token tiles) travel through unswizzled maps of 32-bit words (``rows_map``, ``token_words_map``)
rather than raw bulk copies, which compute-sanitizer's racecheck cannot order (hopper.cuh).
"""

from __future__ import annotations

import ctypes
import functools
import math
import threading
from collections import OrderedDict

import torch

from gpu.launcher import check_driver_result, cuda_driver

#: Bytes of one map, and its alignment as a kernel parameter.
MAP_BYTES = 128
#: Head dims per box: one 128-byte swizzle row of 16-bit elements.
BOX_COLUMNS = 64
_UINT16, _UINT32, _NO_INTERLEAVE, _NO_SWIZZLE, _SWIZZLE_128B = 1, 2, 0, 0, 3
_L2_128B, _L2_256B, _ZERO_FILL = 2, 3, 0
#: 32-bit words in a row of a token tile's map (``token_tile_map_row`` in token_mask.cuh).
TOKEN_MAP_WORDS = 32
_CACHE_SIZE = 64


@functools.cache
def _encoder():
    encode = cuda_driver().cuTensorMapEncodeTiled
    u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
    int_ = ctypes.c_int
    encode.argtypes = [ctypes.c_void_p, int_, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p,
                       u32p, int_, int_, int_, int_]  # fmt: skip
    encode.restype = ctypes.c_int
    return encode


def map_geometry(tensor: torch.Tensor) -> tuple[list[int], list[int], int]:
    """``(extents, byte strides, broadcast bits)`` of a ``[B, H, S, D]`` view as a ``[D, S, H,
    B]`` map: strides of S, H and B; bit 0 / 1 set where the batch / head dim is broadcast
    (stride 0), which the map then gives extent 1.

    >>> map_geometry(torch.zeros(2, 1, 8, 64, dtype=torch.bfloat16).expand(2, 3, 8, 64))
    ([64, 8, 1, 2], [128, 1024, 1024], 2)
    """
    batch, heads, seq, dim = tensor.shape
    extents = [dim, seq, heads, batch]
    strides = [1, *reversed(tensor.stride()[:3])]  # elements, innermost first
    broadcast = 0
    for axis in (1, 2, 3):
        if extents[axis] > 1 and strides[axis] == 0:
            if axis == 1:
                raise ValueError(
                    "a view whose sequence stride is 0 (every row the same memory) cannot be "
                    "loaded by the Hopper kernel; pass .contiguous()"
                )
            broadcast |= 1 if axis == 3 else 2
            extents[axis] = 1
        if extents[axis] == 1:  # read at coordinate 0 only: any valid stride will do
            strides[axis] = strides[axis - 1] * extents[axis - 1]
    return extents, [s * tensor.element_size() for s in strides[1:]], broadcast


def encode_rows_map(tensor: torch.Tensor, rows: int) -> tuple[bytes, int]:
    """``(map bytes, broadcast bits)`` for a 16-bit ``[B, H, S, D]`` view loaded ``rows`` rows
    at a time (see ``map_geometry``). The view's strides must already satisfy
    ``gpu.operands.check_strides``.
    """
    extents, strides, broadcast = map_geometry(tensor)
    out = (ctypes.c_uint64 * (MAP_BYTES // 8))()
    result = _encoder()(
        ctypes.addressof(out), _UINT16, 4, tensor.data_ptr(), (ctypes.c_uint64 * 4)(*extents),
        (ctypes.c_uint64 * 3)(*strides), (ctypes.c_uint32 * 4)(BOX_COLUMNS, rows, 1, 1),
        (ctypes.c_uint32 * 4)(1, 1, 1, 1), _NO_INTERLEAVE, _SWIZZLE_128B, _L2_256B, _ZERO_FILL,
    )  # fmt: skip
    check_driver_result(result, "cuTensorMapEncodeTiled")
    return bytes(out), broadcast


def token_words_map(words: torch.Tensor) -> bytes:
    """The map of a plan's token tiles, a contiguous 32-bit ``[tiles, rows, words]`` tensor:
    rows of ``TOKEN_MAP_WORDS`` words, one tile a box (the kernels load tile ``z`` at map row
    ``z · box rows``)."""
    tile_words = words[0].numel()
    if words.element_size() != 4 or not words.is_contiguous() or tile_words % TOKEN_MAP_WORDS:
        raise ValueError(
            f"token words must be a contiguous 32-bit tensor of tiles of whole "
            f"{TOKEN_MAP_WORDS}-word rows, got {words.dtype} {tuple(words.shape)}"
        )
    rows = words.numel() // TOKEN_MAP_WORDS
    return _words_map(words.data_ptr(), (TOKEN_MAP_WORDS, rows), (TOKEN_MAP_WORDS,
                      tile_words // TOKEN_MAP_WORDS))  # fmt: skip


def rows_map(rows: torch.Tensor, block_m: int) -> bytes:
    """The map of the backward prep's fp32 ``[2, n]`` rows (lse2, then Δ): a box is one step's
    ``block_m`` rows of both, lse2 first (``n`` is a multiple of ``block_m``). Cached by address,
    as a training loop's prep reuses its buffer."""
    n = rows.shape[1]
    if rows.dtype != torch.float32 or not rows.is_contiguous() or rows.shape[0] != 2 or n % block_m:
        raise ValueError(
            f"rows must be a contiguous fp32 [2, n] tensor, n a multiple of {block_m}, got "
            f"{rows.dtype} {tuple(rows.shape)}"
        )
    return _words_map(rows.data_ptr(), (block_m, n // block_m, 2), (block_m, 1, 2))


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _words_map(address: int, extents: tuple[int, ...], box: tuple[int, ...]) -> bytes:
    """An unswizzled map of 32-bit words at ``address``, an array of ``extents`` (innermost
    first, contiguous), loaded ``box`` at a time."""
    rank = len(extents)
    strides = [4 * math.prod(extents[: axis + 1]) for axis in range(rank - 1)]
    out = (ctypes.c_uint64 * (MAP_BYTES // 8))()
    result = _encoder()(
        ctypes.addressof(out), _UINT32, rank, address, (ctypes.c_uint64 * rank)(*extents),
        (ctypes.c_uint64 * (rank - 1))(*strides), (ctypes.c_uint32 * rank)(*box),
        (ctypes.c_uint32 * rank)(*[1] * rank), _NO_INTERLEAVE, _NO_SWIZZLE, _L2_128B, _ZERO_FILL,
    )  # fmt: skip
    check_driver_result(result, "cuTensorMapEncodeTiled")
    return bytes(out)


class RowMaps:
    """Maps of a kernel build's operands (q, k, v for the forward; q, k, v, dO for the Hopper
    backward), one box height each, cached by address, shape and strides.

    >>> RowMaps(128, 128, 128).rows
    (128, 128, 128)
    """

    def __init__(self, *rows: int) -> None:
        self.rows = rows
        self._cache: OrderedDict[tuple, tuple] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, *tensors: torch.Tensor) -> tuple:
        """``(map of each operand, ..., broadcast)``: bits 2i and 2i + 1 for operand i's B and
        H."""
        key = tuple((t.data_ptr(), t.shape, t.stride()) for t in tensors)
        found = self._cache.get(key)
        if found is not None:
            return found
        encoded = [encode_rows_map(t, rows)
                   for t, rows in zip(tensors, self.rows, strict=True)]  # fmt: skip
        flags = sum(bits << (2 * i) for i, (_, bits) in enumerate(encoded))
        found = (*(map_bytes for map_bytes, _ in encoded), flags)
        with self._lock:
            self._cache[key] = found
            if len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return found
