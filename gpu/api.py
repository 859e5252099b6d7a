"""``block_sparse_attention``: one validated entry point that dispatches to an implementation.

The API owns validation (every message names the argument, what is allowed and what it got) and
dispatch; the implementations trust their inputs and never import each other. An explicit CUDA
implementation never falls back to another one: without a usable GPU it raises
``GpuUnavailableError`` with the reason.

Plans (look-up tables uploaded to the GPU, compiled kernels) are cached in a small LRU keyed by the
layout's bytes, block size, causal flag, head dim, dtype, device and start width, so calling again
with the same layout only launches.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from designer.layout import Layout
from designer.validate import as_block_tensor, check_bool, check_choice, check_float, check_int
from gpu.reference import dense_masked_attention
from gpu.runtime import GpuUnavailableError, unavailable_reason

IMPLS = ("fused", "sdd", "reference")
#: What our CUDA kernels are compiled for.
CUDA_HEAD_DIMS = (64, 128)
CUDA_BLOCK_SIZES = (16, 32, 64, 128)
CUDA_DTYPES = (torch.float16, torch.bfloat16)
#: The reference also takes float32 / float64 inputs (handy on a CPU).
REFERENCE_DTYPES = (*CUDA_DTYPES, torch.float32, torch.float64)
PLAN_CACHE_SIZE = 16


def block_sparse_attention(
    q: Any,
    k: Any,
    v: Any,
    layout: Any,
    block_size: int,
    *,
    causal: bool = False,
    scale: float | None = None,
    impl: str = "fused",
    start_width: int | None = None,
    out: Any = None,
) -> Any:
    """Softmax attention restricted to a block layout: ``softmax(scale·QKᵀ | layout) V``.

    Args:
        q: ``[B, H, Sq, D]`` queries; k, v: ``[B, H, Sk, D]``. fp16 or bf16 torch CUDA tensors or
            CuPy arrays (shared zero-copy through DLPack; the result comes back as the same kind).
            ``impl="reference"`` also takes CPU tensors and float32/float64.
        layout: a ``designer.Layout`` or a ``[H, M, N]`` / ``[1, M, N]`` 0/1 tensor or array with
            ``M·block_size == Sq`` and ``N·block_size == Sk``; one head broadcasts to all.
        block_size: tokens per block side (16, 32, 64 or 128 for the CUDA implementations).
        causal: also mask ``q_idx < k_idx`` inside blocks (top-left aligned).
        scale: multiplies QKᵀ, > 0 (the fused kernel takes row maxima before scaling); default
            ``D ** -0.5``.
        impl: ``"fused"`` (one flash-style kernel), ``"sdd"`` (SDD → softmax → DSD pipeline) or
            ``"reference"`` (dense masked attention in plain torch, fp32).
        start_width: segmentation start width for ``"sdd"`` (default: 128-token tiles).
        out: optional output of q's shape, dtype and device, written in place.

    A query row with no active key gives zeros. Example:

    >>> q = k = v = torch.randn(1, 2, 64, 64)
    >>> block_sparse_attention(q, k, v, torch.eye(4).bool()[None], 16, impl="reference").shape
    torch.Size([1, 2, 64, 64])
    """
    impl = check_choice("impl", impl, IMPLS)
    if impl != "reference" and (reason := unavailable_reason()) is not None:
        raise GpuUnavailableError(f'impl="{impl}" needs a CUDA GPU: {reason}')
    from_cupy = _is_cupy(q)
    q, k, v = (_as_torch(name, x) for name, x in (("q", q), ("k", k), ("v", v)))
    _check_qkv(q, k, v, impl)
    _, n_heads, seq_q, head_dim = q.shape
    block_size = check_int("block_size", block_size, low=1)
    blocks = _layout_blocks(layout, block_size, n_heads, seq_q, k.shape[2])
    causal = check_bool("causal", causal)
    scale = head_dim**-0.5 if scale is None else check_float("scale", scale)
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    if start_width is not None:
        start_width = check_int("start_width", start_width, low=1, high=1 << 16)
    if impl != "reference":
        check_choice("block_size", block_size, CUDA_BLOCK_SIZES)
        check_choice("head dim D (q.shape[3])", head_dim, CUDA_HEAD_DIMS)
    out_tensor = None if out is None else _check_out(_as_torch("out", out), q)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()

    if impl == "reference":
        result = _run_reference(q, k, v, blocks, block_size, causal, scale, out_tensor)
    else:
        blocks = blocks.expand(n_heads, -1, -1).contiguous()
        plan, run = _plan(
            impl, blocks, block_size, causal, head_dim, q.dtype, q.device, start_width
        )
        result = run(plan, q, k, v, scale=scale, out=out_tensor)
    if from_cupy:
        import cupy

        return cupy.from_dlpack(result)
    return result


def clear_plan_cache() -> None:
    """Forget every cached plan (frees their GPU look-up tables)."""
    with _PLANS_LOCK:
        _PLANS.clear()


# --------------------------------------------------------------------------- validation
def _is_cupy(array: Any) -> bool:
    return type(array).__module__.split(".")[0] == "cupy"


def _as_torch(name: str, array: Any) -> torch.Tensor:
    if isinstance(array, torch.Tensor):
        return array
    if _is_cupy(array):
        return torch.from_dlpack(array)
    raise TypeError(f"{name} must be a torch tensor or CuPy array, got {type(array).__name__}")


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, impl: str) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 4 or 0 in x.shape:
            raise ValueError(f"{name} must be a non-empty [B, H, S, D] tensor, got {list(x.shape)}")
    if k.shape != v.shape:
        raise ValueError(
            f"k and v must have the same shape, got {list(k.shape)} and {list(v.shape)}"
        )
    if k.shape[:2] != q.shape[:2] or k.shape[3] != q.shape[3]:
        raise ValueError(
            f"k must be [B, H, Sk, D] with q's B, H and D {list(q.shape)}, got {list(k.shape)}"
        )
    allowed = REFERENCE_DTYPES if impl == "reference" else CUDA_DTYPES
    if q.dtype not in allowed:
        names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
        raise TypeError(f'q dtype must be one of {names} for impl="{impl}", got {q.dtype}')
    for name, x in (("k", k), ("v", v)):
        if x.dtype != q.dtype or x.device != q.device:
            raise ValueError(
                f"{name} must match q's dtype and device ({q.dtype}, {q.device}), "
                f"got {x.dtype}, {x.device}"
            )
    if impl != "reference" and q.device.type != "cuda":
        raise ValueError(f'impl="{impl}" needs CUDA tensors, got device {q.device}')


def _layout_blocks(
    layout: Any, block_size: int, n_heads: int, seq_q: int, seq_k: int
) -> torch.Tensor:
    """The layout as a CPU bool ``[1 or H, M, N]`` tensor, checked against q and k."""
    if isinstance(layout, Layout):
        if layout.block_size != block_size:
            raise ValueError(
                f"block_size ({block_size}) must equal the layout's block_size "
                f"({layout.block_size})"
            )
        blocks = layout.blocks
    else:
        if _is_cupy(layout):
            layout = torch.from_dlpack(layout)
        blocks = as_block_tensor("layout", layout)
    heads, n_q_blocks, n_k_blocks = blocks.shape
    if heads not in (1, n_heads):
        raise ValueError(f"layout must have 1 head or q's {n_heads} heads, got {heads}")
    if n_q_blocks * block_size != seq_q or n_k_blocks * block_size != seq_k:
        raise ValueError(
            f"layout [{heads}, {n_q_blocks}, {n_k_blocks}] with block_size {block_size} covers "
            f"{n_q_blocks * block_size} x {n_k_blocks * block_size} tokens, but Sq x Sk is "
            f"{seq_q} x {seq_k}"
        )
    return blocks


def _check_out(out: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    if out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
        raise ValueError(
            f"out must be a {list(q.shape)} {q.dtype} tensor on {q.device}, "
            f"got {list(out.shape)} {out.dtype} on {out.device}"
        )
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    return out


# --------------------------------------------------------------------------- dispatch
def _run_reference(q, k, v, blocks, block_size, causal, scale, out) -> torch.Tensor:
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    result = dense_masked_attention(
        q, k, v, blocks, block_size, causal=causal, scale=scale, compute_dtype=compute
    )
    if out is None:
        return result.to(q.dtype)
    out.copy_(result)
    return out


_PLANS: OrderedDict[tuple, tuple[Any, Callable[..., torch.Tensor]]] = OrderedDict()
_PLANS_LOCK = threading.Lock()


def _plan(impl, blocks, block_size, causal, head_dim, dtype, device, start_width):
    digest = hashlib.sha1(blocks.numpy().tobytes()).hexdigest()
    key = (impl, digest, tuple(blocks.shape), block_size, causal, head_dim, dtype, device)
    key += (start_width if impl == "sdd" else None,)
    with _PLANS_LOCK:
        if key in _PLANS:
            _PLANS.move_to_end(key)
            return _PLANS[key]
    if impl == "fused":
        from gpu.fused import plan_fused, run_fused

        entry = (
            plan_fused(
                blocks, block_size, causal=causal, head_dim=head_dim, dtype=dtype, device=device
            ),
            run_fused,
        )
    else:
        from gpu.sdd import plan_sdd, run_sdd

        entry = (
            plan_sdd(
                blocks,
                block_size,
                causal=causal,
                head_dim=head_dim,
                dtype=dtype,
                device=device,
                start_width=start_width,
            ),
            run_sdd,
        )
    with _PLANS_LOCK:
        _PLANS[key] = entry
        while len(_PLANS) > PLAN_CACHE_SIZE:
            _PLANS.popitem(last=False)
    return entry
