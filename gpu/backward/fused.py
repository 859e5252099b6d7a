"""The fused block-sparse flash-attention backward: a plan's launch state and launch.

``plan_backward`` compiles ``fused.cu`` (beside this file) for a build of ``gpu.backward.builds``
around the plan's transposed look-up table (``gpu.backward.lut``, uploaded by the plan);
``launch_backward`` enqueues the preprocessing kernel (Δ = rowsum(dO ∘ O) - dLSE and the base-2
logsumexp; ``run_prep``, which the Hopper builds of ``gpu.backward.sm90`` run too) and the
dK/dV/dQ kernel on the caller's stream, then casts the fp32 dQ.

Work of one call, with ``T`` the (query tile, key tile) pairs visited per batch element: five
``BLOCK_M x BLOCK_N x D`` products per pair (Sᵀ, dPᵀ, dV, dK, dQ), so ``10 · B · T · BLOCK_M ·
BLOCK_N · D`` FLOPs against the ``2.5 x`` forward FLOPs that count as useful.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from gpu.backward.builds import BLOCK_M, BackwardConfig, choose_backward_config
from gpu.launcher import KernelLauncher
from gpu.operands import check_strides
from gpu.params import BackwardParams, BackwardPrepParams
from gpu.runtime import compile_kernel, current_raw_stream, source_beside
from gpu.support import DTYPES, LOG2_E

if TYPE_CHECKING:
    from gpu.plans import BlockSparsePlan

SOURCE = source_beside(__file__)
PREP_THREADS = 256


@dataclass(frozen=True)
class BackwardPlan:
    """Everything a backward launch needs: the uploaded table and both compiled kernels."""

    config: BackwardConfig
    causal_offset: int
    n_heads: int  # the layout's: 1 serves every query head
    seq_q: int
    seq_k: int
    lists: torch.Tensor
    entries: torch.Tensor
    order: torch.Tensor
    token_words: torch.Tensor  # int32 [max(token tiles, 1), block_n, words]: key rows
    n_k_tiles: int
    n_tiles: int
    sub_rows_log2: int
    sub_cols_log2: int
    prep: KernelLauncher
    main: KernelLauncher

    def flops(self, batch: int, q_heads: int) -> int:
        """FLOPs the main kernel executes for ``batch`` elements (five products per pair)."""
        cfg = self.config
        repeats = q_heads if self.n_heads == 1 else 1
        return 10 * batch * repeats * self.n_tiles * cfg.block_m * cfg.block_n * cfg.head_dim

    def launch(self, *operands, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``launch_backward(self, *operands, scale)``: every backward plan launches this way."""
        return launch_backward(self, *operands, scale)


def compile_prep(dtype: str, head_dim: int, device: int) -> KernelLauncher:
    """The preprocessing kernel for ``dtype`` (a ``gpu.support.DTYPES`` name) and ``head_dim``,
    from the module of the Hopper ``fused.cu`` build (the Hopper builds of ``gpu.backward.sm90``
    share it)."""
    config = choose_backward_config(head_dim=head_dim, dtype=DTYPES[dtype], wgmma=True)
    prep = compile_kernel(SOURCE, "attention_bwd_prep", config.defines(), device=device)
    return KernelLauncher(prep, BackwardPrepParams, device, 0)


def plan_backward(layout: BlockSparsePlan, config: BackwardConfig) -> BackwardPlan:
    """Compile both kernels of ``config`` for the plan's device around the plan's transposed
    table for its tiles (``gpu.plan(...).backward(...)`` does this for the chosen build)."""
    lut = layout.backward_lut(config.block_m, config.block_n)
    device = layout.device
    defines = config.defines()
    prep = compile_kernel(SOURCE, "attention_bwd_prep", defines, device=device.index)
    main = compile_kernel(SOURCE, "attention_bwd", defines, device=device.index)
    return BackwardPlan(
        config=config,
        causal_offset=layout.causal_offset,
        n_heads=layout.n_heads,
        seq_q=layout.seq_q,
        seq_k=layout.seq_k,
        lists=lut.lists,
        entries=lut.entries,
        order=lut.order,
        token_words=lut.token_words,
        n_k_tiles=lut.n_k_tiles,
        n_tiles=lut.n_tiles,
        sub_rows_log2=int(math.log2(lut.sub_rows)),
        sub_cols_log2=int(math.log2(lut.sub_cols)),
        prep=KernelLauncher(prep, BackwardPrepParams, device.index, 0),
        main=KernelLauncher(main, BackwardParams, device.index, config.shared_bytes),
    )


def launch_backward(
    plan: BackwardPlan,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    grad_lse: torch.Tensor | None,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` for checked forward operands, its ``out`` and fp32 ``lse``.

    ``grad_out`` may be any view (copied when its strides cannot be read in place);
    ``grad_lse``, the gradient of the logsumexp output, may be None. dk and dv come back
    contiguous ``[B, Hkv, Sk, D]``, dq contiguous ``[B, Hq, Sq, D]``.
    """
    batch, q_heads, seq_q, _ = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    grad_out = readable(grad_out)
    stream = current_raw_stream(q.device.index)
    rows, seq_q_pad = run_prep(plan.prep, out, grad_out, lse, grad_lse, stream)
    dq_acc = q.new_zeros(q.shape, dtype=torch.float32)
    dk = k.new_empty(k.shape)
    dv = v.new_empty(v.shape)
    n_ctas = plan.n_k_tiles * batch * kv_heads
    cfg = plan.config
    plan.main(  # BackwardParams, in field order
        n_ctas, cfg.threads, cfg.shared_bytes, stream,
        # inputs, outputs, the plan's transposed table
        q.data_ptr(), k.data_ptr(), v.data_ptr(), grad_out.data_ptr(), rows[0].data_ptr(),
        rows[1].data_ptr(), dq_acc.data_ptr(), dk.data_ptr(), dv.data_ptr(),
        plan.lists.data_ptr(), plan.entries.data_ptr(), plan.order.data_ptr(),
        plan.token_words.data_ptr(),
        # strides
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *grad_out.stride()[:3],
        # shapes
        batch, q_heads, kv_heads, q_heads // kv_heads, int(plan.n_heads == 1), plan.n_k_tiles,
        seq_q, seq_k, seq_q_pad,
        # masking and scaling
        plan.causal_offset, plan.sub_rows_log2, plan.sub_cols_log2, scale, scale * LOG2_E,
    )  # fmt: skip
    return dq_acc.to(q.dtype), dk, dv


def run_prep(
    prep: KernelLauncher,
    out: torch.Tensor,
    grad_out: torch.Tensor,
    lse: torch.Tensor,
    grad_lse: torch.Tensor | None,
    stream: int,
    block_m: int = BLOCK_M,
) -> tuple[torch.Tensor, int]:
    """Enqueue the preprocessing kernel; ``(rows, seq_q_pad)``: ``rows[0]`` the base-2 logsumexp
    and ``rows[1]`` Δ of every query row, fp32 ``[B · Hq · seq_q_pad]`` (padded to ``block_m``,
    the query rows of the main kernel's steps)."""
    batch, q_heads, seq_q, head_dim = out.shape
    grad_lse = None if grad_lse is None else grad_lse.float().contiguous()
    seq_q_pad = -(-seq_q // block_m) * block_m
    n_rows = batch * q_heads * seq_q_pad
    rows = out.new_empty((2, n_rows), dtype=torch.float32)  # lse2, Δ
    rows_per_cta = PREP_THREADS // 32 * (32 // (head_dim // 8))
    prep(  # BackwardPrepParams, in field order
        -(-n_rows // rows_per_cta), PREP_THREADS, 0, stream,
        # inputs, outputs
        out.data_ptr(), grad_out.data_ptr(), lse.data_ptr(),
        0 if grad_lse is None else grad_lse.data_ptr(), rows[0].data_ptr(), rows[1].data_ptr(),
        # strides, shapes
        *out.stride()[:3], *grad_out.stride()[:3], q_heads, seq_q, seq_q_pad, n_rows,
    )  # fmt: skip
    return rows, seq_q_pad


def readable(x: torch.Tensor) -> torch.Tensor:
    """``x`` if the kernels can read it in place (TMA too: no zero sequence stride), else a
    contiguous copy."""
    try:
        check_strides("grad_out", x)
    except ValueError:
        return x.contiguous()
    return x.contiguous() if x.shape[2] > 1 and x.stride(2) == 0 else x
