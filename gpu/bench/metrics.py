"""FLOP counting and the derived numbers of a benchmark: TFLOP/s, speedups, errors.

Effective FLOPs count only the attention a layout asks for:
``4·B·H·Sq·Sk·D·density``, where ``density`` is the token-level one, active ``(q, k)`` pairs
over ``Sq·Sk``, averaged over heads and with causal masking inside blocks counted. Two matmuls
(QKᵀ and PV) of ``2·D`` FLOPs per pair give the 4. Every contender is divided into the same
number, so effective TFLOP/s compare like with like; a dense baseline's own rate (full or causal
attention) is reported beside it as ``own_tflops``.

A backward pass is counted as 2.5 times its forward's FLOPs (five matmuls against the forward's
two: QKᵀ recomputed, dV = PᵀdO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀQ), so one training step
(forward then backward) counts 3.5 times the forward's FLOPs.
"""

from __future__ import annotations

import torch


def active_pairs(blocks: torch.Tensor, block_size: int, *, causal: bool) -> int:
    """Active ``(q, k)`` token pairs summed over heads, for a bool ``[H, M, N]`` layout.

    With ``causal`` a pair also needs ``q_idx >= k_idx`` (top-left aligned): a block at
    ``(m, n)`` keeps all ``b²`` pairs below the diagonal (``n < m``), ``b·(b + 1) / 2`` on it,
    none above.

    >>> active_pairs(torch.ones(1, 2, 2, dtype=torch.bool), 4, causal=True)
    36
    """
    if not causal:
        return int(blocks.sum()) * block_size * block_size
    below = int(blocks.tril(-1).sum())
    diagonal = int(blocks.diagonal(dim1=1, dim2=2).sum())
    return below * block_size * block_size + diagonal * block_size * (block_size + 1) // 2


def token_density(blocks: torch.Tensor, block_size: int, *, causal: bool) -> float:
    """Active pairs over all ``H·Sq·Sk`` pairs."""
    heads, n_q, n_k = blocks.shape
    return active_pairs(blocks, block_size, causal=causal) / (heads * n_q * n_k * block_size**2)


def attention_flops(batch: int, head_dim: int, pairs: int) -> int:
    """``4·B·D`` FLOPs per active pair (QKᵀ and PV); ``pairs`` summed over heads."""
    return 4 * batch * head_dim * pairs


#: Backward FLOPs over forward FLOPs, as a fraction ``numerator / denominator`` (exact integers).
BACKWARD_FLOPS_RATIO = (5, 2)


def backward_flops(forward_flops: int) -> int:
    """The FLOPs counted for a backward pass: 2.5 × the forward's.

    >>> backward_flops(4), step_flops(4)
    (10, 14)
    """
    numerator, denominator = BACKWARD_FLOPS_RATIO
    return forward_flops * numerator // denominator


def step_flops(forward_flops: int) -> int:
    """The FLOPs counted for forward plus backward: 3.5 × the forward's."""
    return forward_flops + backward_flops(forward_flops)


def tflops(flops: int, ms: float | None) -> float | None:
    """FLOPs over milliseconds, in TFLOP/s."""
    return None if ms is None or ms <= 0 else flops / (ms * 1e-3) / 1e12


def speedup(baseline_ms: float | None, ms: float | None) -> float | None:
    """How many times faster than the baseline (None when either is missing)."""
    return None if baseline_ms is None or ms is None or ms <= 0 else baseline_ms / ms


def errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """``(max |out − ref|, ‖out − ref‖ / ‖ref‖)`` in fp64; NaN anywhere gives NaN."""
    diff = out.to(torch.float64) - ref
    norm = float(ref.norm())
    relative = float(diff.norm()) / norm if norm > 0 else float(diff.norm())
    return float(diff.abs().max()) if diff.numel() else 0.0, relative


def median(values: list[float]) -> float:
    """The median (mean of the middle two for an even count)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def runs_active_pairs(runs, block_size: int, *, causal: bool) -> int:
    """``active_pairs`` of a layout held as row runs (``designer.block_runs.BlockRuns``), from
    its runs: with ``causal``, each run's blocks left of the diagonal and its diagonal block.

    >>> from designer.block_runs import BlockRuns
    >>> runs_active_pairs(BlockRuns.from_dense(torch.ones(1, 2, 2, dtype=torch.bool)), 4,
    ...                   causal=True)
    36
    """
    if not causal:
        return runs.nnz * block_size * block_size
    row = runs.run_rows() % runs.shape[1]
    starts, stops = runs.starts.to(torch.int64), runs.stops.to(torch.int64)
    below = int((torch.minimum(stops, row) - starts).clamp(min=0).sum())
    diagonal = int(((starts <= row) & (row < stops)).sum())
    return below * block_size * block_size + diagonal * block_size * (block_size + 1) // 2


def all_pairs(n_q: int, n_k: int, block_size: int, *, causal: bool) -> int:
    """``active_pairs`` of one head with every one of its ``n_q x n_k`` blocks active, in closed
    form (no grid).

    >>> all_pairs(3, 5, 4, causal=True) == active_pairs(torch.ones(1, 3, 5, dtype=torch.bool),
    ...                                                 4, causal=True)
    True
    """
    if not causal:
        return n_q * n_k * block_size * block_size
    below = sum(min(m, n_k) for m in range(n_q))
    diagonal = min(n_q, n_k)
    return below * block_size * block_size + diagonal * block_size * (block_size + 1) // 2
