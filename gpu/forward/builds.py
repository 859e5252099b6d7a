"""The forward's build table: which kernel build a plan takes, and the measurements behind it.

On Hopper (compute capability 9.0) a plan takes one of ``HOPPER_BUILDS`` (``gpu.forward.sm90``)
per head dim, costed on its own layout; elsewhere the ``mma.sync`` build of ``_TILES``
(``gpu.forward.sm80``). The alternatives the tile probe times besides them
(``tools/probes/forward_tiles.py``), and that the tests check compute the same function, are
listed here too, so that every figure below names a build of this file.

>>> config = choose_config(head_dim=128, dtype=torch.bfloat16, wgmma=True)
>>> config.block_m, config.block_n, config.n_warps, config.shared_bytes
(128, 128, 12, 200960)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from designer.validate import check_bool, check_choice
from gpu.forward.sm80 import KernelConfig, row_stride_or_none
from gpu.forward.sm90 import HopperConfig
from gpu.support import HEAD_DIMS, dtype_name

# mma.sync: (block_m, block_n, n_warps, min_blocks) per head dim; registers from ptxas 13.0.
# Measured alternatives (H200, bf16, B=1, H=16, S=16384, 2026-11-29; band 6.9 % / dense / band
# 7 % at block 16, effective TFLOP/s):
# - D=64 128x64 237 regs: 268 / 288 / 245; 128x128 (spills 60 B) 267 / 279 / 202; 64x64 2 warps
#   252 / 278 / 226; 128x32 237 / 254 (run 1).
# - D=128 128x64 255 regs (32 B spilled per key tile): 256 / 334 / 254; 128x32 298 / 300 vs
#   316 / 336 (run 1).
_TILES = {64: (128, 64, 4, 2), 128: (128, 64, 4, 2)}
#: mma.sync tiles timed besides the defaults: (head_dim, block_m, block_n, n_warps, min_blocks).
ALTERNATIVE_TILES = [(64, 128, 128, 4, 1), (64, 64, 64, 2, 4)]

#: Settings of a one-consumer Hopper build (64-row query tiles, two CTAs per SM), to extend.
ONE_CONSUMER = {"pingpong": False, "consumers": 1, "min_blocks": 2}
# Hopper: per head dim, the builds a plan chooses from (HopperConfig settings) and each one's
# cost, its time per executed FLOP on dense layouts over the first's; the first is the default.
# A plan takes the build with the least tile area to compute, each query tile counting
# UNIT_TILES tiles more, times its cost.
# Token tiles (partial blocks) are masked by ``tokens`` builds only, which a plan with partial
# blocks takes: the token code alone, never run on full tiles, made them 9 % slower at D=64 (dense
# 2.50 against 2.28 ms, causal 1.26 against 1.17; without it 2.31-2.32 and 1.175, D=128 level;
# checks/2026-12-02-h200-forward-tokens-ab.json).
# A ``tokens`` build copies their words with the K tile into a shared slot
# per stage (``token_stages``, the default) where its shared memory has room for the slots; D=64's
# default, two CTAs of three 64 x 128 stages, has 1.5 KB per SM to spare against 3 KB of slots,
# so its consumers load the words from global memory a tile ahead. Partial against full tiles
# (every tile a token tile of all-ones bits), both ways for each build a plan may take:
# tools/probes/partial_tiles.py.
HOPPER_BUILDS = {
    64: (({**ONE_CONSUMER, "block_n": 128, "stages": 3, "token_stages": False}, 1.0),
         ({**ONE_CONSUMER, "block_n": 64, "min_blocks": 3}, 491 / 439)),
    128: (({"block_n": 128}, 1.0),
          ({**ONE_CONSUMER, "block_n": 64}, 682 / 537)),
}  # fmt: skip
#: Layouts with token tiles (partial blocks) choose from these where a head dim has them: at D=64
#: the default's tiles with two stages, whose shared memory has room for the token slots. On the
#: H200 (tools/probes/partial_tiles.py, every tile a token tile; checks/2026-12-01-h200-partial-
#: tiles-backward.json, then ...-2026-12-02-h200-partial-tiles-d64-token-build.json) it ran dense
#: 2.72 and 2.70 ms against 3.00 and 3.01 for three stages reading the words from global memory,
#: and the 1000-token window 0.222-0.224 against 0.238 (blocks 64 and 128).
HOPPER_TOKEN_BUILDS = {
    64: (({**ONE_CONSUMER, "block_n": 128, "stages": 2}, 1.0), HOPPER_BUILDS[64][1]),
}
# A work unit's fixed cost in its build's tiles: the Q load, the first S and the last P V that
# nothing overlaps, the epilogue. Fitted on the band layouts below (time = tile area x cost plus
# units x this many tiles): 2.2 for 64 x 128, 2.5 for 64 x 64 at 3 CTAs per SM, 2.8 for 128 x 128.
UNIT_TILES = 2.0
# Measured (tools/probes/forward_tiles.py, H200, bf16, B=1, H=16, S=16384, persistent CTAs,
# effective TFLOP/s; benchmarks/results/checks/2026-11-30-h200-hopper-{tiles,narrow-tiles,
# ctas-tiles,dense-d64-tiles}.json):
# - D=64 (dense / band 2.3 % b64 / band 7.3 % b64 / band 6.9 % b128): 64 x 128, one consumer,
#   2 CTAs per SM 482 / 260 / 358 / 384 (3 stages 491 / 265 / 367 / 391); 64 x 64 at 3 CTAs
#   per SM 439 / 316 / 378 / 378 (3 stages 447 / 314 / 379 / 379); 64 x 64 at 2 CTAs, 4 stages
#   410 / 284 / 352 / 351; 128 x 128, two consumers with ping-pong 454 / 212 / 324 / 381 (3
#   stages 466 / 218 / 334 / 393; without ping-pong 408 dense); 128 x 64 377 dense. BigBird:
#   b128 324 (64 x 128) / 289 (128 x 128); b64 283 (64 x 64, 2 CTAs) / 207 / 131.
# - D=128 (dense / BigBird b64 / band 2.3 % b64): 128 x 128 with ping-pong 682 / 203 / 329
#   (without ping-pong 530; earlier, dense / causal / band 2.3 % b128 / band 7 % b128: 685 /
#   611 / 429 / 575 against 532 / 505 / 384 / 473 without and 558 / 516 / 377 / 483 at 128 x 64;
#   3 stages of 128 keys do not fit beside two Q buffers); 64 x 64, one consumer 537 / 351 /
#   377 (64 x 128 with one consumer needs 164 KB, too much for two CTAs per SM).
# - Short rows (checks/2026-11-30-h200-hopper-short-rows-tiles.json): band 2.3 % b128, D=64:
#   64 x 128 with 3 stages 308, 64 x 64 at 3 CTAs 305; D=128: 128 x 128 410, 64 x 64 364. Band
#   7.3 % b64, D=64: 64 x 64 at 3 CTAs 381, 64 x 128 with 3 stages 362.
#: Hopper builds timed besides the table's: (head_dim, HopperConfig settings).
HOPPER_ALTERNATIVES = [
    (64, {"block_n": 128}),
    (64, {"block_n": 128, "stages": 3}),
    (64, {**ONE_CONSUMER, "block_n": 128}),
    (64, {**ONE_CONSUMER, "block_n": 64, "stages": 4}),
    (64, {**ONE_CONSUMER, "block_n": 64, "stages": 3, "min_blocks": 3}),
    (128, {"block_n": 128, "pingpong": False}),
    (128, {"block_n": 64}),
    (128, {**ONE_CONSUMER, "block_n": 64}),
]


def choose_config(
    *,
    head_dim: int,
    dtype: torch.dtype,
    wgmma: bool,
    k_row_stride: int | None = None,
    v_row_stride: int | None = None,
    work: Callable[[int, int], tuple[int, int]] | None = None,
    tokens: bool = False,
) -> KernelConfig | HopperConfig:
    """The kernel build we use for ``head_dim`` and ``dtype``.

    ``wgmma`` picks the Hopper kernel (a plan sets it on compute capability 9.0), which reads
    any strides through TMA: the first of ``HOPPER_BUILDS`` (of ``HOPPER_TOKEN_BUILDS`` where it
    has the head dim, for a layout with ``tokens`` tiles), or given ``work(block_m, block_n)``
    (the layout's active tiles and work items at that tiling), the build whose costed tile area
    is least, each item counting ``UNIT_TILES`` more tiles. The ``mma.sync`` kernel compiles the
    K and V row strides in (None: contiguous rows).
    """
    name = dtype_name(dtype)
    check_choice("head_dim", head_dim, HEAD_DIMS)
    if check_bool("wgmma", wgmma):
        builds = hopper_builds(name, head_dim, tokens=check_bool("tokens", tokens))
        if work is None:
            return builds[0][0]

        def costed_area(build: tuple[HopperConfig, float]) -> float:
            config, cost = build
            tiles, items = work(config.block_m, config.block_n)
            return (tiles + UNIT_TILES * items) * config.block_m * config.block_n * cost

        return min(builds, key=costed_area)[0]
    block_m, block_n, n_warps, min_blocks = _TILES[head_dim]
    return KernelConfig(
        name, head_dim, block_m, block_n, n_warps, min_blocks,
        row_stride_or_none(k_row_stride, head_dim), row_stride_or_none(v_row_stride, head_dim),
    )  # fmt: skip


def hopper_builds(dtype: str, head_dim: int, *, tokens: bool) -> list[tuple[HopperConfig, float]]:
    """The Hopper builds a plan chooses from for ``head_dim``, with their costs: those of
    ``HOPPER_BUILDS``, or for a layout with token tiles (``tokens``) those of
    ``HOPPER_TOKEN_BUILDS`` where it has the head dim, masking them."""
    table = HOPPER_BUILDS[head_dim]
    if tokens:
        table = HOPPER_TOKEN_BUILDS.get(head_dim, table)
    return [(HopperConfig(dtype, head_dim, tokens=tokens, **settings), cost)
            for settings, cost in table]  # fmt: skip


def hopper_token_paths(dtype: str, head_dim: int) -> list[HopperConfig]:
    """Each Hopper build of ``head_dim`` a plan may take (with and without token tiles), masking
    token tiles (``tokens``), then the same builds with the other token-word path
    (``token_stages``) where their shared memory allows it: what the partial-tile tests and
    probe run."""
    plain = [dataclasses.replace(config, tokens=True)
             for config, _ in hopper_builds(dtype, head_dim, tokens=False)]  # fmt: skip
    token = [config for config, _ in hopper_builds(dtype, head_dim, tokens=True)]
    builds = list(dict.fromkeys(plain + token))
    others = []
    for config in builds:
        try:
            other = dataclasses.replace(config, token_stages=not config.token_stages)
        except ValueError:  # no room for the slots
            continue
        if other not in builds:
            others.append(other)
    return builds + others
