"""The slowest, most obvious block-sparse attention: one full token mask per head, fp64.

Independent of ``gpu.reference`` (no chunking, no shared helpers), so the two check each other.
"""

from __future__ import annotations

import torch

from designer.layout import Layout


def naive_attention(
    q, k, v, blocks, block_size, *, causal=False, scale=None, bottom_right=False, lse=False
):
    """``softmax(scale·QKᵀ masked) V`` per (batch, head) with a full ``[Sq, Sk]`` mask.

    k and v may have fewer heads (GQA); Sq and Sk may end inside a block. With ``lse`` also the
    fp64 logsumexp ``[B, Hq, Sq]`` of the kept scaled scores.
    """
    batch, n_heads, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    group = n_heads // k.shape[1]
    scale = head_dim**-0.5 if scale is None else scale
    layout = Layout(blocks.expand(n_heads, -1, -1), block_size)
    out = torch.zeros(q.shape, dtype=torch.float64)
    logsumexp = torch.zeros(q.shape[:3], dtype=torch.float64)
    for h in range(n_heads):
        mask = layout.token_mask(h)[0, :seq_q, :seq_k]
        if causal:
            diagonal = seq_k - seq_q if bottom_right else 0
            mask = mask & torch.ones(seq_q, seq_k, dtype=torch.bool).tril(diagonal)
        for b in range(batch):
            scores = q[b, h].double().cpu() @ k[b, h // group].double().cpu().T * scale
            scores[~mask] = float("-inf")
            weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # empty rows: 0/0
            out[b, h] = weights @ v[b, h // group].double().cpu()
            logsumexp[b, h] = torch.logsumexp(scores, dim=-1)
    return (out, logsumexp) if lse else out


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in fp64 (0 when both are zero)."""
    out, ref = out.double().cpu(), ref.double().cpu()
    norm = ref.norm()
    diff = (out - ref).norm()
    return float(diff / norm) if norm > 0 else float(diff)


def masked_softmax_attention(q, k, v, allowed, scale):
    """fp64 ``softmax(scale·QKᵀ)·V`` over the allowed keys ``[Hq or 1, Sq, Sk]`` (GQA by
    grouping); rows with no allowed key give zeros and logsumexp -inf."""
    group = q.shape[1] // k.shape[1]
    k, v = (x.repeat_interleave(group, 1) for x in (k, v))
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, -1)
    weights = torch.softmax(scores, -1).nan_to_num(0.0)
    return weights @ v, lse
