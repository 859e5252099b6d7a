"""The SDD pipeline (``impl="sdd"``): SDD → block-sparse softmax → DSD, kernels in
``pipeline.cu`` beside this file.

``plan_sdd`` does all host work once per layout (segmentation, tables, upload, compilation);
``run_sdd`` only allocates the packed intermediates and launches, on the caller's torch stream.

Work and traffic, for ``nnz`` active blocks of side ``b``, batch ``B``, head dim ``D``:

- SDD: ``2·B·nnz·b²·D`` FLOPs; reads each group's Q and K rows once per CTA piece, writes the fp32
  scores ``4·B·nnz·b²`` bytes.
- softmax: reads the scores twice and writes P: ``(2·4 + 2)·B·nnz·b²`` bytes.
- DSD: ``2·B·nnz·b²·D`` FLOPs; reads P once (``2·B·nnz·b²`` bytes) and a V block per active block.

So the pipeline moves about ``16·B·nnz·b²`` bytes that a fused kernel keeps on chip: it is
memory-bound, and the segmentation's job is to keep the SDD's tensor-core tiles large.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from designer.run_arrays import RunArrays
from gpu.runtime import allow_shared_memory, compile_kernel, launch_context, source_beside
from gpu.sdd.lut import SddTables, build_tables
from gpu.support import BLOCK_SIZES, DTYPES, HEAD_DIMS, dtype_name

SOURCE = source_beside(__file__)
#: Warp grid (rows × cols) of one SDD CTA per piece size; mirrors SDD_MATMUL_KERNEL in the .cu.
SDD_WARPS = {128: (4, 2), 64: (2, 2), 32: (2, 2), 16: (1, 1)}
SOFTMAX_THREADS = 256


@dataclass(frozen=True)
class KernelConfig:
    """Compile-time choices of one ``pipeline.cu`` module."""

    dtype: str  # a name of gpu.support.DTYPES
    block_size: int
    head_dim: int

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be {' or '.join(DTYPES)}, got {self.dtype!r}")
        if self.block_size not in BLOCK_SIZES:
            raise ValueError(f"block_size must be one of {BLOCK_SIZES}, got {self.block_size}")
        if self.head_dim not in HEAD_DIMS:
            raise ValueError(
                f"head_dim must be {' or '.join(map(str, HEAD_DIMS))}, got {self.head_dim}"
            )

    def defines(self) -> dict[str, int]:
        return {
            "DTYPE_BF16": int(self.dtype == "bf16"),
            "BLOCK": self.block_size,
            "HEAD_DIM": self.head_dim,
        }

    def matmul_shared_bytes(self, piece: int) -> int:
        """Q and K pieces, rows padded by 16 bytes."""
        return 2 * piece * (self.head_dim + 8) * 2

    def dsd_shared_bytes(self) -> int:
        """Two stages of one V block, rows padded by 16 bytes."""
        return 2 * self.block_size * (self.head_dim + 8) * 2


@dataclass(frozen=True)
class WidthLaunch:
    width: int
    piece: int
    n_groups: int
    splits: int
    groups: torch.Tensor  # int32 on the device


@dataclass(frozen=True)
class SddPlan:
    """Device tables and compiled kernels for one layout; reusable for any batch size."""

    config: KernelConfig
    causal: bool
    n_heads: int
    n_q_blocks: int
    n_k_blocks: int
    nnz: int
    launches: list[WidthLaunch]
    row_ptr: torch.Tensor
    col_idx: torch.Tensor
    row_order: torch.Tensor
    kernels: dict[str, Any]


def plan_sdd(
    blocks: torch.Tensor | RunArrays,
    block_size: int,
    *,
    causal: bool,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device,
    start_width: int | None,
) -> SddPlan:
    """Segment ``blocks`` (CPU bool ``[H, M, N]``, or its checked row runs), upload the tables
    and compile the kernels."""
    config = KernelConfig(dtype_name(dtype), block_size, head_dim)
    tables: SddTables = build_tables(blocks, block_size, start_width)
    pieces = sorted({table.piece for table in tables.widths})
    kernels = _compile(config, pieces, device)
    launches = [
        WidthLaunch(t.width, t.piece, t.n_groups, t.splits(block_size), t.groups.to(device))
        for t in tables.widths
    ]
    n_heads, n_q_blocks, n_k_blocks = blocks.shape
    return SddPlan(
        config=config,
        causal=causal,
        n_heads=n_heads,
        n_q_blocks=n_q_blocks,
        n_k_blocks=n_k_blocks,
        nnz=tables.nnz,
        launches=launches,
        row_ptr=tables.row_ptr.to(device),
        col_idx=(tables.col_idx if tables.nnz else torch.zeros(1, dtype=torch.int32)).to(device),
        row_order=tables.row_order.to(device),
        kernels=kernels,
    )


def run_sdd(
    plan: SddPlan,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``O = softmax(scale·QKᵀ | layout) V`` through the three kernels (inputs pre-validated)."""
    with launch_context(q):
        scores = _launch_sdd(plan, q, k, scale)
        probs = _launch_softmax(plan, scores, q)
        return _launch_dsd(plan, probs, v, q, out)


def sdd_scores(plan: SddPlan, q: torch.Tensor, k: torch.Tensor, *, scale: float) -> torch.Tensor:
    """The SDD stage alone: packed fp32 ``[B, nnz, b, b]`` scores, one launch per width."""
    with launch_context(q):
        return _launch_sdd(plan, q, k, scale)


# --------------------------------------------------------------------------- launches
# Each runs inside ``launch_context`` (device and stream entered once per call of the pipeline:
# at small sizes the host cost of a launch is comparable to the kernels).
def _launch_sdd(plan: SddPlan, q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    batch = q.shape[0]
    b = plan.config.block_size
    scores = torch.empty(batch, max(plan.nnz, 1), b, b, dtype=torch.float32, device=q.device)
    for launch in plan.launches:
        threads = 32 * SDD_WARPS[launch.piece][0] * SDD_WARPS[launch.piece][1]
        plan.kernels[f"sdd_matmul_t{launch.piece}"](
            (launch.n_groups * launch.splits**2, batch),
            (threads,),
            (
                _ptr(q), _ptr(k), _ptr(scores), _ptr(launch.groups),
                np.int32(launch.width), np.int32(plan.n_heads), np.int32(q.shape[2]),
                np.int32(k.shape[2]), np.int64(plan.nnz), np.float32(scale),
                np.int32(plan.causal),
            ),
            shared_mem=plan.config.matmul_shared_bytes(launch.piece),
        )  # fmt: skip
    return scores[:, : plan.nnz]


def _launch_softmax(plan: SddPlan, scores: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Softmax over each query row's active blocks: packed 16-bit ``[B, nnz, b, b]`` P."""
    batch, _, seq_q, _ = q.shape
    b = plan.config.block_size
    probs = torch.empty(batch, max(plan.nnz, 1), b, b, dtype=q.dtype, device=q.device)
    total_rows = batch * plan.n_heads * seq_q
    rows_per_cta = SOFTMAX_THREADS // (b // 4)
    if plan.nnz:
        plan.kernels["sdd_softmax"](
            ((total_rows + rows_per_cta - 1) // rows_per_cta,),
            (SOFTMAX_THREADS,),
            (
                _ptr(scores), _ptr(probs), _ptr(plan.row_ptr), np.int32(plan.n_heads),
                np.int32(seq_q), np.int64(plan.nnz), np.int64(total_rows),
            ),
        )  # fmt: skip
    return probs


def _launch_dsd(
    plan: SddPlan, probs: torch.Tensor, v: torch.Tensor, q: torch.Tensor, out: torch.Tensor | None
) -> torch.Tensor:
    """``O = P·V`` walking each query block row's active blocks; empty rows give zeros."""
    if out is None:
        out = torch.empty_like(q)
    batch, _, seq_q, _ = q.shape
    plan.kernels["sdd_dsd"](
        (plan.n_heads * plan.n_q_blocks, batch),
        (32 * plan.config.block_size // 16,),
        (
            _ptr(probs), _ptr(v), _ptr(out), _ptr(plan.row_ptr), _ptr(plan.col_idx),
            _ptr(plan.row_order), np.int32(plan.n_heads), np.int32(seq_q),
            np.int32(v.shape[2]), np.int64(plan.nnz),
        ),
        shared_mem=plan.config.dsd_shared_bytes(),
    )  # fmt: skip
    return out


# --------------------------------------------------------------------------- internals
def _compile(config: KernelConfig, pieces: list[int], device: torch.device) -> dict[str, Any]:
    names = ["sdd_softmax", "sdd_dsd", *(f"sdd_matmul_t{p}" for p in pieces)]
    kernels = {}
    for name in names:
        kernel = compile_kernel(SOURCE, name, config.defines(), device=device.index)
        if name == "sdd_dsd":
            shared = config.dsd_shared_bytes()
        elif name.startswith("sdd_matmul_t"):
            shared = config.matmul_shared_bytes(int(name.removeprefix("sdd_matmul_t")))
        else:
            shared = 0
        allow_shared_memory(kernel, shared, device.index)
        kernels[name] = kernel
    return kernels


def _ptr(tensor: torch.Tensor) -> np.uint64:
    return np.uint64(tensor.data_ptr())
