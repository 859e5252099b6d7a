"""The fused forward as a ``torch.library`` custom op, so ``torch.compile`` sees one opaque node.

``blocksparse::fused_attention(q, k, v, plan_id, scale) -> (out, lse)``: the plan travels as
its integer id (ops take no Python objects; ``gpu.plans.plan_by_id`` finds it again). The fake
implementation gives the output shapes, so ``torch.compile(fullgraph=True)`` traces a call with
no graph break. Eager calls skip the dispatcher (``gpu.api`` launches directly, saving its
per-call host cost); both paths run ``fused_forward``.
"""

from __future__ import annotations

import torch

from gpu.fused import check_operand_strides, kv_row_strides, launch_fused
from gpu.plans import BlockSparsePlan, plan_by_id


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


@torch.library.custom_op("blocksparse::fused_attention", mutates_args=(), device_types="cuda")
def fused_attention_op(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan_id: int, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)`` of the plan's block-sparse attention (operands checked by the caller)."""
    lse = q.new_empty(q.shape[:3], dtype=torch.float32)
    out = fused_forward(plan_by_id(plan_id), q, k, v, scale, None, lse)
    return out, lse


@fused_attention_op.register_fake
def _(q, k, v, plan_id, scale):
    return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)
