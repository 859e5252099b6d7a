"""The backward's builds: the compile-time choices of the backward kernels and the table of
which a plan takes, with the measurements behind it.

Two families. ``fused.cu`` (``BackwardConfig``) holds two instruction paths, ``mma.sync`` (sm_80
and newer) and ``wgmma`` (Hopper, sm_90a), 16 keys per warp either way: the build every GPU but
Hopper runs. ``sm90.cu`` (``gpu.backward.sm90.HopperBackwardConfig``) is FlashAttention-3's
warp-specialised backward for Hopper, in three builds by how they compute dQ (``BUILDS``).
The layout's block size does not enter any build: 128-key tiles of 16- to 64-token blocks are
masked cell by cell, as the forward's are.

``choose_backward_build`` names the build a plan takes; on Hopper that is ``SM90_BUILD``
(``"sm90_bulk"``, the fastest on every case measured), or ``"sm90_separate"`` with
``deterministic=True`` (the only build with no atomics in dQ). Each sm90 build takes the ring
depth and dQ order measured fastest for it and its head dim (``SM90_SCHEDULES``). Every
combination the plan accepts (D 64 and 128, bf16 and fp16, blocks 16-128, GQA, causal in both
alignments, lengths that are not whole blocks, token-masked partial blocks) runs on every build:
``fused.cu`` always carries its token-tile path, an sm90 build compiles it only for a plan with
partial blocks (``backward_build_config(..., token_tiles=True)``).
Tests and probes name a build directly (``gpu.plan(...).backward(..., build=...)``) or through
the ``BLOCKSPARSE_BACKWARD_BUILD`` environment variable.

>>> config = choose_backward_config(head_dim=128, dtype=torch.bfloat16, wgmma=True)
>>> config.block_m, config.block_n, config.n_warps, config.shared_bytes
(64, 128, 8, 150528)
>>> choose_backward_build(hopper=True, deterministic=True)
'sm90_separate'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from designer.validate import check_bool, check_choice, check_int
from gpu.runtime import SHARED_MEMORY_LIMIT, check_shared_memory
from gpu.support import DTYPES, HEAD_DIMS, dtype_name

#: Query rows per step of the main kernel; lse and Δ are padded to a multiple of it.
BLOCK_M = 64

# (n_warps, min_blocks) per (wgmma, head dim); BLOCK_N = 16 keys per warp. Registers from ptxas
# 13.0, mma.sync: D=64 4 warps 207 (168 at 3 CTAs per SM), 8 warps 203; D=128 4 warps 255 (16 B
# spilled), 8 warps 255 (20 B). wgmma: D=64 185 (168 with 12 B spilled at 3 CTAs per SM); D=128
# 255 (4 B spilled).
# Measured (tools/probes/backward_tiles.py, H200, bf16, B=1, H=16, S=16384, 2026-11-30,
# benchmarks/results/2026-11-30-h200-backward-tiles.json; effective TFLOP/s dense b128 / band 7 %
# b64 / band 7 % b16 at D=64, dense / band 24 % / causal b128 at D=128):
# - mma.sync D=64: 4 warps, 2 CTAs per SM 214 / 192 / 175; 3 CTAs 218 / 199 / 185; 8 warps
#   218 / 178 / 161. D=128: 4 warps 218 / 217 / 224; 8 warps 248 / 243 / 251.
# - wgmma D=64: 2 CTAs per SM 253 / 220 / 199; 3 CTAs 265 / 243 / 224. D=128 (8 warps): 348 /
#   334 / 347. Issuing Sᵀ and dPᵀ together (and dV with dK) to overlap the softmax with the
#   tensor cores measured no faster (D=128 349; D=64 257 at 2 CTAs per SM, 150 at 3 where it
#   spills 520 bytes), so the products run one after another.
# dQ: the atomics cost the most. mma.sync D=128 dense, 4 warps: 25.2 ms, 17.1 without the
# atomics (product kept), 14.2 without the dQ product. Staging each dQ tile in shared memory
# and adding it with one bulk reduction (cp.reduce.async.bulk) ran 21.9 ms with 8 warps (22.1 by
# atomics) and 29.6 with 4: the L2 reduction traffic (B·H·T·BLOCK_M·D·4 bytes), not the
# instruction count, is the bound, so wider key tiles per CTA win. A separate dQ pass would
# recompute Sᵀ and dPᵀ (about 10.6 ms more at the measured rate).
_TILES = {
    (False, 64): (4, 3),
    (False, 128): (8, 1),
    (True, 64): (4, 3),
    (True, 128): (8, 1),
}


@dataclass(frozen=True)
class BackwardConfig:
    """Compile-time choices of one backward build; each becomes a ``-D`` define."""

    dtype: str  # a name of gpu.support.DTYPES
    head_dim: int
    n_warps: int = 4
    min_blocks: int = 1
    wgmma: bool = False  # Hopper (sm_90a): one warpgroup per 64 keys; else mma.sync

    def __post_init__(self) -> None:
        check_choice("dtype", self.dtype, tuple(DTYPES))
        check_choice("head_dim", self.head_dim, HEAD_DIMS)
        check_choice("n_warps", self.n_warps, (4, 8))
        check_int("min_blocks", self.min_blocks, low=1, high=4)
        check_bool("wgmma", self.wgmma)
        if self.wgmma and self.n_warps != self.head_dim // 16:
            raise ValueError(
                f"with wgmma each warpgroup computes 64 head dims of dQ, so n_warps must be "
                f"head_dim / 16 = {self.head_dim // 16}, got {self.n_warps}"
            )
        check_shared_memory(self.shared_bytes, f"n_warps={self.n_warps}, head_dim={self.head_dim}")

    block_m = BLOCK_M

    @property
    def block_n(self) -> int:
        return 16 * self.n_warps

    @property
    def threads(self) -> int:
        return 32 * self.n_warps

    @property
    def shared_bytes(self) -> int:
        """K and V tiles, double-buffered Q and dO, the dSᵀ tile, lse and Δ rows, and
        double-buffered token words (``BLOCK_M / 32`` words per key row)."""
        row = self.head_dim * 2
        tiles = 2 * self.block_n * row + 4 * BLOCK_M * row + self.block_n * BLOCK_M * 2
        return tiles + 16 * BLOCK_M + 2 * self.block_n * (BLOCK_M // 32) * 4

    def defines(self) -> dict[str, int]:
        return {
            "DTYPE_BF16": int(self.dtype == "bf16"),
            "HEAD_DIM": self.head_dim,
            "WGMMA": int(self.wgmma),
            "BLOCK_M": BLOCK_M,
            "BLOCK_N": self.block_n,
            "N_WARPS": self.n_warps,
            "MIN_BLOCKS": self.min_blocks,
        }


def choose_backward_config(*, head_dim: int, dtype: torch.dtype, wgmma: bool) -> BackwardConfig:
    """The tiles we use for ``head_dim`` and ``dtype`` (any layout block size); ``wgmma`` picks
    the Hopper path (compute capability 9.0)."""
    check_choice("head_dim", head_dim, HEAD_DIMS)
    n_warps, min_blocks = _TILES[check_bool("wgmma", wgmma), head_dim]
    return BackwardConfig(dtype_name(dtype), head_dim, n_warps, min_blocks, wgmma)


# The sm90 builds (gpu/backward/sm90.py), ptxas 13.0, bf16 and fp16, D=64 and 128: 168
# registers at entry (240 per consumer warpgroup after setmaxnreg, 24 for the producer), no
# spills; the dQ kernel of sm90_separate the same; with the token-tile path (TOKENS=1) too, the
# registers the SASS names unchanged but sm90_separate D=64's (205 -> 207; benchmarks/results/
# checks/2026-12-01-cubins-sm90-backward-tokens.json). Measured (H200, bf16, B=1, H=16, S=16384,
# tools/probes/backward_sm90.py, benchmarks/results/checks/2026-12-01-h200-backward-sm90.json),
# effective TFLOP/s of the backward alone, fused / sm90_bulk / sm90_atomic / sm90_separate /
# cuDNN dense: dense D=128 347 / 507 / 418 / 441 / 548; causal D=128 345 / 525 / 415 / 465 / 550;
# band 25 % D=128 329 / 505 / 409 / 448; band 7 % at blocks of 64, D=128 269 / 376 / 320 / 370;
# dense D=64 276 / 436 / 378 / 352 / 465; band 7 % at 64, D=64 243 / 306 / 282 / 267. sm90_bulk
# wins everywhere: dQ by bulk reduce-add costs least; the separate dQ kernel recomputes S and dP.
# Ring depth (stages) and dQ order (dq_first: dQ issued ahead of dK, its part added while dK runs)
# of each sm90 build, measured on the same cases (tools/probes/backward_sm90.py --with stages=3
# --with dq_first=1 --with stages=3,dq_first=1, 2026-12-02, benchmarks/results/checks/2026-12-02-
# h200-backward-sm90-schedules.json), effective TFLOP/s for 2 stages / 3 / 2 dq_first / 3
# dq_first. sm90_bulk D=128: dense 515 / 453 / 531 / 529, causal 542 / 524 / 529 / 549, band 25 %
# 513 / 493 / 524 / 522, band 7 % at 64 378 / 367 / 385 / 393. sm90_bulk D=64: dense 451 / 458 /
# 439 / 451, causal 441 / 453 / 439 / 451, band 25 % 418 / 429 / 416 / 426, band 7 % 305 / 311 /
# 306 / 309. sm90_atomic D=128: 418 / 386 / 432 / 438, 416 / 416 / 445 / 444, 402 / 405 / 438 /
# 437, 316 / 319 / 338 / 338; D=64: 392 / 394 / 374 / 373, 388 / 393 / 371 / 372, 371 / 376 /
# 356 / 357, 282 / 283 / 272 / 272. At D=64 one warpgroup computes a step's dQ while the other
# does not, so the tensor cores have the other's work while it is added; ahead of dK it only
# delays dK past the barrier. sm90_separate (no dQ) keeps two stages. A ring that leaves no room
# for token slots (sm90_bulk D=128 at 3 stages) takes two. dQ writer warps (dq_writer: the
# bulk reductions issued by two warps of the producer warpgroup on mbarriers, not by each
# consumer between two named barriers), A/B in one run on the schedules above, two runs
# (tools/probes/backward_sm90.py --builds sm90_bulk --with dq_writer=1, 2026-12-02,
# benchmarks/results/checks/2026-12-02-h200-backward-dq-writer-ab-{1,2}.json), TFLOP/s without /
# with: D=128 dense 546 / 556 and 549 / 557, causal 562 / 570 and 567 / 560, band 25 % 538 / 549
# and 540 / 548, band 7 % at 64 388 / 400 and 392 / 399 (mean 1.015x); D=64 dense 467 / 485 and
# 463 / 474, causal 451 / 478 and 454 / 477, band 25 % 431 / 451 and 432 / 452, band 7 % 311 /
# 321 and 311 / 322 (mean 1.042x). cuDNN's dense backward in the same runs: 565-566 at D=128,
# 472-476 at D=64.
#: The HopperBackwardConfig fields of each sm90 build by (build, head dim) that differ from the
#: defaults (2 stages, dK ahead of dQ, the consumers reduce their own dQ, 64-row steps).
SM90_SCHEDULES = {
    ("sm90_bulk", 128): {"stages": 3, "dq_first": True, "dq_writer": True},
    ("sm90_bulk", 64): {"stages": 3, "dq_writer": True},
    ("sm90_atomic", 128): {"dq_first": True},
    ("sm90_atomic", 64): {"stages": 3},
}
# 128-row steps at D=64 (block_m=128: twice the work per step for the same fixed cost, 64 x 128
# products for Sᵀ and dPᵀ, both warpgroups' dQ parts every step; two stages fit), A/B against
# the 64-row schedule above, two runs (tools/probes/backward_sm90.py --builds sm90_bulk --with
# block_m=64,stages=3 [--with block_m=128,stages=2], 2026-12-02, benchmarks/results/checks/
# 2026-12-02-h200-backward-tall-steps-ab-{1,2}.json), effective TFLOP/s 128 rows / 64 rows: dense
# 488 / 470 and 482 / 470, causal 492 / 484 and 489 / 483, band 25 % 459 / 454 and 456 / 452;
# band 7 % at blocks of 64 292 / 332 and 292 / 332, where a 128-row tile computes 1.10x the work
# (half-empty query tiles), so a plan takes 128 rows only where its table grows by at most
# TALL_STEPS_MAX_WORK. The second run times the same 128-row build twice, first and third: 492
# and 482 on dense (the first build timed in a case runs 1-3 % faster, D=128 too), so the gain is
# 1.01-1.03x. cuDNN's dense backward in the same runs: 463-477.
#: The fields of an sm90 build's 128-row schedule, where it has one (by build, head dim).
SM90_TALL_SCHEDULES = {("sm90_bulk", 64): {"block_m": 128, "dq_writer": True}}
#: A plan takes the tall schedule where its table at 128-row tiles computes at most this much
#: more (query rows x tiles) than at 64 rows: the tall steps ran 1.01-1.03x faster per FLOP.
TALL_STEPS_MAX_WORK = 1.02
#: Every backward build a plan can take, by name.
BUILDS = ("fused", "sm90_bulk", "sm90_atomic", "sm90_separate")
#: Whether a Hopper plan takes an sm90 build (True) or the wgmma path of fused.cu.
SM90_DEFAULT = True
#: The sm90 build a Hopper plan takes when SM90_DEFAULT is set (and deterministic is not asked).
SM90_BUILD = "sm90_bulk"
#: The environment variable that names a build for every plan (tests, probes).
BUILD_ENV = "BLOCKSPARSE_BACKWARD_BUILD"


def choose_backward_build(*, hopper: bool, deterministic: bool, build: str | None = None) -> str:
    """The name of the backward build a plan takes (one of ``BUILDS``), with or without
    token-masked blocks.

    ``build`` forces one (an sm90 build only on Hopper); ``deterministic`` asks for
    bitwise-repeatable gradients, which only ``"sm90_separate"`` gives.
    """
    deterministic = check_bool("deterministic", deterministic)
    if build is not None:
        name = check_choice("build", build, BUILDS)
    elif deterministic:
        name = "sm90_separate"
    else:
        name = SM90_BUILD if hopper and SM90_DEFAULT else "fused"
    if name.startswith("sm90") and not hopper:
        why = "deterministic=True needs" if deterministic and build is None else f"{name} is"
        raise ValueError(
            f"{why} the Hopper backward (compute capability 9.0, sm_90a); this GPU runs the "
            "mma.sync backward, which adds dQ with atomics"
        )
    if deterministic and name != "sm90_separate":
        raise ValueError(
            f"deterministic=True needs the sm90_separate backward build (dQ without atomics), "
            f"got build {name!r}"
        )
    return name


def backward_build_config(
    name: str, *, head_dim: int, dtype: torch.dtype, hopper: bool, token_tiles: bool = False,
    tall: bool = False,
) -> Any:  # fmt: skip
    """The configuration of build ``name`` (of ``BUILDS``) for ``head_dim`` and ``dtype``: a
    ``BackwardConfig`` for ``"fused"`` (its wgmma path on Hopper), else a
    ``gpu.backward.sm90.HopperBackwardConfig``, with its token-tile path where ``token_tiles``
    (a plan with token-masked blocks; ``fused.cu`` always has it), and its 128-row schedule
    where ``tall`` and it has one (``SM90_TALL_SCHEDULES``; a plan asks for it where
    ``takes_tall_steps``)."""
    from gpu.backward.sm90 import HopperBackwardConfig  # it imports this module

    check_choice("build", name, BUILDS)
    if name == "fused":
        return choose_backward_config(head_dim=head_dim, dtype=dtype, wgmma=hopper)
    token_tiles, tall = check_bool("token_tiles", token_tiles), check_bool("tall", tall)
    schedules = (
        SM90_TALL_SCHEDULES if tall and has_tall_schedule(name, head_dim) else SM90_SCHEDULES
    )
    fields = dict(schedules.get((name, head_dim), {}))
    stages = fields.pop("stages", 2)
    config = HopperBackwardConfig(dtype_name(dtype), head_dim, dq=name.removeprefix("sm90_"),
                                  tokens=token_tiles, **fields)  # fmt: skip
    if config.shared_bytes_at(stages) <= SHARED_MEMORY_LIMIT:
        config = dataclasses.replace(config, stages=stages)
    return config


def has_tall_schedule(name: str, head_dim: int) -> bool:
    """Whether build ``name`` has a 128-row schedule at ``head_dim``."""
    return (name, head_dim) in SM90_TALL_SCHEDULES


def takes_tall_steps(tiles_at: Callable[[int], int]) -> bool:
    """Whether 128-row steps compute at most ``TALL_STEPS_MAX_WORK`` times the query rows of
    64-row steps, given the table's size at each (``tiles_at(block_m)``).

    >>> takes_tall_steps({128: 64, 64: 128}.get), takes_tall_steps({128: 70, 64: 128}.get)
    (True, False)
    """
    return tiles_at(128) * 128 <= TALL_STEPS_MAX_WORK * tiles_at(64) * 64
