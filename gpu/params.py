"""The kernels' parameter structs, mirrored from ``gpu/include/params.cuh`` field for field.

Each attention kernel takes one struct by value (a ``__grid_constant__`` argument). The
``ctypes.Structure`` here is its layout on the host, by C's rules (each field at its natural
alignment, the struct padded to its own); ``packer`` derives from it a ``struct.Struct`` that
writes one call's values, given in field order, with a single C call: a launch costs what it did
with one argument per value, where setting ctypes fields one by one would cost a microsecond more.
``tests/gpu/test_params.py`` compiles ``params.cuh`` and checks every field's offset and size and
each total size against these mirrors (nvcc on the CPU, NVRTC on the GPU), and that the
launchers' values land in the fields of their names.

>>> packer(ForwardParams).size, ForwardParams.size()
(184, 184)
"""

from __future__ import annotations

import ctypes
import functools
import struct

Pointer = ctypes.c_void_p
Stride = ctypes.c_int64
Int = ctypes.c_int32
Float = ctypes.c_float
#: ``TensorMap``: the driver's 128-byte TMA descriptor (64-byte aligned in C).
TensorMap = ctypes.c_uint64 * 16
_CODES = {Pointer: "Q", Stride: "q", Int: "i", Float: "f", TensorMap: "128s"}


def _each(kind: type, names: str) -> list[tuple[str, type]]:
    return [(name, kind) for name in names.split()]


class KernelParams(ctypes.Structure):
    """Base of the mirrors. ``alignment`` is the C struct's alignment where a member asks for
    more than ctypes can express (a ``TensorMap``'s 64 bytes)."""

    alignment = 8

    @classmethod
    def size(cls) -> int:
        """``sizeof`` of the C struct: the fields, padded to the struct's alignment."""
        return -(-ctypes.sizeof(cls) // cls.alignment) * cls.alignment


class ForwardParams(KernelParams):
    """``fused_attention_fwd`` (``gpu/forward/sm80.cu``)."""

    _fields_ = [
        *_each(Pointer, "q k v out lse items entries token_words"),
        *_each(Stride, "q_sb q_sh q_ss k_sb k_sh v_sb v_sh o_sb o_sh o_ss"),
        *_each(Int, "batch q_heads heads_per_item kv_group seq_q seq_k"),
        *_each(Int, "causal_offset sub_rows_log2 sub_cols_log2"),
        ("scale_log2", Float),
    ]


class HopperForwardParams(KernelParams):
    """``fused_attention_fwd_hopper`` (``gpu/forward/sm90.cu``)."""

    alignment = 64
    _fields_ = [
        *_each(TensorMap, "q_map k_map v_map token_map"),
        *_each(Pointer, "out lse items entries token_words"),
        *_each(Stride, "o_sb o_sh o_ss"),
        *_each(Int, "n_work batch q_heads heads_per_item kv_group head_group seq_q seq_k"),
        ("broadcast", Int),
        *_each(Int, "causal_offset sub_rows_log2 sub_cols_log2"),
        ("scale_log2", Float),
    ]


class BackwardPrepParams(KernelParams):
    """``attention_bwd_prep`` (``gpu/backward/fused.cu``)."""

    _fields_ = [
        *_each(Pointer, "o d_o lse d_lse lse2 delta"),
        *_each(Stride, "o_sb o_sh o_ss do_sb do_sh do_ss"),
        *_each(Int, "q_heads seq_q seq_q_pad n_rows"),
    ]


class BackwardParams(KernelParams):
    """``attention_bwd`` (``gpu/backward/fused.cu``)."""

    _fields_ = [
        *_each(Pointer, "q k v d_o lse2 delta dq_acc dk dv lists entries order token_words"),
        *_each(Stride, "q_sb q_sh q_ss k_sb k_sh k_ss v_sb v_sh v_ss do_sb do_sh do_ss"),
        *_each(Int, "batch q_heads kv_heads kv_group shared_layout n_k_tiles seq_q seq_k"),
        ("seq_q_pad", Int),
        *_each(Int, "causal_offset sub_rows_log2 sub_cols_log2"),
        *_each(Float, "scale scale_log2"),
    ]


class HopperBackwardParams(KernelParams):
    """``attention_bwd_hopper`` (``gpu/backward/sm90.cu``)."""

    alignment = 64
    _fields_ = [
        *_each(TensorMap, "q_map k_map v_map do_map rows_map token_map"),
        *_each(Pointer, "dq_acc dk dv dk_part dv_part lists entries order"),
        *_each(Int, "batch q_heads kv_heads kv_group n_splits shared_layout n_k_tiles seq_q"),
        *_each(Int, "seq_k seq_q_pad broadcast key_tiles_inner causal_offset sub_rows_log2"),
        ("sub_cols_log2", Int),
        *_each(Float, "scale scale_log2"),
    ]


class DqConvertParams(KernelParams):
    """``attention_bwd_dq_convert`` (``gpu/backward/sm90.cu``)."""

    _fields_ = [
        *_each(Pointer, "dq_acc dq"),
        ("n_vectors", Stride),
        *_each(Int, "seq_q seq_q_pad"),
    ]


class HopperDqParams(KernelParams):
    """``attention_bwd_dq_hopper`` (``gpu/backward/sm90_dq.cu``)."""

    alignment = 64
    _fields_ = [
        *_each(TensorMap, "q_map k_map v_map do_map token_map"),
        *_each(Pointer, "lse2 delta dq items entries"),
        *_each(Int, "n_work batch q_heads heads_per_item kv_group seq_q seq_k seq_q_pad"),
        *_each(Int, "broadcast causal_offset sub_rows_log2 sub_cols_log2"),
        *_each(Float, "scale scale_log2"),
    ]


#: Every kernel's parameter struct, by its name in ``params.cuh``.
STRUCTS = {cls.__name__: cls for cls in (ForwardParams, HopperForwardParams, BackwardPrepParams,
                                         BackwardParams, HopperBackwardParams, DqConvertParams,
                                         HopperDqParams)}  # fmt: skip


@functools.cache
def packer(params: type[KernelParams]) -> struct.Struct:
    """A ``struct.Struct`` whose ``pack_into(buffer, 0, *values)`` writes ``params`` from its
    values in field order (pointers as ints, tensor maps as 128 bytes), padding included."""
    fmt, end = "<", 0
    for name, kind in params._fields_:
        field = getattr(params, name)
        fmt += "x" * (field.offset - end) + _CODES[kind]
        end = field.offset + field.size
    return struct.Struct(fmt + "x" * (params.size() - end))
