"""Dense masked attention in plain torch: the oracle every fast path is checked against.

It computes exactly what ``block_sparse_attention`` means, the slow and obvious way: the full
``scale·QKᵀ`` of a chunk of query rows, a token mask built from the block layout (the token
bits of its partial blocks, ``gpu.partials``, and the causal limit, top-left or bottom-right
aligned), softmax over the kept keys, times V; the kv head of a
query head by GQA grouping. A query row with no kept key gives exact zeros (and logsumexp
``-inf``). It runs on the CPU or the GPU, in any compute dtype (float64 for checks, float32 for
``impl="reference"``), and walks heads and chunks of query blocks so that S = 16384 with 16
heads never materialises a ``[B, H, S, S]`` tensor. Peak extra memory is about 4 to 6 times
``chunk_bytes`` (default 512 MiB), since a chunk's scores live beside their masked copy, the
softmax and its temporaries and a bool token mask: measured on the CPU (fp32, causal,
``out`` given), 5.7× at 16 MiB chunks (S = 4096, H = 2), 5.5× at 64 MiB (S = 8192, H = 2) and
4.5× at 128 MiB (S = 8192, H = 4); about 2.0 GB at S = 16384, H = 16 with the default.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

#: Scores held at once, per chunk of query rows, in bytes.
DEFAULT_CHUNK_BYTES = 512 << 20


def dense_masked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    blocks: torch.Tensor,
    block_size: int,
    *,
    causal: bool = False,
    causal_alignment: str = "top_left",
    scale: float | None = None,
    compute_dtype: torch.dtype = torch.float64,
    out: torch.Tensor | None = None,
    return_lse: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    partials: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Block-masked softmax attention of ``q [B,Hq,Sq,D]`` over ``k, v [B,Hkv,Sk,D]``.

    ``blocks`` is a bool ``[Hq or 1, M, N]`` layout (one head broadcasts) with
    ``(M - 1)·block < Sq <= M·block`` and likewise for Sk (the last block may be partial). Query
    head h reads kv head ``h // (Hq // Hkv)``. ``causal`` keeps keys ``k_idx <= q_idx`` when
    ``causal_alignment`` is ``"top_left"``, ``k_idx <= q_idx + Sk - Sq`` when ``"bottom_right"``.
    ``partials``, ``(index [P, 3], bits [P, block, ceil(block / 8)])`` as ``gpu.partials``
    describes, masks tokens inside their blocks. The arguments are trusted (the public API
    validates them). The result is written into
    ``out`` when given, else returned in ``compute_dtype``; with ``return_lse`` the natural-log
    logsumexp ``[B, Hq, Sq]`` of the kept scaled scores comes too (``-inf`` for empty rows).

    >>> q = k = v = torch.randn(1, 1, 4, 8)
    >>> dense_masked_attention(q, k, v, torch.ones(1, 2, 2, dtype=torch.bool), 2).shape
    torch.Size([1, 1, 4, 8])
    """
    batch, n_heads, seq_q, _ = q.shape
    if out is None:
        out = torch.empty(q.shape, dtype=compute_dtype, device=q.device)
    lse = (
        torch.empty((batch, n_heads, seq_q), dtype=compute_dtype, device=q.device)
        if return_lse
        else None
    )
    for h, rows, _, _, v_h, scores in _score_chunks(
        q, k, v, blocks, block_size, causal, causal_alignment, scale, compute_dtype, chunk_bytes,
        partials,
    ):  # fmt: skip
        out[:, h, rows] = _masked_softmax_times(scores, v_h)
        if return_lse:
            lse[:, h, rows] = torch.logsumexp(scores, dim=-1)
    return (out, lse) if return_lse else out


Chunk = tuple[int, slice, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _score_chunks(
    q, k, v, blocks, block_size, causal, causal_alignment, scale, compute_dtype, chunk_bytes,
    partials,
) -> Iterator[Chunk]:  # fmt: skip
    """Per query head and chunk of query rows: ``(head, rows, q chunk, k_h, v_h, scores)`` in
    ``compute_dtype``, the scaled scores ``[B, rows, Sk]`` at ``-inf`` where the layout or the
    causal limit masks them. A chunk holds about ``chunk_bytes`` of scores."""
    batch, n_heads, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    group = n_heads // k.shape[1]
    scale = head_dim**-0.5 if scale is None else scale
    offset = seq_k - seq_q if causal_alignment == "bottom_right" else 0
    bytes_per_row = batch * seq_k * torch.finfo(compute_dtype).bits // 8
    rows_per_chunk = max(1, chunk_bytes // max(1, bytes_per_row * block_size)) * block_size
    blocks = blocks.to(q.device)
    if partials is not None:
        partials = tuple(t.to(q.device) for t in partials)
    key_idx = torch.arange(seq_k, device=q.device)
    for h in range(n_heads):
        layout_head = h if blocks.shape[0] > 1 else 0
        head_blocks = blocks[layout_head]
        k_h = k[:, h // group].to(compute_dtype)
        v_h = v[:, h // group].to(compute_dtype)
        for row0 in range(0, seq_q, rows_per_chunk):
            row1 = min(seq_q, row0 + rows_per_chunk)
            mask = _token_mask(head_blocks, block_size, row0, row1, partials, layout_head)
            mask = mask[:, :seq_k]
            if causal:
                query_idx = torch.arange(row0, row1, device=q.device)
                mask &= key_idx[None, :] <= query_idx[:, None] + offset
            q_chunk = q[:, h, row0:row1].to(compute_dtype)
            scores = torch.matmul(q_chunk, k_h.transpose(-1, -2)) * scale
            scores.masked_fill_(~mask, float("-inf"))  # in place: one chunk of scores alive
            yield h, slice(row0, row1), q_chunk, k_h, v_h, scores


def _token_mask(
    head_blocks: torch.Tensor, block_size: int, row0: int, row1: int, partials, head: int
) -> torch.Tensor:
    """The ``[row1 - row0, N·block]`` token mask of query rows ``row0:row1`` (block-aligned
    start) of layout head ``head``: its blocks, and the bits of its partial blocks."""
    first, last = row0 // block_size, (row1 - 1) // block_size + 1
    rows = head_blocks[first:last]
    mask = rows.repeat_interleave(block_size, 0).repeat_interleave(block_size, 1)
    if partials is not None:
        index, bits = partials
        chosen = (index[:, 0] == head) & (index[:, 1] >= first) & (index[:, 1] < last)
        if chosen.any():
            index, bits = index[chosen].long(), bits[chosen]
            shifts = torch.arange(8, device=bits.device, dtype=torch.uint8)
            cells = ((bits[..., None] >> shifts) & 1).bool().flatten(-2)[..., :block_size]
            per_block = mask.view(last - first, block_size, -1, block_size).permute(0, 2, 1, 3)
            at = (index[:, 1] - first, index[:, 2])
            per_block[at] = per_block[at] & cells  # writes through the view into ``mask``
    return mask[row0 - first * block_size : row1 - first * block_size]


def _masked_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Row softmax with masked scores at ``-inf``; a row with no kept score gives zeros."""
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
    weights = torch.exp(scores - row_max)  # exp(-inf) = 0 for masked keys
    total = weights.sum(dim=-1, keepdim=True)
    return weights / torch.where(total > 0, total, torch.ones_like(total))


def _masked_softmax_times(scores: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``softmax(scores) @ values`` per row, masked scores at ``-inf``; empty rows give zeros."""
    return torch.matmul(_masked_softmax(scores), values)


def dense_masked_attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad_out: torch.Tensor,
    blocks: torch.Tensor,
    block_size: int,
    *,
    causal: bool = False,
    causal_alignment: str = "top_left",
    scale: float | None = None,
    compute_dtype: torch.dtype = torch.float64,
    grad_lse: torch.Tensor | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    partials: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` of ``dense_masked_attention`` for the output gradient ``grad_out``.

    The textbook formulas, chunk by chunk of query rows with the same masks as the forward:
    ``P = softmax(scale·QKᵀ | mask)``, ``O = PV``, ``Δ = rowsum(dO ∘ O) - dLSE``,
    ``dV = Pᵀ dO``, ``dS = P ∘ (dO Vᵀ - Δ)``, ``dQ = scale·dS K``, ``dK = scale·dSᵀ Q``; the
    kv gradients of a GQA group are summed over its query heads. ``grad_lse`` is the gradient
    of the logsumexp output, if it was used. Nothing is kept between chunks, so memory stays
    bounded as in the forward. Results come in ``compute_dtype``.

    >>> q = k = v = g = torch.randn(1, 1, 4, 8, dtype=torch.float64)
    >>> [t.shape[2] for t in dense_masked_attention_backward(
    ...     q, k, v, g, torch.ones(1, 2, 2, dtype=torch.bool), 2)]
    [4, 4, 4]
    """
    scale = q.shape[3] ** -0.5 if scale is None else scale
    group = q.shape[1] // k.shape[1]
    dq = torch.zeros(q.shape, dtype=compute_dtype, device=q.device)
    dk = torch.zeros(k.shape, dtype=compute_dtype, device=q.device)
    dv = torch.zeros(v.shape, dtype=compute_dtype, device=q.device)
    for h, rows, q_chunk, k_h, v_h, scores in _score_chunks(
        q, k, v, blocks, block_size, causal, causal_alignment, scale, compute_dtype, chunk_bytes,
        partials,
    ):  # fmt: skip
        g_chunk = grad_out[:, h, rows].to(compute_dtype)
        probs = _masked_softmax(scores)
        delta = (g_chunk * torch.matmul(probs, v_h)).sum(-1, keepdim=True)
        if grad_lse is not None:
            delta = delta - grad_lse[:, h, rows, None].to(compute_dtype)
        grad_scores = probs * (torch.matmul(g_chunk, v_h.transpose(-1, -2)) - delta)
        dq[:, h, rows] = scale * torch.matmul(grad_scores, k_h)
        dk[:, h // group] += scale * torch.matmul(grad_scores.transpose(-1, -2), q_chunk)
        dv[:, h // group] += torch.matmul(probs.transpose(-1, -2), g_chunk)
    return dq, dk, dv
