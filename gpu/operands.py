"""Checks of the tensors an attention call takes and of how they fit its plan, shared by the
public API and the launchers.

Every message names the argument, what is allowed and what it got. The checks read only shapes,
strides, dtypes and devices (no device synchronisation), so they cost microseconds per call.

Zero-copy views: our kernels read q, k, v and out through their strides. Any view whose head dim
is contiguous (stride 1) and whose other strides are multiples of 8 elements, starting at a
16-byte aligned address, is read in place: contiguous ``[B, H, S, D]``, the ``transpose(1, 2)``
of ``[B, S, H, D]`` memory (``x.view(B, S, H, D).transpose(1, 2)``), and slices of a fused
``[B, S, 3, H, D]`` projection.
"""

from __future__ import annotations

from typing import Any

import torch

from designer.validate import check_float

#: Bytes every row start must be aligned to (16-byte vector loads and stores).
ALIGNMENT_BYTES = 16


def check_attention_operands(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, dtypes: tuple[torch.dtype, ...]
) -> None:
    """q ``[B, Hq, Sq, D]``, k and v ``[B, Hkv, Sk, D]`` with ``Hkv`` dividing ``Hq``."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch tensor, got {type(x).__name__}")
        if len(x.shape) != 4 or 0 in x.shape:
            raise ValueError(f"{name} must be a non-empty [B, H, S, D] tensor, got {list(x.shape)}")
    q_shape, k_shape = q.shape, k.shape
    if k_shape != v.shape:
        raise ValueError(
            f"k and v must have the same shape, got {list(k_shape)} and {list(v.shape)}"
        )
    if k_shape[0] != q_shape[0] or k_shape[3] != q_shape[3]:
        raise ValueError(
            f"k must be [B, Hkv, Sk, D] with q's B and D {list(q_shape)}, got {list(k_shape)}"
        )
    if q_shape[1] % k_shape[1]:
        raise ValueError(
            f"k's heads Hkv must divide q's heads Hq = {q_shape[1]} (GQA/MQA), got Hkv = "
            f"{k_shape[1]}"
        )
    dtype, device = q.dtype, q.device
    if dtype not in dtypes:
        names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TypeError(f"q dtype must be one of {names}, got {dtype}")
    for name, x in (("k", k), ("v", v)):
        if x.dtype != dtype or x.device != device:
            raise ValueError(
                f"{name} must match q's dtype and device ({dtype}, {device}), "
                f"got {x.dtype}, {x.device}"
            )


def check_strides(name: str, x: torch.Tensor) -> None:
    """Head dim contiguous, other strides multiples of 8 elements, 16-byte aligned start."""
    if x.data_ptr() % ALIGNMENT_BYTES:
        raise ValueError(
            f"{name} must start at a {ALIGNMENT_BYTES}-byte aligned address, got one "
            f"{x.data_ptr() % ALIGNMENT_BYTES} bytes past; pass {name}.clone()"
        )
    per_row = ALIGNMENT_BYTES // x.element_size()
    if x.is_contiguous() and x.shape[3] % per_row == 0:
        return  # every stride is a multiple of D
    strides = x.stride()
    if strides[3] != 1 and x.shape[3] > 1:
        raise ValueError(
            f"{name} must have a contiguous head dim (stride 1 in dim 3), got strides "
            f"{list(strides)}; pass {name}.contiguous()"
        )
    if any(s % per_row for s, n in zip(strides[:3], x.shape[:3], strict=True) if n > 1):
        raise ValueError(
            f"{name}'s strides of dims 0-2 must be multiples of {per_row} elements "
            f"({ALIGNMENT_BYTES} bytes), got {list(strides)}; pass {name}.contiguous()"
        )


def check_out(name: str, out: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``out`` has q's shape, dtype and device (any strides ``check_strides`` accepts)."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{name} must be a torch tensor, got {type(out).__name__}")
    if out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
        raise ValueError(
            f"{name} must be a {list(q.shape)} {q.dtype} tensor on {q.device}, "
            f"got {list(out.shape)} {out.dtype} on {out.device}"
        )
    return out


def check_lse(lse: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The logsumexp buffer: contiguous fp32 ``[B, Hq, Sq]`` on q's device."""
    expected = list(q.shape[:3])
    if (
        not isinstance(lse, torch.Tensor)
        or list(lse.shape) != expected
        or lse.dtype != torch.float32
        or lse.device != q.device
        or not lse.is_contiguous()
    ):
        got = (
            f"{list(lse.shape)} {lse.dtype} on {lse.device}"
            if isinstance(lse, torch.Tensor)
            else type(lse).__name__
        )
        raise ValueError(
            f"lse must be a contiguous float32 {expected} tensor on {q.device}, got {got}"
        )
    return lse


def check_against_plan(
    plan: Any, q: torch.Tensor, k: torch.Tensor, *, head_dims: tuple[int, ...] | None
) -> None:
    """q and k fit ``plan`` (a ``gpu.plan`` or a launcher's plan): its heads (a layout of one
    head serves any number) and token lengths; and unless ``head_dims`` is None (the dense
    reference, which runs anywhere), its device and one of ``head_dims``."""
    q_heads, seq_q, head_dim = q.shape[1:]
    if plan.n_heads not in (1, q_heads):
        raise ValueError(f"q must have the plan's {plan.n_heads} heads, got Hq = {q_heads}")
    if (seq_q, k.shape[2]) != (plan.seq_q, plan.seq_k):
        n_q_blocks, n_k_blocks = (-(-n // plan.block_size) for n in (plan.seq_q, plan.seq_k))
        raise ValueError(
            f"q and k must have the plan's lengths Sq x Sk = {plan.seq_q} x {plan.seq_k} "
            f"({n_q_blocks} x {n_k_blocks} blocks of {plan.block_size}), got {seq_q} x "
            f"{k.shape[2]}"
        )
    if head_dims is None:
        return
    if q.device != plan.device:
        raise ValueError(
            f"q must be on the plan's device {plan.device}, got {q.device}; build the plan "
            "with device=q.device"
        )
    if head_dim not in head_dims:
        raise ValueError(
            f"head dim D (q.shape[3]) must be one of {', '.join(map(str, head_dims))}, got "
            f"{head_dim}"
        )


def check_scale(scale: Any) -> float:
    """The softmax scale as a float: finite and positive."""
    scale = check_float("scale", scale)
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    return scale
