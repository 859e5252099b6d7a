"""cuDNN frontend's block-sparse attention as a contender (``cudnn_bsa``).

``cudnn.block_sparse_attention.block_sparse_attention_forward`` takes, per (batch, query head,
query block), the list of key blocks it attends to: ``q2k_block_index [B, Hq, Nq, Kmax]``
int32, the first ``q2k_block_nums [B, Hq, Nq]`` entries of each row valid (ascending, distinct;
the rest of a row holds other valid block indices, never read). Its blocks are 64 or 128 tokens
on both sides and whole: no mask inside a block. So a layout is expressed exactly when its
blocks are a multiple of 64 tokens (at 128 when they are a multiple of 128, else at 64: a
layout block of ``r`` times that size becomes ``r x r`` of them) and it is not causal (causal
masks inside the diagonal blocks). The backward
(``block_sparse_attention_backward``) recomputes from the forward's output and log-sum-exp.

What it takes on Hopper (sm90, cuDNN frontend 1.32): forward fp16/bf16, head dim 64, 96 or
128, GQA; backward bf16, head dim 128, as many kv heads as query heads. Every case it cannot
take is "unavailable" with the reason (``refusal``) before anything runs; on other GPUs its own
checks speak at the first call.
"""

from __future__ import annotations

from typing import Any

import torch

from designer.validate import MAX_LAYOUT_CELLS

#: cuDNN BSA's block sizes, largest first (a layout uses the largest that divides its blocks).
BSA_BLOCKS = (128, 64)
#: Head dims of the forward and the backward on sm90.
SM90_FORWARD_HEAD_DIMS = (64, 96, 128)
SM90_BACKWARD_HEAD_DIMS = (128,)


def bsa_block(block_size: int) -> int | None:
    """The cuDNN block a layout of ``block_size``-token blocks runs at, or None.

    >>> bsa_block(64), bsa_block(128), bsa_block(256), bsa_block(192), bsa_block(32)
    (64, 128, 128, 64, None)
    """
    return next((b for b in BSA_BLOCKS if block_size % b == 0), None)


def refusal(
    *,
    block_size: int,
    causal: bool,
    head_dim: int,
    dtype: torch.dtype,
    heads_q: int,
    heads_kv: int,
    backward: bool,
    arch_major: int,
) -> str | None:
    """Why cuDNN BSA cannot run this case exactly, or None when it can.

    >>> refusal(block_size=64, causal=True, head_dim=128, dtype=torch.bfloat16, heads_q=16,
    ...         heads_kv=16, backward=False, arch_major=9)
    'cuDNN BSA has no causal mode: it cannot mask inside the diagonal blocks'
    """
    if bsa_block(block_size) is None:
        return (
            f"cuDNN BSA takes whole blocks of {' or '.join(map(str, BSA_BLOCKS[::-1]))} tokens; "
            f"this layout's blocks are {block_size} tokens"
        )
    if causal:
        return "cuDNN BSA has no causal mode: it cannot mask inside the diagonal blocks"
    if backward and dtype != torch.bfloat16:
        return f"cuDNN BSA's backward takes bf16 only, got {str(dtype).removeprefix('torch.')}"
    if backward and heads_q != heads_kv:
        return (
            f"cuDNN BSA's backward takes as many kv heads as query heads (no GQA), got "
            f"{heads_q} query and {heads_kv} kv heads"
        )
    if arch_major == 9:
        dims = SM90_BACKWARD_HEAD_DIMS if backward else SM90_FORWARD_HEAD_DIMS
        if head_dim not in dims:
            part = "backward" if backward else "forward"
            return (
                f"cuDNN BSA's {part} on Hopper takes head dim {' or '.join(map(str, dims))}, "
                f"got {head_dim}"
            )
    return None


def block_lists(
    blocks: torch.Tensor, block_size: int, *, heads: int, batch: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(q2k_block_index [B, H, Nq, Kmax], q2k_block_nums [B, H, Nq], cuDNN block)``, int32 on
    the CPU, for a bool ``[H or 1, M, N]`` layout of ``block_size``-token blocks (``bsa_block``
    must take it). Each row lists its active key blocks in ascending order, then the others."""
    block = bsa_block(block_size)
    if block is None:
        raise ValueError(f"block_size must be a multiple of 64, got {block_size}")
    ratio = block_size // block
    n_q, n_k = blocks.shape[1] * ratio, blocks.shape[2] * ratio
    if heads * n_q * n_k > MAX_LAYOUT_CELLS:
        raise ValueError(
            f"cuDNN BSA's block lists of {heads} heads x {n_q} x {n_k} blocks exceed the layout "
            f"limit of {MAX_LAYOUT_CELLS:,} cells"
        )
    fine = blocks.repeat_interleave(ratio, 1).repeat_interleave(ratio, 2).expand(heads, -1, -1)
    nums = fine.sum(dim=-1, dtype=torch.int32)
    width = max(1, int(nums.max()) if nums.numel() else 1)
    order = torch.argsort((~fine).to(torch.int8), dim=-1, stable=True)[..., :width]
    index = order.to(torch.int32)[None].expand(batch, -1, -1, -1)
    return index, nums[None].expand(batch, -1, -1), block


class _BlockSparseAttention(torch.autograd.Function):
    """cuDNN BSA forward, and its backward from the saved output and log-sum-exp."""

    @staticmethod
    def forward(ctx, q, k, v, index, nums, block: int, scale: float, empty_rows: bool):
        out, lse = _forward(q, k, v, index, nums, block, scale, empty_rows)
        ctx.save_for_backward(q, k, v, out, lse, index, nums)
        ctx.block, ctx.scale = block, scale
        return out

    @staticmethod
    def backward(ctx, grad_out):
        from cudnn.block_sparse_attention import block_sparse_attention_backward

        q, k, v, out, lse, index, nums = ctx.saved_tensors
        grads = block_sparse_attention_backward(
            grad_out.contiguous(), q, k, v, out, lse, index, q2k_block_nums=nums,
            softmax_scale=ctx.scale, sparse_block_size=ctx.block,
        )  # fmt: skip
        return grads["dq_tensor"], grads["dk_tensor"], grads["dv_tensor"], *(None,) * 5


def _forward(q, k, v, index, nums, block, scale, empty_rows) -> tuple[torch.Tensor, ...]:
    from cudnn.block_sparse_attention import block_sparse_attention_forward

    result = block_sparse_attention_forward(
        q, k, v, index, q2k_block_nums=nums, sparse_block_size=block, softmax_scale=scale,
        allow_empty_block_nums=empty_rows,
    )  # fmt: skip
    return result["o_tensor"], result["lse_tensor"]


def bsa_call(case: Any) -> Any:
    """A zero-argument call of cuDNN BSA on ``case`` (a ``contenders.Case``), host work done:
    a training step's forward goes through autograd, so ``torch.autograd.grad`` runs cuDNN's
    backward. Raises ``ValueError`` naming what the case asks that cuDNN BSA does not do."""
    q = case.q
    reason = refusal(
        block_size=case.block_size, causal=case.causal, head_dim=q.shape[3], dtype=q.dtype,
        heads_q=q.shape[1], heads_kv=case.k.shape[1], backward=case.backward,
        arch_major=torch.cuda.get_device_capability(q.device)[0],
    )  # fmt: skip
    if reason:
        raise ValueError(reason)
    index, nums, block = block_lists(case.blocks, case.block_size, heads=q.shape[1],
                                     batch=q.shape[0])  # fmt: skip
    empty_rows = bool((nums == 0).any())
    index, nums = index.contiguous().to(q.device), nums.contiguous().to(q.device)
    if case.backward:
        return lambda: _BlockSparseAttention.apply(
            case.q, case.k, case.v, index, nums, block, case.scale, empty_rows
        )
    return lambda: _forward(case.q, case.k, case.v, index, nums, block, case.scale, empty_rows)[0]
