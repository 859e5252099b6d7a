"""Block-sparse attention as ``torch.library`` custom ops with autograd, for training and compile.

``blocksparse::attention(q, k, v, plan_id, scale, reference) -> (out, lse)`` and its backward
``blocksparse::attention_backward(...) -> (dq, dk, dv)``, tied by ``register_autograd``: the
forward saves q, k, v, out and the logsumexp, and the backward launches the fused backward
kernels (``reference=False``) or evaluates the textbook formulas in fp32/fp64 torch
(``reference=True``, any device and float dtype: what ``gradcheck`` checks the wiring with).
The plan travels as its integer id (ops take no Python objects; ``gpu.plans.plan_by_id`` finds
it again). Fake implementations give the output shapes, so ``torch.compile(fullgraph=True)``
traces forward and backward with no graph break.

Eager calls that need no gradient skip the dispatcher (``gpu.api`` calls ``fused_forward``
directly, saving its per-call host cost).
"""

from __future__ import annotations

import torch

from gpu.forward.launch import check_operand_strides, kv_row_strides, launch_fused
from gpu.plans import BlockSparsePlan, plan_by_id
from gpu.reference import dense_masked_attention, dense_masked_attention_backward


def fused_forward(
    plan: BlockSparsePlan,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    out: torch.Tensor | None,
    lse: torch.Tensor | None,
) -> torch.Tensor:
    """Launch the fused kernel for checked operands; allocate ``out`` when None."""
    if out is None:
        out = torch.empty_like(q)
    check_operand_strides(q, k, v, out)
    launch_fused(plan.fused(q.dtype, q.shape[3], *kv_row_strides(k, v)), q, k, v, out, lse, scale)
    return out


def reference_forward(
    plan: BlockSparsePlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)`` by dense masked torch: fp64 for fp64 inputs, else fp32 then q's dtype."""
    compute = _compute_dtype(q)
    out, lse = dense_masked_attention(
        q, k, v, plan.dense_blocks(), plan.block_size, causal=plan.causal,
        causal_alignment=plan.causal_alignment, scale=scale, compute_dtype=compute,
        return_lse=True, partials=plan.partials,
    )  # fmt: skip
    return out.to(q.dtype), lse.to(_compute_dtype(q))


@torch.library.custom_op("blocksparse::attention", mutates_args=())
def attention_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    plan_id: int,
    scale: float,
    reference: bool,
    deterministic: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)`` of the plan's block-sparse attention (operands checked by the caller);
    ``deterministic`` is for the backward (bitwise-repeatable gradients)."""
    plan = plan_by_id(plan_id)
    if reference:
        return reference_forward(plan, q, k, v, scale)
    lse = q.new_empty(q.shape[:3], dtype=torch.float32)
    return fused_forward(plan, q, k, v, scale, None, lse), lse


@attention_op.register_fake
def _(q, k, v, plan_id, scale, reference, deterministic):
    return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=_compute_dtype(q))


@torch.library.custom_op("blocksparse::attention_backward", mutates_args=())
def attention_backward_op(
    grad_out: torch.Tensor,
    grad_lse: torch.Tensor | None,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    plan_id: int,
    scale: float,
    reference: bool,
    deterministic: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)``: dk and dv summed over each kv head's query heads."""
    plan = plan_by_id(plan_id)
    if not reference:
        backward = plan.backward(q.dtype, q.shape[3], deterministic=deterministic)
        return backward.launch(q, k, v, out, lse, grad_out, grad_lse, scale=scale)
    grads = dense_masked_attention_backward(
        q, k, v, grad_out, plan.dense_blocks(), plan.block_size, causal=plan.causal,
        causal_alignment=plan.causal_alignment, scale=scale, compute_dtype=_compute_dtype(q),
        grad_lse=grad_lse, partials=plan.partials,
    )  # fmt: skip
    return tuple(g.to(x.dtype) for g, x in zip(grads, (q, k, v), strict=True))


@attention_backward_op.register_fake
def _(grad_out, grad_lse, q, k, v, out, lse, plan_id, scale, reference, deterministic):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, plan_id, scale, reference, deterministic = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.plan_id, ctx.scale, ctx.reference = plan_id, scale, reference
    ctx.deterministic = deterministic
    # A cached plan must outlive the backward. Traced, the id may be symbolic (a compiled
    # function that ran with two plans takes the id as an input): the graph carries it then.
    if not torch.compiler.is_compiling() and isinstance(plan_id, int):
        ctx.plan = plan_by_id(plan_id)


def _backward(ctx, grad_out, grad_lse):
    q, k, v, out, lse = ctx.saved_tensors
    grad_lse = None if grad_lse is None else torch.where(torch.isinf(lse), 0.0, grad_lse)
    dq, dk, dv = attention_backward_op(
        grad_out, grad_lse, q, k, v, out, lse, ctx.plan_id, ctx.scale, ctx.reference,
        ctx.deterministic,
    )  # fmt: skip
    return dq, dk, dv, None, None, None, None


torch.library.register_autograd("blocksparse::attention", _backward, setup_context=_setup_context)


def _compute_dtype(q: torch.Tensor) -> torch.dtype:
    """The reference's arithmetic (and logsumexp) dtype: fp64 for fp64 inputs, else fp32."""
    return torch.float64 if q.dtype == torch.float64 else torch.float32
