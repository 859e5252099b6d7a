"""``gpu.plan``: all host work of a block-sparse layout done once, like FlexAttention's BlockMask.

A plan holds the checked layout (checked here once: the kernels' tables and launchers take it
as it is), its lengths and causal rule, and, for a CUDA device, the forward kernels' look-up
tables already uploaded: the plan alone builds, uploads and keeps tables, and chooses each
kernel build (``gpu.forward.builds``, ``gpu.backward.builds``). Kernels compile on first use
per (dtype, head dim) and are cached. The backward's transposed table is built and uploaded by
the first backward call, so a plan used only for inference never pays for it (run one training
step before capturing a backward in a CUDA graph, as graph capture needs anyway). A call with a
plan (``gpu.block_sparse_attention(q, k, v, plan)``) then only checks shapes and launches: no
device synchronisation, no copy of the layout, no hashing.

Plans are immutable and safe to share between threads; they are registered by a small integer id
so that the ``torch.library`` op (which cannot take Python objects) can find them.

Causal alignment, for Sq = 3 queries and Sk = 5 keys (``█`` kept, ``·`` masked)::

    top_left (SDPA is_causal)      bottom_right (FlashAttention >= 2.1, KV-cache prefill)
    q0  █ · · · ·                  q0  █ █ █ · ·
    q1  █ █ · · ·                  q1  █ █ █ █ ·
    q2  █ █ █ · ·                  q2  █ █ █ █ █

``top_left`` keeps ``k_idx <= q_idx``; ``bottom_right`` keeps ``k_idx <= q_idx + Sk - Sq`` (with
Sq > Sk its first rows keep no key: zeros, logsumexp -inf).

>>> p = plan(torch.ones(1, 4, 4, dtype=torch.bool), 64, causal=True, device="cpu")
>>> p.n_heads, p.seq_q, p.seq_k, p.causal_alignment
(1, 256, 256, 'top_left')
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import weakref
from typing import Any

import torch

from designer.layout import CAUSAL_ALIGNMENTS, Layout, causal_offset
from designer.run_arrays import RunArrays, check_runs, dense_blocks, repeat_heads, run_offsets
from designer.validate import (
    MAX_LAYOUT_CELLS,
    as_block_tensor,
    check_bool,
    check_choice,
    check_int,
    token_length,
)
from gpu.partials import Partials, check_partials
from gpu.runtime import is_cupy, is_hopper
from gpu.support import BLOCK_SIZES, HEAD_DIMS

_IDS = itertools.count(1)
_BY_ID: weakref.WeakValueDictionary[int, BlockSparsePlan] = weakref.WeakValueDictionary()


class BlockSparsePlan:
    """A checked layout ready to launch; build it with ``gpu.plan``.

    Read-only attributes: ``block_size``, ``causal``, ``causal_alignment``, ``causal_offset``
    (keys ``k_idx <= q_idx + causal_offset`` are kept when causal), ``seq_q``, ``seq_k``,
    ``n_heads`` (1 serves any number of query heads), ``n_q_blocks``, ``n_k_blocks``, ``device``,
    ``density``, ``deterministic`` (the backward's default: bitwise-repeatable gradients),
    ``plan_id`` (how the torch op finds the plan), ``blocks`` (a copy of the CPU bool layout),
    ``runs`` (the layout's checked row runs when it came as runs, else None),
    ``n_partials`` and ``partials`` (copies of the partial blocks' ``(index, bits)``, or None;
    see ``gpu.partials``).
    """

    def __init__(
        self, blocks, block_size, causal, causal_alignment, seq_q, seq_k, device,
        partials=None, deterministic=False,
    ):  # fmt: skip
        set_ = object.__setattr__
        set_(self, "deterministic", deterministic)
        runs = blocks if isinstance(blocks, RunArrays) else None
        set_(self, "runs", runs)  # a layout given by its row runs is never made dense here
        set_(self, "_blocks", None if runs is not None else blocks)
        set_(self, "_partials", partials)  # a checked gpu.partials.Partials, or None
        set_(self, "n_partials", 0 if partials is None else partials.count)
        set_(self, "block_size", block_size)
        set_(self, "causal", causal)
        set_(self, "causal_alignment", causal_alignment)
        set_(self, "seq_q", seq_q)
        set_(self, "seq_k", seq_k)
        set_(self, "device", device)
        if runs is not None:
            set_(self, "density", int(run_offsets(runs)[-1]) / math.prod(runs.shape))
        else:
            set_(self, "density", float(blocks.float().mean()))
        set_(self, "n_heads", int(blocks.shape[0]))  # plain ints: compiled code reads them
        set_(self, "n_q_blocks", int(blocks.shape[1]))
        set_(self, "n_k_blocks", int(blocks.shape[2]))
        set_(self, "causal_offset", causal_offset(causal_alignment, seq_q, seq_k))
        set_(self, "_lock", threading.Lock())
        set_(self, "_fused", {})
        set_(self, "_sdd", {})
        set_(self, "_luts", {})
        set_(self, "_work", {})  # tile_work counted from runs
        set_(self, "_backward", {})
        set_(self, "_backward_luts", {})
        set_(self, "plan_id", next(_IDS))
        _BY_ID[self.plan_id] = self
        set_(self, "_hopper", False)  # the Hopper kernels (compute capability 9.0)
        if device.type == "cuda":  # every table a forward launch may need, uploaded now
            from gpu.forward.builds import choose_config

            set_(self, "_hopper", is_hopper(device))
            for head_dim in HEAD_DIMS:
                config = choose_config(
                    head_dim=head_dim, dtype=torch.bfloat16, wgmma=self._hopper,
                    work=self.tile_work, tokens=self.n_partials > 0,
                )  # fmt: skip
                self.forward_lut(config.block_m, config.block_n)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"BlockSparsePlan is immutable ({name}); build another with gpu.plan")

    # ----------------------------------------------------------------- description
    @property
    def blocks(self) -> torch.Tensor:
        """A copy of the ``[H or 1, M, N]`` CPU bool layout (of at most ``MAX_LAYOUT_CELLS``
        cells when the layout came as runs)."""
        return self.dense_blocks().clone()

    def dense_blocks(self) -> torch.Tensor:
        """The CPU bool layout itself (not a copy; made from the runs, within
        ``MAX_LAYOUT_CELLS``, when the layout came as runs): for the dense reference."""
        return self._blocks if self.runs is None else dense_blocks(self.runs, MAX_LAYOUT_CELLS)

    @property
    def partials(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Copies of the partial blocks' int32 ``index [P, 3]`` and uint8 ``bits [P, block,
        ceil(block / 8)]``, or None when every active block is full."""
        return None if self._partials is None else self._partials.tensors()

    def tiles(self) -> dict[tuple[int, int], int]:
        """Key tiles the forward kernel visits per batch element, per (BLOCK_M, BLOCK_N)
        tiling built so far."""
        return {shape: lut.n_tiles for shape, lut in self._luts.items()}

    def __repr__(self) -> str:
        causal = f", causal={self.causal_alignment}" if self.causal else ""
        tiles = ", ".join(f"{m}x{n}: {count}" for (m, n), count in self.tiles().items())
        return (
            f"BlockSparsePlan(heads={self.n_heads}, blocks={self.n_q_blocks}x{self.n_k_blocks} "
            f"of {self.block_size}, seq={self.seq_q}x{self.seq_k}, density={self.density:.2%}"
            f"{causal}"
            + (f", partial blocks={self.n_partials}" if self.n_partials else "")
            + f", device={self.device}"
            + (f", kernel tiles {{{tiles}}})" if tiles else ")")
        )

    # ----------------------------------------------------------------- what launches read
    def fused(self, dtype: torch.dtype, head_dim: int, k_row_stride: int, v_row_stride: int) -> Any:
        """The ``gpu.forward.launch.FusedPlan`` for this dtype, head dim and K/V row strides
        (elements; compiled into the ``mma.sync`` kernel, while the Hopper kernel reads any
        through TMA), compiled on first use."""
        from gpu.forward.builds import choose_config
        from gpu.forward.launch import plan_forward

        def make() -> Any:
            config = choose_config(
                head_dim=head_dim, dtype=dtype, wgmma=self._hopper,
                k_row_stride=k_row_stride, v_row_stride=v_row_stride, work=self.tile_work,
                tokens=self.n_partials > 0,
            )  # fmt: skip
            return plan_forward(self, config)

        key = (dtype, head_dim) if self._hopper else (dtype, head_dim, k_row_stride, v_row_stride)
        return self._once(self._fused, key, make)

    def sdd(self, dtype: torch.dtype, head_dim: int, start_width: int | None, n_heads: int) -> Any:
        """The ``gpu.sdd.pipeline.SddPlan`` for these settings (segmented and compiled on first
        use)."""
        from gpu.sdd.pipeline import plan_sdd

        def make() -> Any:
            if self.runs is not None:
                one = self.runs.shape[0] == 1 and n_heads != 1
                layout = repeat_heads(self.runs, n_heads) if one else self.runs
            else:
                layout = self._blocks.expand(n_heads, -1, -1).contiguous()
            return plan_sdd(
                layout, self.block_size,
                causal=self.causal, head_dim=head_dim, dtype=dtype, device=self.device,
                start_width=start_width,
            )  # fmt: skip

        return self._once(self._sdd, (dtype, head_dim, start_width, n_heads), make)

    def backward(
        self, dtype: torch.dtype, head_dim: int, *, deterministic: bool | None = None,
        build: str | None = None,
    ) -> Any:  # fmt: skip
        """The backward plan (``gpu.backward.fused.BackwardPlan`` or
        ``gpu.backward.sm90.HopperBackwardPlan``) for this dtype and head dim, compiled on
        first use: the build ``gpu.backward.builds.choose_backward_build`` names, or ``build``
        (else the one the ``BLOCKSPARSE_BACKWARD_BUILD`` environment variable names);
        ``deterministic`` (default: the plan's) asks for bitwise-repeatable gradients."""
        from gpu.backward.builds import (
            BUILD_ENV,
            backward_build_config,
            choose_backward_build,
            has_tall_schedule,
        )

        deterministic = self.deterministic if deterministic is None else deterministic
        name = choose_backward_build(
            hopper=self._hopper, deterministic=deterministic,
            build=build or os.environ.get(BUILD_ENV) or None,
        )  # fmt: skip

        def make() -> Any:
            from gpu.backward.fused import plan_backward
            from gpu.backward.sm90 import plan_hopper_backward

            tall = has_tall_schedule(name, head_dim) and self._takes_tall_steps()
            config = backward_build_config(name, head_dim=head_dim, dtype=dtype,
                                           hopper=self._hopper, token_tiles=self.n_partials > 0,
                                           tall=tall)  # fmt: skip
            return (plan_backward if name == "fused" else plan_hopper_backward)(self, config)

        return self._once(self._backward, (dtype, head_dim, name), make)

    def _once(self, cache: dict, key: tuple, make: Any) -> Any:
        """``cache[key]``, made under the plan's lock the first time (a lookup takes no lock)."""
        found = cache.get(key)
        if found is None:
            with self._lock:
                found = cache.get(key)
                if found is None:
                    found = cache[key] = make()
        return found

    # ----------------------------------------------------------------- look-up tables
    def forward_lut(self, block_m: int, block_n: int) -> Any:
        """The forward's table (``gpu.forward.lut.FusedLut``) for these tiles, on the plan's
        device: built and uploaded on first use, then kept."""
        from gpu.forward.lut import build_fused_lut
        from gpu.forward.run_lut import build_fused_lut_runs

        build = build_fused_lut if self.runs is None else build_fused_lut_runs
        return self._table(self._luts, build, block_m, block_n)

    def tile_work(self, block_m: int, block_n: int) -> tuple[int, int]:
        """Active key tiles and work items of the forward's table for these tiles (what a
        build's cost is counted in; the table is built on first use, except for a layout
        given by runs without partial blocks, whose work is counted from its runs without the
        table)."""
        if self.runs is None or self.n_partials or (block_m, block_n) in self._luts:
            return self.forward_lut(block_m, block_n).work  # token tiles may be dropped
        from gpu.forward.run_lut import tile_work_of_runs

        found = self._work.get((block_m, block_n))  # no lock: fused() asks under the lock
        if found is None:
            found = self._work[block_m, block_n] = tile_work_of_runs(
                self.runs, self.block_size, block_m=block_m, block_n=block_n,
                causal=self.causal, causal_offset=self.causal_offset, seq_q=self.seq_q,
                seq_k=self.seq_k,
            )  # fmt: skip
        return found

    def backward_lut(self, block_m: int, block_n: int) -> Any:
        """The backward's transposed table (``gpu.backward.lut.BackwardLut``) for these tiles,
        on the plan's device: built and uploaded on first use, then kept."""
        from gpu.backward.lut import build_backward_lut, build_backward_lut_runs

        build = build_backward_lut if self.runs is None else build_backward_lut_runs
        return self._table(self._backward_luts, build, block_m, block_n)

    def backward_tiles(self, block_m: int) -> int:
        """Tile pairs of the backward's table at ``block_m x 128`` tiles (a build's choice of
        rows per step weighs them)."""
        return self.backward_lut(block_m, 128).n_tiles

    def _takes_tall_steps(self) -> bool:
        """``gpu.backward.builds.takes_tall_steps`` on this plan's tables, keeping on the device
        only the table of the rows per step it takes."""
        from gpu.backward.builds import takes_tall_steps

        tall = takes_tall_steps(self.backward_tiles)
        self._backward_luts.pop((64 if tall else 128, 128), None)
        return tall

    def _table(self, cache: dict, build: Any, block_m: int, block_n: int) -> Any:
        found = cache.get((block_m, block_n))
        if found is None:
            layout = self._blocks if self.runs is None else self.runs
            found = cache[block_m, block_n] = build(
                layout, self.block_size, block_m=block_m, block_n=block_n, causal=self.causal,
                causal_offset=self.causal_offset, seq_q=self.seq_q, seq_k=self.seq_k,
                partials=self._partials,
            ).to(self.device)  # fmt: skip
        return found


def plan(
    layout: Any,
    block_size: int | None = None,
    *,
    causal: bool = False,
    causal_alignment: str = "top_left",
    seq_q: int | None = None,
    seq_k: int | None = None,
    partials: Any = None,
    device: Any = None,
    deterministic: bool = False,
) -> BlockSparsePlan:
    """Check a layout and do every piece of host work for it once.

    Args:
        layout: a ``designer.Layout`` or a ``[H or 1, M, N]`` 0/1 torch tensor, numpy or CuPy
            array (one head serves every query head), or a layout object whose ``runs``
            attribute holds its row runs (``shape``, ``row_ptr``, ``starts``, ``stops``; see
            ``designer.run_arrays``): its tables are then built from the runs and its
            partial blocks, never from a dense grid.
        block_size: tokens per block side; taken from a ``Layout`` (must agree if given).
        causal: also mask keys past each query inside blocks, aligned by ``causal_alignment``
            (``"top_left"``: ``k <= q``; ``"bottom_right"``: ``k <= q + Sk - Sq``).
        seq_q, seq_k: the token lengths, when the last block row or column is partial:
            ``(M - 1)·block < seq_q <= M·block``. Default: the layout's ``seq_q`` / ``seq_k``
            where it has them, else whole blocks.
        partials: the token masks of partial blocks, ``(index int32 [P, 3], bits uint8 [P,
            block, ceil(block / 8)])`` as ``gpu.partials`` describes (torch, numpy or CuPy);
            default: the layout's ``partials`` where it has them, else every active block is
            full. A layout's own lengths and partials must equal any given here.
        device: where the look-up tables live and the kernels run. Default: a CUDA layout's
            device, else the current CUDA device, else the CPU (a CPU plan serves only
            ``impl="reference"``).
        deterministic: make the backward's gradients bitwise-repeatable (Hopper only: its dQ
            then comes from a query-major kernel instead of atomics; a call may override it).

    >>> plan(torch.ones(2, 16, 16, dtype=torch.bool), 64, seq_q=1000, device="cpu").seq_q
    1000
    """
    runs, block_size = layout_runs(layout, block_size)
    if runs is None:
        blocks, block_size = layout_blocks(layout, block_size)
    seq_q, seq_k = (_layout_value(name, value, layout) for name, value in
                    (("seq_q", seq_q), ("seq_k", seq_k)))  # fmt: skip
    if runs is not None:
        blocks = runs
    checked = _layout_partials(partials, layout, blocks, block_size)
    causal = check_bool("causal", causal)
    causal_alignment = check_choice("causal_alignment", causal_alignment, CAUSAL_ALIGNMENTS)
    _, n_q_blocks, n_k_blocks = blocks.shape
    blocks_text = f"the layout's {{}} blocks of {block_size}"
    seq_q = token_length(f"seq_q ({blocks_text.format(n_q_blocks)})", seq_q, n_q_blocks, block_size)
    seq_k = token_length(f"seq_k ({blocks_text.format(n_k_blocks)})", seq_k, n_k_blocks, block_size)
    device = _device(device, layout)
    if device.type == "cuda":  # what the kernels take, told before any CUDA call
        check_choice("block_size", block_size, BLOCK_SIZES)
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    deterministic = check_bool("deterministic", deterministic)
    return BlockSparsePlan(
        blocks, block_size, causal, causal_alignment, seq_q, seq_k, device, checked,
        deterministic,
    )  # fmt: skip


def _layout_value(name: str, given: Any, layout: Any) -> Any:
    """``given``, or the layout's own ``name`` where it has one (the two must agree)."""
    own = getattr(layout, name, None)
    if own is None:
        return given
    if given is not None and given != own:
        raise ValueError(f"{name} ({given}) must equal the layout's {name} ({own})")
    return own


def _layout_partials(
    given: Any, layout: Any, blocks: torch.Tensor | RunArrays, block_size: int
) -> Partials | None:
    """The checked partials given, or the layout's own (the two must agree)."""
    checked = check_partials(given, blocks, block_size)
    own = getattr(layout, "partials", None)
    if own is None:
        return checked
    own = check_partials(own, blocks, block_size)
    if given is not None and not (
        (checked is None and own is None) or (checked and own and checked.same_as(own))
    ):
        raise ValueError("partials must equal the layout's partials (or be left out)")
    return own


def layout_runs(layout: Any, block_size: int | None) -> tuple[RunArrays | None, int | None]:
    """The checked row runs and the block size of a layout object with a ``runs`` attribute
    (its own ``block_size``, if it has one, must equal ``block_size`` if given), else
    ``(None, block_size)``."""
    runs = getattr(layout, "runs", None)
    if runs is None or isinstance(layout, torch.Tensor):
        return None, block_size
    own = getattr(layout, "block_size", None)
    if own is not None:
        if block_size is not None and block_size != own:
            raise ValueError(
                f"block_size ({block_size}) must equal the layout's block_size ({own})"
            )
        block_size = own
    if block_size is None:
        raise TypeError("block_size is required unless the layout has its own block_size")
    runs = check_runs(runs)
    if 0 in runs.shape:
        raise ValueError(f"layout must have at least one head and block, got {list(runs.shape)}")
    return runs, check_int("block_size", block_size, low=1)


def layout_blocks(
    layout: Any, block_size: int | None, *, allow_2d: bool = False
) -> tuple[torch.Tensor, int]:
    """The checked bool ``[H, M, N]`` blocks and the block size of a ``designer.Layout`` (whose
    block size ``block_size`` must equal if given) or of a 0/1 torch tensor, numpy or CuPy array
    with ``block_size``; ``allow_2d`` also takes ``[M, N]`` as one head."""
    if isinstance(layout, Layout):
        if block_size is not None and block_size != layout.block_size:
            raise ValueError(
                f"block_size ({block_size}) must equal the layout's block_size "
                f"({layout.block_size})"
            )
        blocks, block_size = layout.blocks, layout.block_size
    else:
        if block_size is None:
            raise TypeError("block_size is required unless layout is a designer.Layout")
        if is_cupy(layout):
            layout = torch.from_dlpack(layout)
        blocks = as_block_tensor("layout", layout, allow_2d=allow_2d)
        block_size = check_int("block_size", block_size, low=1)
    if 0 in blocks.shape:
        raise ValueError(f"layout must have at least one head and block, got {list(blocks.shape)}")
    return blocks, block_size


def plan_by_id(plan_id: int) -> BlockSparsePlan:
    """The live plan with this id (the ``torch.library`` op's way back to it)."""
    found = _BY_ID.get(plan_id)
    if found is None:
        raise ValueError(f"no live BlockSparsePlan has id {plan_id}; keep the plan referenced")
    return found


def _device(device: Any, layout: Any) -> torch.device:
    """The plan's device as asked for (a CUDA device may come without its index)."""
    if device is not None:
        device = torch.device(device)
    elif isinstance(layout, torch.Tensor) and layout.device.type == "cuda":
        device = layout.device
    elif torch.cuda.is_available():
        device = torch.device("cuda")
    else:
        device = torch.device("cpu")
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"device must be a CUDA device or the CPU, got {device}")
    return device
