"""The error check of a layout held as row runs: fp64 on sampled rows, never the dense grid.

A long-context layout (32 heads x 131,072 tokens) has no ``[H, M, N]`` grid, and a dense
reference of its ``H·S²`` pairs would be 5.5·10¹¹ fp64 scores. So each query row is computed
against the keys its block row's runs reach and no others: gathered keys, the layout's token
mask on them, the causal limit by token position, softmax, times V; memory and time follow the
active blocks of the rows asked for. This is exact, not an approximation: a key outside the
row's runs has no weight.

What is checked (``RunsReferences``):

- the output and dq on ``checks.row_sample``'s query windows (every row when the case is small),
  every head: a row of dq needs only its own row's softmax and ``Δ = rowsum(dO ∘ O)``;
- dk and dv on the same windows taken as key windows (so the first and last key blocks are
  among them; a sink block every query attends is too), on ``KEY_HEADS`` heads spread over the
  heads (every head when there are at most that many): a key's dk and dv sum over *every*
  query that attends it, so each sampled key window is computed exactly over all the query
  block rows whose runs reach it (the transposed runs say which), each row with its whole
  softmax, in chunks of at most ``CHUNK_BYTES`` of scores.

Each element of what is sampled is compared with the harness's own errors and limits
(``metrics.errors``, ``variants.ACCURACY_LIMITS``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from designer.block_runs import BlockRuns
from designer.block_runs import _ranges as ranges
from gpu.bench.checks import RowSample, row_sample
from gpu.bench.metrics import errors

#: Heads whose dk and dv are checked (spread from the first to the last).
KEY_HEADS = 4
#: fp64 scores held at once by one chunk of query rows.
CHUNK_BYTES = 256 << 20


@dataclass(frozen=True)
class RowsAttention:
    """fp64 attention of some query rows of one head: their token positions, the keys their
    runs reach, the softmax weights ``[B, rows, keys]`` and the output ``[B, rows, D]``."""

    rows: torch.Tensor
    keys: torch.Tensor
    probs: torch.Tensor
    out: torch.Tensor


class RunsAttention:
    """Exact fp64 attention of a runs layout, row by row (see the module doc).

    ``q [B, Hq, Sq, D]``, ``k, v [B, Hkv, Sk, D]``; ``runs`` ``[Hq or 1, M, N]`` (one head
    serves every head); causal keeps ``k_idx <= q_idx + causal_offset``.
    """

    def __init__(self, q, k, v, runs: BlockRuns, block_size: int, *, causal: bool, scale: float,
                 causal_offset: int = 0) -> None:  # fmt: skip
        self.q, self.k, self.v = q.detach(), k.detach(), v.detach()
        self.runs, self.block = runs, block_size
        self.causal, self.scale, self.offset = causal, scale, causal_offset
        self.group = q.shape[1] // k.shape[1]
        counts = runs.row_counts()
        self.widest = max(1, int(counts.max()))  # most key blocks of one block row
        self._columns: BlockRuns | None = None

    def _head(self, head: int) -> int:
        return head if self.runs.shape[0] > 1 else 0

    def rows(self, head: int, q_blocks: torch.Tensor) -> RowsAttention:
        """The attention of query block rows ``q_blocks`` (int64, ascending) of ``head``."""
        block, n_q = self.block, self.runs.shape[1]
        seq_q, seq_k = self.q.shape[2], self.k.shape[2]
        first = self.runs.row_ptr[self._head(head) * n_q + q_blocks]
        last = self.runs.row_ptr[self._head(head) * n_q + q_blocks + 1]
        run_row = torch.repeat_interleave(torch.arange(len(q_blocks)), last - first)
        run = ranges(first, last - first)
        starts, stops = self.runs.starts[run].long(), self.runs.stops[run].long()
        key_blocks = torch.unique(ranges(starts, stops - starts))  # sorted
        # the [rows, key blocks] grid of these rows: +1 at each run's start, -1 at its stop
        edges = torch.zeros(len(q_blocks), len(key_blocks) + 1, dtype=torch.int32)
        edges.index_put_((run_row, torch.searchsorted(key_blocks, starts)),
                         torch.ones(len(run), dtype=torch.int32), accumulate=True)  # fmt: skip
        edges.index_put_((run_row, torch.searchsorted(key_blocks, stops)),
                         -torch.ones(len(run), dtype=torch.int32), accumulate=True)  # fmt: skip
        device = self.q.device
        grid = (torch.cumsum(edges, 1)[:, :-1] > 0).to(device)
        offsets = torch.arange(block, device=device)
        rows = (q_blocks.to(device)[:, None] * block + offsets).reshape(-1)
        keys = (key_blocks.to(device)[:, None] * block + offsets).reshape(-1)
        mask = grid.repeat_interleave(block, 0).repeat_interleave(block, 1)
        row_in, key_in = rows < seq_q, keys < seq_k
        rows, keys, mask = rows[row_in], keys[key_in], mask[row_in][:, key_in]
        if self.causal:
            mask &= keys[None, :] <= rows[:, None] + self.offset
        q_h = self.q[:, head, rows].double()
        k_h = self.k[:, head // self.group, keys].double()
        v_h = self.v[:, head // self.group, keys].double()
        scores = torch.matmul(q_h, k_h.transpose(-1, -2)) * self.scale
        scores.masked_fill_(~mask, float("-inf"))
        if not len(keys):  # no key at all: zeros, as an empty row gives
            return RowsAttention(rows, keys, scores, torch.zeros_like(q_h))
        top = scores.amax(-1, keepdim=True)
        top = torch.where(torch.isinf(top), torch.zeros_like(top), top)
        probs = torch.exp(scores - top)
        total = probs.sum(-1, keepdim=True)
        probs /= torch.where(total > 0, total, torch.ones_like(total))
        del scores
        return RowsAttention(rows, keys, probs, torch.matmul(probs, v_h))

    def chunks(self, q_blocks: torch.Tensor) -> Iterator[torch.Tensor]:
        """``q_blocks`` in chunks whose scores stay within ``CHUNK_BYTES`` (a bound from the
        widest block row; at least one block row a chunk)."""
        per_block_row = self.q.shape[0] * self.block * self.block * 8
        size = max(1, CHUNK_BYTES // (per_block_row * 2 * self.widest))
        yield from torch.split(q_blocks, size)

    def grad_rows(
        self, head: int, part: RowsAttention, grad_out: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(dq rows, dS, dO rows)`` of ``part``: ``dS = P ∘ (dO Vᵀ − Δ)`` over its keys."""
        g = grad_out[:, head, part.rows].double()
        v_h = self.v[:, head // self.group, part.keys].double()
        delta = (g * part.out).sum(-1, keepdim=True)
        grad_scores = part.probs * (torch.matmul(g, v_h.transpose(-1, -2)) - delta)
        k_h = self.k[:, head // self.group, part.keys].double()
        return self.scale * torch.matmul(grad_scores, k_h), grad_scores, g

    def attending(self, head: int, k_blocks: torch.Tensor) -> torch.Tensor:
        """int64 query block rows of ``head`` whose runs reach any of ``k_blocks``."""
        if self._columns is None:
            self._columns = self.runs.transpose()
        columns, n_k = self._columns, self.runs.shape[2]
        rows = self._head(head) * n_k + k_blocks
        first, last = columns.row_ptr[rows], columns.row_ptr[rows + 1]
        run = ranges(first, last - first)
        starts, stops = columns.starts[run].long(), columns.stops[run].long()
        return torch.unique(ranges(starts, stops - starts))

    def key_grads(
        self, head: int, key0: int, key1: int, grad_out: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """fp64 ``(dk, dv)`` ``[B, key1 - key0, D]`` of keys ``key0:key1`` from query ``head``
        alone, over every query row that attends them (sum over a GQA group's heads outside)."""
        block = self.block
        k_blocks = torch.arange(key0 // block, -(-key1 // block))
        batch, dim = self.q.shape[0], self.q.shape[3]
        dk = torch.zeros(batch, key1 - key0, dim, dtype=torch.float64, device=self.q.device)
        dv = torch.zeros_like(dk)
        for q_blocks in self.chunks(self.attending(head, k_blocks)):
            part = self.rows(head, q_blocks)
            _, grad_scores, g = self.grad_rows(head, part, grad_out)
            inside = (part.keys >= key0) & (part.keys < key1)
            at = part.keys[inside] - key0
            q_h = self.q[:, head, part.rows].double()
            dv.index_add_(1, at, torch.matmul(part.probs[:, :, inside].transpose(-1, -2), g))
            dk.index_add_(1, at, self.scale * torch.matmul(
                grad_scores[:, :, inside].transpose(-1, -2), q_h))  # fmt: skip
        return dk, dv


def key_heads(heads: int) -> tuple[int, ...]:
    """``KEY_HEADS`` heads spread from the first to the last (all when there are that few).

    >>> key_heads(32), key_heads(3)
    ((0, 10, 21, 31), (0, 1, 2))
    """
    if heads <= KEY_HEADS:
        return tuple(range(heads))
    return tuple(round(i * (heads - 1) / (KEY_HEADS - 1)) for i in range(KEY_HEADS))


@dataclass(frozen=True)
class RunsReferences:
    """fp64 references of a runs case on ``windows`` of query rows (output, dq; every head)
    and ``key_windows`` of keys at ``heads`` (dk, dv); see the module doc."""

    out: torch.Tensor
    grads: tuple[torch.Tensor, ...] | None
    windows: tuple[tuple[int, int], ...]
    key_windows: tuple[tuple[int, int], ...]
    heads: tuple[int, ...]

    def _rows(self, tensor: torch.Tensor) -> torch.Tensor:
        return torch.cat([tensor[:, :, row0:row1] for row0, row1 in self.windows], dim=2)

    def _keys(self, tensor: torch.Tensor) -> torch.Tensor:
        return torch.cat([tensor[:, list(self.heads), key0:key1]
                          for key0, key1 in self.key_windows], dim=2)  # fmt: skip

    def output_errors(self, out: torch.Tensor) -> dict[str, float]:
        max_abs, relative = errors(self._rows(out), self.out)
        return {"max_abs_error": max_abs, "rel_error": relative}

    def grad_errors(self, grads: tuple[torch.Tensor, ...]) -> dict[str, float]:
        """dq's errors on the sampled rows, dk's and dv's on the sampled keys and heads, and
        the largest absolute error of the three."""
        found, largest = {}, []
        for name, take, grad, ref in zip(("dq", "dk", "dv"), (self._rows, self._keys, self._keys),
                                         grads, self.grads, strict=True):  # fmt: skip
            max_abs, relative = errors(take(grad), ref)
            found[f"{name}_rel_error"] = relative
            largest.append(max_abs)
        found["grad_max_abs_error"] = max(largest)
        return found


def runs_references(
    attention: RunsAttention,
    windows: tuple[tuple[int, int], ...],
    key_windows: tuple[tuple[int, int], ...],
    grad_out: torch.Tensor | None,
) -> RunsReferences:
    """The references on these windows (block-aligned starts); gradients when ``grad_out``."""
    block, heads = attention.block, attention.q.shape[1]
    batch, dim = attention.q.shape[0], attention.q.shape[3]
    rows = sum(row1 - row0 for row0, row1 in windows)
    out = torch.empty(batch, heads, rows, dim, dtype=torch.float64, device=attention.q.device)
    dq = torch.empty_like(out) if grad_out is not None else None
    for head in range(heads):
        at = 0
        for row0, row1 in windows:
            part = attention.rows(head, torch.arange(row0 // block, -(-row1 // block)))
            out[:, head, at : at + row1 - row0] = part.out
            if dq is not None:
                dq[:, head, at : at + row1 - row0] = attention.grad_rows(head, part, grad_out)[0]
            at += row1 - row0
    if grad_out is None:
        return RunsReferences(out, None, windows, key_windows, ())
    chosen = key_heads(attention.k.shape[1])
    dk_parts, dv_parts = [], []
    for key0, key1 in key_windows:
        dk = torch.zeros(batch, len(chosen), key1 - key0, dim, dtype=torch.float64,
                         device=out.device)  # fmt: skip
        dv = torch.zeros_like(dk)
        for i, kv_head in enumerate(chosen):
            group = range(kv_head * attention.group, (kv_head + 1) * attention.group)
            for head in group:  # a kv head's gradients sum over its query heads
                head_dk, head_dv = attention.key_grads(head, key0, key1, grad_out)
                dk[:, i] += head_dk
                dv[:, i] += head_dv
        dk_parts.append(dk)
        dv_parts.append(dv)
    grads = (dq, torch.cat(dk_parts, dim=2), torch.cat(dv_parts, dim=2))
    return RunsReferences(out, grads, windows, key_windows, chosen)


def sampled_runs_references(case, sample: RowSample | None) -> RunsReferences:
    """The references of a ``contenders.Case`` whose layout is held as row runs: output and dq
    on ``sample``'s query windows (every row when None), dk and dv on the same sampling of the
    keys (``row_sample`` with the sides swapped); causal aligned top-left, as the harness runs
    it. Call under ``no_grad``."""
    layout = case.runs_layout
    batch, seq_q, seq_k = case.q.shape[0], case.q.shape[2], case.k.shape[2]
    key_sample = row_sample(batch, seq_k, seq_q, layout.block_size)
    attention = RunsAttention(case.q, case.k, case.v, layout.to_runs(), layout.block_size,
                              causal=case.causal, scale=case.scale)  # fmt: skip
    windows = ((0, seq_q),) if sample is None else sample.windows
    key_windows = ((0, seq_k),) if key_sample is None else key_sample.windows
    return runs_references(attention, windows, key_windows, case.grad_out)
