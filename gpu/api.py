"""``block_sparse_attention``: one validated entry point that dispatches to an implementation.

The API owns validation (every message names the argument, what is allowed and what it got) and
dispatch; the implementations trust their inputs and never import each other. An explicit CUDA
implementation never falls back to another one: without a usable GPU it raises
``GpuUnavailableError`` with the reason.

Two forms. With a ``gpu.plan`` (build it once, call it every step) a call checks shapes and
launches: no device synchronisation, no copy of the layout, no hashing. With a layout and a block
size, the plan comes from a small cache keyed, for a torch layout, on the tensor's identity,
``_version``, shape and device (a live tensor changed in place gets a new plan; no sync, no copy);
for a numpy or CuPy layout on a hash of its bytes; for a ``designer.Layout`` (immutable) on its
identity.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from designer.layout import Layout
from designer.validate import check_bool, check_choice, check_int
from gpu.operands import check_against_plan, check_attention_operands, check_out, check_scale
from gpu.ops import attention_op, fused_forward
from gpu.plans import BlockSparsePlan, plan
from gpu.runtime import GpuUnavailableError, is_cupy, unavailable_reason
from gpu.support import DTYPE_NAMES, HEAD_DIMS

IMPLS = ("fused", "sdd", "reference")
#: What our CUDA kernels take (``gpu.support``), under the names the API gives them.
CUDA_DTYPES = tuple(DTYPE_NAMES)
#: The reference also takes float32 / float64 inputs (handy on a CPU).
REFERENCE_DTYPES = (*CUDA_DTYPES, torch.float32, torch.float64)
PLAN_CACHE_SIZE = 16


def block_sparse_attention(
    q: Any,
    k: Any,
    v: Any,
    layout: Any,
    block_size: int | None = None,
    *,
    causal: bool | None = None,
    causal_alignment: str | None = None,
    scale: float | None = None,
    impl: str = "fused",
    return_lse: bool = False,
    out: Any = None,
    start_width: int | None = None,
    deterministic: bool | None = None,
) -> Any:
    """Softmax attention restricted to a block layout: ``softmax(scale·QKᵀ | layout) V``.

    Args:
        q: ``[B, Hq, Sq, D]`` queries; k, v: ``[B, Hkv, Sk, D]`` with ``Hkv`` dividing ``Hq``
            (query head h reads kv head ``h // (Hq / Hkv)``). fp16 or bf16 torch CUDA tensors or
            CuPy arrays (shared zero-copy through DLPack; the result comes back as the same
            kind), as any views ``gpu.operands`` describes (``[B, S, H, D]`` memory through
            ``transpose(1, 2)`` is read in place). ``impl="reference"`` also takes CPU tensors
            and float32/float64.
        layout: a ``gpu.plan(...)`` (the fast form), or a ``designer.Layout`` or ``[H or 1, M,
            N]`` 0/1 tensor or array with ``block_size`` (then ``causal`` and
            ``causal_alignment`` apply, and Sq, Sk come from q and k; the plan is cached).
        scale: multiplies QKᵀ, > 0; default ``D ** -0.5``.
        impl: ``"fused"`` (one flash-style kernel), ``"sdd"`` (SDD → softmax → DSD pipeline:
            contiguous inputs, no GQA, no partial last blocks, no token-masked partial
            blocks, no logsumexp) or ``"reference"``
            (dense masked attention in plain torch, fp32).
        return_lse: also return the fp32 ``[B, Hq, Sq]`` natural-log logsumexp of each row's
            kept scaled scores (``-inf`` for a row with no active key; fp64 for the reference
            with fp64 inputs). It is differentiable too.
        out: optional output of q's shape, dtype and device, written in place.
        start_width: segmentation start width for ``"sdd"`` (default: 128-token tiles).
        deterministic: bitwise-repeatable gradients from ``"fused"``'s backward (default: the
            plan's ``deterministic``; Hopper only, see ``gpu.plan``).

    A query row with no active key gives zeros. Example:

    >>> q = k = v = torch.randn(1, 2, 64, 64)
    >>> block_sparse_attention(q, k, v, torch.eye(4).bool()[None], 16, impl="reference").shape
    torch.Size([1, 2, 64, 64])
    """
    check_choice("impl", impl, IMPLS)
    compiling = torch.compiler.is_compiling()
    if impl != "reference" and not compiling and (reason := unavailable_reason()) is not None:
        raise GpuUnavailableError(f'impl="{impl}" needs a CUDA GPU: {reason}')
    from_cupy = False
    if not isinstance(q, torch.Tensor):
        from_cupy = is_cupy(q)
        q, k, v = (_as_torch(name, x) for name, x in (("q", q), ("k", k), ("v", v)))
        out = None if out is None else _as_torch("out", out)
    check_attention_operands(
        q, k, v, dtypes=REFERENCE_DTYPES if impl == "reference" else CUDA_DTYPES
    )
    if type(layout) is BlockSparsePlan:
        if block_size is not None or causal is not None or causal_alignment is not None:
            raise TypeError(
                "block_size, causal and causal_alignment come from the plan; pass them to "
                "gpu.plan instead"
            )
        the_plan = layout
    elif compiling:
        raise TypeError(
            "under torch.compile pass a gpu.plan(...) as the layout: the layout form's plan "
            "cache cannot be consulted from compiled code"
        )
    else:
        causal = False if causal is None else check_bool("causal", causal)
        the_plan = _cached_plan(layout, block_size, causal, causal_alignment, q, k.shape[2])
    if impl != "reference" and q.device.type != "cuda":
        raise ValueError(f'impl="{impl}" needs CUDA tensors, got device {q.device}')
    check_against_plan(the_plan, q, k, head_dims=None if impl == "reference" else HEAD_DIMS)
    scale = q.shape[3] ** -0.5 if scale is None else check_scale(scale)
    if out is not None:
        check_out("out", out, q)
    if start_width is not None:
        check_int("start_width", start_width, low=1, high=1 << 16)
    if deterministic is not None:
        check_bool("deterministic", deterministic)
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    if impl == "sdd" and needs_grad:
        raise RuntimeError(
            'impl="sdd" has no backward pass, and an input requires a gradient; use '
            'impl="fused" to train, or call under torch.no_grad() for inference'
        )

    if impl == "sdd":
        result, lse = _run_sdd(the_plan, q, k, v, scale, out, return_lse, start_width), None
    elif impl == "fused" and not (needs_grad or compiling):
        lse = q.new_empty(q.shape[:3], dtype=torch.float32) if return_lse else None
        result = fused_forward(the_plan, q, k, v, scale, out, lse)
    else:  # through the custom op: autograd, torch.compile, and the reference
        deterministic = the_plan.deterministic if deterministic is None else deterministic
        result, lse = attention_op(
            q, k, v, the_plan.plan_id, scale, impl == "reference", deterministic
        )
        if out is not None:
            out.copy_(result)
            result = out
    if from_cupy:
        import cupy

        result = cupy.from_dlpack(result)
        lse = None if lse is None else cupy.from_dlpack(lse)
    return (result, lse) if return_lse else result


def clear_plan_cache() -> None:
    """Forget every plan the layout form cached (frees their GPU look-up tables)."""
    with _PLANS_LOCK:
        _PLANS.clear()


# --------------------------------------------------------------------------- validation
def _as_torch(name: str, array: Any) -> torch.Tensor:
    if isinstance(array, torch.Tensor):
        return array
    if is_cupy(array):
        return torch.from_dlpack(array)
    raise TypeError(f"{name} must be a torch tensor or CuPy array, got {type(array).__name__}")


def _cached_plan(
    layout: Any, block_size: Any, causal: bool, alignment: Any, q: torch.Tensor, seq_k: int
) -> BlockSparsePlan:
    """The plan of the layout form, from the cache when the same layout comes again."""
    if isinstance(layout, torch.Tensor):
        identity: tuple = (id(layout), layout._version, layout.shape, layout.device)
        alive = weakref.ref(layout)
    elif isinstance(layout, Layout):
        identity, alive = (id(layout),), weakref.ref(layout)
    elif isinstance(layout, np.ndarray) or is_cupy(layout):
        array = torch.from_dlpack(layout).cpu().numpy() if is_cupy(layout) else layout
        digest = hashlib.sha1(np.ascontiguousarray(array).tobytes()).hexdigest()
        identity, alive = (digest, array.shape, str(array.dtype)), None
    else:
        raise TypeError(
            f"layout must be a gpu.plan, designer.Layout, torch tensor, numpy or CuPy array, "
            f"got {type(layout).__name__}"
        )
    key = (identity, block_size, causal, alignment, q.shape[2], seq_k, q.device)
    with _PLANS_LOCK:
        entry = _PLANS.get(key)
        if entry is not None and (entry[0] is None or entry[0]() is layout):
            _PLANS.move_to_end(key)
            return entry[1]
    built = plan(
        layout, block_size, causal=causal, causal_alignment=alignment or "top_left",
        seq_q=_layout_length("Sq", q.shape[2], layout, block_size, 1),
        seq_k=_layout_length("Sk", seq_k, layout, block_size, 2),
        device=q.device,
    )  # fmt: skip
    with _PLANS_LOCK:
        _PLANS[key] = (alive, built)
        while len(_PLANS) > PLAN_CACHE_SIZE:
            _PLANS.popitem(last=False)
    return built


def _layout_length(name: str, length: int, layout: Any, block_size: Any, dim: int) -> int:
    """``length`` if the layout's blocks cover it with a partial last block at most."""
    shape = layout.shape
    size = layout.block_size if isinstance(layout, Layout) else block_size
    if len(shape) != 3 or not isinstance(size, int) or isinstance(size, bool) or size < 1:
        return length  # gpu.plan names what is wrong
    n_blocks = shape[dim]
    if not (n_blocks - 1) * size < length <= n_blocks * size:
        raise ValueError(
            f"layout {list(shape)} with block_size {size} covers {n_blocks * size} tokens along "
            f"{name}, so {name} must be in [{(n_blocks - 1) * size + 1}, {n_blocks * size}], "
            f"got {length}"
        )
    return length


# --------------------------------------------------------------------------- dispatch
def _run_sdd(the_plan, q, k, v, scale, out, return_lse, start_width):
    from gpu.sdd.pipeline import run_sdd

    problems = []
    if return_lse:
        problems.append("return_lse")
    if k.shape[1] != q.shape[1]:
        problems.append(f"GQA (Hkv = {k.shape[1]} < Hq = {q.shape[1]})")
    if (the_plan.seq_q, the_plan.seq_k) != (
        the_plan.n_q_blocks * the_plan.block_size,
        the_plan.n_k_blocks * the_plan.block_size,
    ):
        problems.append("partial last blocks")
    if the_plan.causal and the_plan.causal_offset:
        problems.append("bottom_right causal alignment with Sq != Sk")
    if the_plan.n_partials:
        problems.append(f"partial blocks ({the_plan.n_partials} token-masked blocks)")
    problems += [f"non-contiguous {name}" for name, x in (("q", q), ("k", k), ("v", v))
                 if not x.is_contiguous()]  # fmt: skip
    if out is not None and not out.is_contiguous():
        problems.append("non-contiguous out")
    if problems:
        raise ValueError(f'impl="sdd" does not support {", ".join(problems)}; use impl="fused"')
    sdd_plan = the_plan.sdd(q.dtype, q.shape[3], start_width, q.shape[1])
    return run_sdd(sdd_plan, q, k, v, scale=scale, out=out)


_PLANS: OrderedDict[tuple, tuple[Any, BlockSparsePlan]] = OrderedDict()
_PLANS_LOCK = threading.Lock()
