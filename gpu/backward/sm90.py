"""The Hopper backward builds (``sm90.cu``, sm_90a): their configuration, a plan's launch state
and the launch.

FlashAttention-3's key-major backward on the plan's transposed table (``gpu.backward.lut`` at
64 x 128 tiles): a TMA producer warpgroup and two consumer warpgroups sharing a 128-key tile,
64 keys each, dK and dV in registers (``sm90.cu`` says who does what). The builds differ in how
they compute dQ (``dq``):

- ``"bulk"``: each step's dQ part staged in shared memory and added to a tiled fp32 buffer by
  one bulk reduction (the copy engine), then converted to 16 bits by a small kernel;
- ``"atomic"``: fp32 vector atomics straight from registers, as the ``fused.cu`` kernel does;
- ``"separate"``: none here; the query-major kernel of ``gpu.backward.sm90_dq`` computes it,
  recomputing S and dP, with no atomics: the deterministic build.

The ring's depth (``stages``), whether a step's dQ product is issued ahead of its dK product
(``dq_first``, so that the dQ part is staged while dK runs) and whether writer warps of the
producer warpgroup issue the bulk dQ reductions (``dq_writer``, so that consumers stage their
part and go on) are set per build and head dim by ``gpu.backward.builds.SM90_SCHEDULES``, as
measured; the fields' defaults are the schedule of before.

Token tiles (partial blocks): with ``tokens`` each step's token words (128 key rows of 2 words,
1 KB) travel with its Q tile into a slot per stage and mask Sᵀ before Pᵀ; without, the build
has none of that code (plans without partial blocks compile it so).

GQA: a CTA walks the query heads of its kv head's group one after another, dK and dV summed in
registers. Where that leaves too few CTAs for the GPU (``group_splits``), the group's heads are
split over several CTAs, each writing fp32 partial dK, dV that the host sums (a deterministic
sum; the partials cost ``2 · B · Hkv · splits · Sk · D · 4`` bytes written and read once).

The grid's order (``key_tiles_inner``): with many (batch, kv head, split) pairs a key tile's
pairs together would meet each head with a CTA or two, and every CTA would stream its head's Q,
dO and dQ from memory; the grid then walks a head's key tiles together, so the CTAs on the GPU
share one head's rows in L2 (1.36-1.39x at B = 4, S = 65536 on the H200).

Query rows per step (``block_m``): 64, or 128 at D = 64 (as FlashAttention-3 takes there: twice
the work per step for the same fixed cost, and 64 x 128 products for Sᵀ and dPᵀ); then each
warpgroup computes the dQ part of its 64 queries every step, where at 64 rows the two take turns.

Work of one call: five ``block_m x 128 x D`` products per (query tile, key tile) pair of the
table, ``10 · B · T · block_m · 128 · D`` FLOPs (four without dQ), plus the dQ kernel's for
``"separate"``.

>>> config = HopperBackwardConfig("bf16", 128)
>>> config.block_m, config.block_n, config.threads, config.shared_bytes
(64, 128, 384, 197888)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from designer.validate import check_bool, check_choice
from gpu.backward.fused import compile_prep, readable, run_prep
from gpu.backward.sm90_dq import DqPlan, HopperDqConfig, check_token_path, launch_dq, plan_dq
from gpu.forward.tensor_maps import RowMaps, rows_map, token_words_map
from gpu.launcher import KernelLauncher
from gpu.params import DqConvertParams, HopperBackwardParams
from gpu.runtime import check_shared_memory, compile_kernel, current_raw_stream, source_beside
from gpu.support import DTYPES, HEAD_DIMS, LOG2_E

if TYPE_CHECKING:
    from gpu.plans import BlockSparsePlan

#: How each build computes dQ, and its DQ_MODE define in sm90.cu.
DQ_MODES = {"separate": 0, "atomic": 1, "bulk": 2}
#: Query rows per step the main kernel builds for (``block_m``); 128 only at D = 64.
BLOCK_MS = (64, 128)
#: Query rows of a staged dQ part (one warpgroup's, per step): dq_acc's tiles.
DQ_PART_ROWS = 64
#: Shared bytes after the tiles for the mbarriers and the ring's table entries.
BARRIER_BYTES = 256
#: A kv group's query heads are split over CTAs until the grid has this many CTAs per SM (one
#: CTA fits an SM). Not yet measured: two waves keep the SMs busy while the heaviest key tiles
#: finish.
MIN_CTAS_PER_SM = 2
#: Walking a key tile's (batch, kv head, split) CTAs together, the CTAs on the GPU at once share
#: a head's Q, dO and dQ rows in L2 only where about this many meet each head. Measured on the
#: H200 (``tools/probes/backward_order.py``): with 16 pairs (8.25 CTAs each) that order is as fast
#: as a head's key tiles together on dense, causal and banded layouts and 8-9 % faster on BigBird
#: at block 64 (whose global rows' dQ all of a head's CTAs would add to at once); with 64 pairs (2
#: each) a head's key tiles together are 1.36-1.39x faster (B = 4, S = 65536).
SHARING_CTAS = 8
CONVERT_THREADS = 256


@dataclass(frozen=True)
class HopperBackwardConfig:
    """Compile-time choices of one Hopper backward build; each becomes a ``-D`` define."""

    dtype: str  # a name of gpu.support.DTYPES
    head_dim: int
    dq: str = "bulk"  # a key of DQ_MODES
    stages: int = 2  # Q / dO / lse2 / Δ buffers in the ring
    tokens: bool = False  # token tiles: their words staged with each step's Q tile
    dq_first: bool = False  # dQ issued ahead of dK, its part added while dK runs
    dq_writer: bool = False  # bulk dQ reduced by writer warps, not by the consumers
    block_m: int = 64  # query rows per step: 64, or 128 at D = 64

    block_n = 128  # keys per CTA, 64 per consumer warpgroup
    threads = 384  # the producer warpgroup and two consumers
    source = source_beside(__file__)
    function = "attention_bwd_hopper"

    def __post_init__(self) -> None:
        check_choice("dtype", self.dtype, tuple(DTYPES))
        check_choice("head_dim", self.head_dim, HEAD_DIMS)
        check_choice("dq", self.dq, tuple(DQ_MODES))
        check_choice("stages", self.stages, (2, 3))
        check_bool("tokens", self.tokens)
        check_bool("dq_first", self.dq_first)
        check_bool("dq_writer", self.dq_writer)
        check_choice("block_m", self.block_m, BLOCK_MS)
        if self.block_m == 128 and self.head_dim != 64:
            raise ValueError(
                f"block_m=128 needs head_dim=64 (its Sᵀ and dPᵀ take 64 + 64 registers a thread "
                f"there), got head_dim={self.head_dim}"
            )
        if self.dq_writer and self.dq != "bulk":
            raise ValueError(f"dq_writer needs dq='bulk' (its staged dQ parts), got {self.dq!r}")
        check_shared_memory(
            self.shared_bytes,
            f"dq={self.dq!r}, stages={self.stages}, head_dim={self.head_dim}, "
            f"tokens={self.tokens}, block_m={self.block_m}",
        )

    @property
    def deterministic(self) -> bool:
        """Whether two runs give bitwise-equal gradients (no atomics anywhere)."""
        return self.dq == "separate"

    @property
    def token_tile_bytes(self) -> int:
        """One token tile's words (``tokens``): a row of ``block_m / 32`` words per key."""
        return self.block_n * -(-self.block_m // 32) * 4 if self.tokens else 0

    @property
    def shared_bytes(self) -> int:
        """K, V, the ring (Q, dO, lse2, Δ and a token slot with ``tokens``), two dSᵀ tiles and
        two fp32 dQ staging tiles (where the build computes dQ) and the mbarriers."""
        return self.shared_bytes_at(self.stages)

    def shared_bytes_at(self, stages: int) -> int:
        """``shared_bytes`` of this build with a ring of ``stages``."""
        m, n, d = self.block_m, self.block_n, self.head_dim
        ring = stages * (2 * m * d * 2 + 2 * m * 4 + self.token_tile_bytes)
        ds = 2 * n * m * 2 if self.dq != "separate" else 0
        staging = 2 * DQ_PART_ROWS * 64 * 4 if self.dq == "bulk" else 0
        return 2 * n * d * 2 + ring + ds + staging + BARRIER_BYTES

    def defines(self) -> dict[str, int]:
        return {"DTYPE_BF16": int(self.dtype == "bf16"), "HEAD_DIM": self.head_dim,
                "BLOCK_M": self.block_m, "STAGES": self.stages, "DQ_MODE": DQ_MODES[self.dq],
                "TOKENS": int(self.tokens), "DQ_FIRST": int(self.dq_first),
                "DQ_WRITER": int(self.dq_writer)}  # fmt: skip


def group_splits(n_ctas: int, kv_group: int, n_sms: int) -> int:
    """Into how many CTAs each kv group's query heads go: the fewest (a divisor of
    ``kv_group``) that give ``n_ctas · splits >= MIN_CTAS_PER_SM · n_sms``.

    >>> group_splits(128, 4, 132), group_splits(16, 8, 132), group_splits(512, 8, 132)
    (4, 8, 1)
    """
    for splits in range(1, kv_group + 1):
        if kv_group % splits == 0 and n_ctas * splits >= MIN_CTAS_PER_SM * n_sms:
            return splits
    return kv_group


def key_tiles_inner(pairs: int, n_sms: int) -> bool:
    """Whether the grid walks one (batch, kv head, split)'s key tiles before the next (else a
    key tile's ``pairs`` before the next key tile): where the pairs would leave fewer than
    ``SHARING_CTAS`` CTAs a pair on the GPU at once.

    >>> key_tiles_inner(16, 132), key_tiles_inner(64, 132)
    (False, True)
    """
    return pairs * SHARING_CTAS > n_sms


@dataclass(frozen=True)
class HopperBackwardPlan:
    """Everything a Hopper backward launch needs: tables, compiled kernels, tensor maps."""

    config: HopperBackwardConfig
    causal_offset: int
    n_heads: int  # the layout's: 1 serves every query head
    lists: torch.Tensor
    entries: torch.Tensor
    order: torch.Tensor
    token_words: torch.Tensor  # the table's token tiles (one dummy row when none)
    token_map: bytes  # their tensor map (it points at token_words, kept alive here)
    n_k_tiles: int
    n_tiles: int
    sub_rows_log2: int
    sub_cols_log2: int
    n_sms: int
    prep: KernelLauncher
    main: KernelLauncher
    convert: KernelLauncher | None  # "bulk": the tiled fp32 dQ to 16 bits
    dq: DqPlan | None  # "separate": the dQ kernel
    maps: RowMaps
    key_tiles_inner: bool | None = None  # the grid's order (sm90.cu's Tile); None: by the rule

    def flops(self, batch: int, q_heads: int) -> int:
        """FLOPs the kernels execute for ``batch`` elements."""
        cfg = self.config
        repeats = q_heads if self.n_heads == 1 else 1
        products = 4 if self.dq is not None else 5
        main = 2 * products * batch * repeats * self.n_tiles * cfg.block_m * cfg.block_n
        return main * cfg.head_dim + (0 if self.dq is None else self.dq.flops(batch, repeats))

    def launch(self, *operands, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``launch_hopper_backward(self, *operands, scale)``."""
        return launch_hopper_backward(self, *operands, scale)


def plan_hopper_backward(
    layout: BlockSparsePlan, config: HopperBackwardConfig
) -> HopperBackwardPlan:
    """Compile ``config`` (and its dQ or convert kernel) for the plan's device around the
    plan's transposed table (``gpu.plan(...).backward(...)`` does this for the chosen build).
    A plan with partial blocks needs a build with ``tokens`` (one without would not mask them)."""
    check_token_path(layout, config)
    lut = layout.backward_lut(config.block_m, config.block_n)
    device = layout.device.index
    defines = config.defines()
    main = compile_kernel(config.source, config.function, defines, device=device)
    convert = None
    if config.dq == "bulk":
        kernel = compile_kernel(config.source, "attention_bwd_dq_convert", defines, device=device)
        convert = KernelLauncher(kernel, DqConvertParams, device, 0)
    dq = None
    if config.dq == "separate":
        dq = plan_dq(layout, HopperDqConfig(config.dtype, config.head_dim, tokens=config.tokens))
    return HopperBackwardPlan(
        config=config, causal_offset=layout.causal_offset, n_heads=layout.n_heads,
        lists=lut.lists, entries=lut.entries, order=lut.order, token_words=lut.token_words,
        token_map=token_words_map(lut.token_words), n_k_tiles=lut.n_k_tiles,
        n_tiles=lut.n_tiles, sub_rows_log2=int(math.log2(lut.sub_rows)),
        sub_cols_log2=int(math.log2(lut.sub_cols)),
        n_sms=torch.cuda.get_device_properties(layout.device).multi_processor_count,
        prep=compile_prep(config.dtype, config.head_dim, device),
        main=KernelLauncher(main, HopperBackwardParams, device, config.shared_bytes),
        convert=convert, dq=dq,
        maps=RowMaps(config.block_m, config.block_n, config.block_n, config.block_m),
    )  # fmt: skip


def launch_hopper_backward(
    plan: HopperBackwardPlan,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    grad_lse: torch.Tensor | None,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)``, as ``gpu.backward.fused.launch_backward`` gives them: checked forward
    operands (strides TMA can read: the forward read them so), ``out`` and fp32 ``lse``; any
    view of ``grad_out``; dq, dk and dv contiguous."""
    batch, q_heads, seq_q, head_dim = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    cfg = plan.config
    grad_out = readable(grad_out)
    stream = current_raw_stream(q.device.index)
    rows, seq_q_pad = run_prep(plan.prep, out, grad_out, lse, grad_lse, stream, cfg.block_m)
    n_ctas = plan.n_k_tiles * batch * kv_heads
    splits = group_splits(n_ctas, q_heads // kv_heads, plan.n_sms)
    dq_acc = None
    if cfg.dq == "atomic":
        dq_acc = q.new_zeros(q.shape, dtype=torch.float32)
    elif cfg.dq == "bulk":
        dq_acc = q.new_zeros(batch * q_heads * seq_q_pad * head_dim, dtype=torch.float32)
    parts = None
    if splits > 1:
        parts = q.new_empty((2, batch, kv_heads, splits, seq_k, head_dim), dtype=torch.float32)
    else:
        dk, dv = k.new_empty(k.shape), v.new_empty(v.shape)
    q_map, k_map, v_map, do_map, broadcast = plan.maps(q, k, v, grad_out)
    inner = plan.key_tiles_inner
    if inner is None:
        inner = key_tiles_inner(batch * kv_heads * splits, plan.n_sms)
    plan.main(  # HopperBackwardParams, in field order
        n_ctas * splits, cfg.threads, cfg.shared_bytes, stream,
        # inputs, outputs, the plan's transposed table
        q_map, k_map, v_map, do_map, rows_map(rows, cfg.block_m), plan.token_map,
        0 if dq_acc is None else dq_acc.data_ptr(),
        0 if parts is not None else dk.data_ptr(), 0 if parts is not None else dv.data_ptr(),
        0 if parts is None else parts[0].data_ptr(), 0 if parts is None else parts[1].data_ptr(),
        plan.lists.data_ptr(), plan.entries.data_ptr(), plan.order.data_ptr(),
        # shapes
        batch, q_heads, kv_heads, q_heads // kv_heads, splits, int(plan.n_heads == 1),
        plan.n_k_tiles, seq_q, seq_k, seq_q_pad, broadcast, int(inner),
        # masking and scaling
        plan.causal_offset, plan.sub_rows_log2, plan.sub_cols_log2, scale, scale * LOG2_E,
    )  # fmt: skip
    if plan.dq is not None:
        dq = launch_dq(plan.dq, q, k, v, grad_out, rows, seq_q_pad, layout_heads=plan.n_heads,
                       causal_offset=plan.causal_offset, scale=scale, stream=stream)  # fmt: skip
    elif plan.convert is not None:
        dq = torch.empty_like(q, memory_format=torch.contiguous_format)
        n_vectors = dq_acc.numel() // 4
        plan.convert(  # DqConvertParams, in field order
            -(-n_vectors // CONVERT_THREADS), CONVERT_THREADS, 0, stream,
            dq_acc.data_ptr(), dq.data_ptr(), n_vectors, seq_q, seq_q_pad,
        )  # fmt: skip
    else:
        dq = dq_acc.to(q.dtype)
    if parts is not None:
        # two tensors of their own (a custom op's outputs may not alias each other)
        dk, dv = (part.sum(2).to(k.dtype) for part in parts.unbind(0))
    return dq, dk, dv
