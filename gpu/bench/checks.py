"""The error check: contenders against the fp64 reference, on every query row or a sample.

The fp64 reference (``gpu.reference``) works on every query-key pair: ``4·B·H·Sq·Sk·D`` fp64
FLOPs and several passes over fp64 scores. At B=1, H=16, S=16384 that is affordable (the whole
36-case sweep, references included, took 97 s on an H200); at B=4, S=65536 it is 64 times as
much per case (2.7·10¹¹ pairs), and more again for the reference gradients of a training step.
So a case whose ``B·Sq·Sk`` exceeds ``MAX_CHECKED_PAIRS`` (B=1, S=16384) is checked on
a ``RowSample``: as many windows of about ``WINDOW_ROWS`` query rows (whole blocks) as the
budget allows, at least one, the first at row 0, the last (when there are two or more) ending at
Sq, the others evenly spread between. The check costs about the same at any size.

Each window's reference is exact: its queries against every key with the window's rows of the
layout; when causal, against the keys up to the window's last row, with the causal limit
aligned bottom-right (``k <= i + Sk' - Sq'`` for the window's row ``i``, which is the global
``k <= q``), and a window starting past the last key needs no causal limit. The output is
compared on the sampled rows; in a training step so is dq (a row of dq depends only on its own
row), while dk and dv, which sum over every query row, are left unchecked (None).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import torch

from gpu.bench.contenders import Case
from gpu.bench.metrics import errors
from gpu.bench.training import grad_errors, reference_grads
from gpu.reference import dense_masked_attention, dense_masked_attention_backward

#: Query-key pairs per (batch element, head) times the batch checked in full: B=1, S=16384.
MAX_CHECKED_PAIRS = 16384 * 16384
#: Rows per window of a sample (rounded up to whole blocks).
WINDOW_ROWS = 128


@dataclass(frozen=True)
class RowSample:
    """Windows ``(row0, row1)`` of query rows, block-aligned, ascending and disjoint."""

    windows: tuple[tuple[int, int], ...]

    @property
    def rows(self) -> int:
        return sum(row1 - row0 for row0, row1 in self.windows)

    def take(self, tensor: torch.Tensor) -> torch.Tensor:
        """The sampled rows of a ``[B, H, Sq, ...]`` tensor, window after window."""
        return torch.cat([tensor[:, :, row0:row1] for row0, row1 in self.windows], dim=2)


def row_sample(batch: int, seq_q: int, seq_k: int, block_size: int) -> RowSample | None:
    """The rows to check (see the module doc), or None to check every row.

    >>> row_sample(1, 16384, 16384, 64) is None
    True
    >>> sample = row_sample(4, 65536, 65536, 64)
    >>> sample.rows, sample.windows[:2], sample.windows[-1]
    (1024, ((0, 128), (9344, 9472)), (65408, 65536))
    """
    budget = MAX_CHECKED_PAIRS // (batch * seq_k)
    window = -(-WINDOW_ROWS // block_size)  # in blocks
    n_blocks = -(-seq_q // block_size)
    count = max(1, budget // (window * block_size))
    if count * window >= n_blocks:
        return None
    spacing = (n_blocks - window) / max(1, count - 1)  # > window: the windows never overlap
    starts = [round(i * spacing) for i in range(count)]
    return RowSample(tuple(
        (start * block_size, min(seq_q, (start + window) * block_size)) for start in starts
    ))  # fmt: skip


@dataclass(frozen=True)
class References:
    """The fp64 output of a case (its sampled rows with ``sample``) and, in a training step, its
    fp64 ``(dq, dk, dv)`` (only dq's sampled rows with ``sample``)."""

    out: torch.Tensor
    grads: tuple[torch.Tensor, ...] | None
    sample: RowSample | None = None

    def output_errors(self, out: torch.Tensor) -> dict[str, float]:
        """``max_abs_error`` and ``rel_error`` of a contender's output."""
        max_abs, relative = errors(out if self.sample is None else self.sample.take(out), self.out)
        return {"max_abs_error": max_abs, "rel_error": relative}

    def grad_errors(self, grads: tuple[torch.Tensor, ...]) -> dict[str, float]:
        """The gradient errors of ``training.grad_errors`` (dq's alone with a sample)."""
        if self.sample is None:
            return grad_errors(grads, self.grads)
        max_abs, relative = errors(self.sample.take(grads[0]), self.grads[0])
        return {"dq_rel_error": relative, "grad_max_abs_error": max_abs}


def references(case: Case, sample: RowSample | None) -> References:
    """The fp64 references of ``case`` on ``sample`` (None: every row); call under no_grad."""
    if sample is None:
        out = dense_masked_attention(case.q, case.k, case.v, case.blocks, case.block_size,
                                     causal=case.causal, scale=case.scale)  # fmt: skip
        return References(out, reference_grads(case) if case.backward else None)
    windows = list(_windows(case, sample))
    out = torch.cat([
        dense_masked_attention(q, k, v, blocks, case.block_size, scale=case.scale, **causal)
        for _, (q, k, v, blocks), causal in windows
    ], dim=2)  # fmt: skip
    grads = None
    if case.backward:
        grads = (torch.cat([
            dense_masked_attention_backward(
                q, k, v, case.grad_out[:, :, rows], blocks, case.block_size, scale=case.scale,
                **causal,
            )[0]
            for rows, (q, k, v, blocks), causal in windows
        ], dim=2),)  # fmt: skip
    return References(out, grads, sample)


def _windows(case: Case, sample: RowSample) -> Iterator[tuple[slice, tuple, dict[str, Any]]]:
    """``(rows, (q, k, v, blocks), causal arguments)`` of each window of ``sample``, the inputs
    detached (a causal window straddling the last key is split there)."""
    q, k, v = case.q.detach(), case.k.detach(), case.v.detach()
    block, seq_k = case.block_size, k.shape[2]
    for row0, row1 in sample.windows:
        cuts = [row0, *([seq_k] if case.causal and row0 < seq_k < row1 else []), row1]
        for start, end in pairwise(cuts):
            rows = slice(start, end)
            blocks = case.blocks[:, start // block : -(-end // block)]
            if case.causal and end <= seq_k:  # keys up to the window's end, aligned bottom-right
                keys = slice(0, end)
                yield (rows, (q[:, :, rows], k[:, :, keys], v[:, :, keys],
                              blocks[:, :, : -(-end // block)]),
                       {"causal": True, "causal_alignment": "bottom_right"})  # fmt: skip
            else:  # every key is before the window, or no causal limit
                yield rows, (q[:, :, rows], k, v, blocks), {"causal": False}
