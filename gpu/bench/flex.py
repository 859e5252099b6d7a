"""FlexAttention as a contender: the same token-level mask, in each variant a user could write.

A ``BlockMask`` is built with ``BlockMask.from_kv_blocks`` rather than ``create_block_mask``: a
tile is *full* when every token pair in it is active, *partial* when some are, and absent
otherwise, computed from the layout at block level (what ``create_block_mask`` would find by
evaluating ``mask_mod`` on all ``Sq·Sk`` pairs, without materialising them). Flex's speed
depends on three choices, so each case offers every ``FlexVariant`` that expresses it exactly:

- the backend: Triton (``flex``, ``flex_tuned``) or FLASH (``flex_flash``:
  ``kernel_options={"BACKEND": "FLASH"}``, FlashAttention-4 written in CuTe DSL);
- the tile (``BLOCK_SIZE``): Flex's default 128 tokens, and the layout's own block size when it
  is a power of two of at least 64 other than 128 and those tiles compute at least
  ``MIN_AREA_SAVING`` less area than 128-token tiles (64-token tiles skip what 128-token tiles
  of a 64-token staircase would compute and mask; dense and causal layouts save nothing, and
  on the H200 on 2026-11-30 their 64-token variants were never faster beyond noise);
- the ``mask_mod`` partial tiles run (``flex_masks.py``): on Triton ``gather``, the layout read
  from one persistent device buffer at 16-token granularity (any layout), and a closed form
  where the layout is one of the families that have one (``closed_form``): ``causal``
  (``q_idx >= kv_idx``), ``band`` (the bidirectional block band of
  ``designer.patterns.sliding_window``, ``|q_idx // block - kv_idx // block| < window_blocks``)
  and ``dense`` (no ``mask_mod``). On FLASH the ``causal`` and ``dense`` forms, else ``lookup``,
  the layout lookup in the form FLASH compiles (see ``flex_masks.py``).

Two traps of FLASH in torch 2.11 shape its variants: with a no-op ``mask_mod`` it drops the
block lists and computes dense attention (pytorch issue 188322), so ``dense`` runs only on dense
layouts and every other layout gets the real lookup; and a ``mask_mod`` without full blocks can
raise ``NotImplementedError``, so every fully active tile is listed as full.

A layout held as row runs (a long-context design, past a dense grid's size) has no grid to
reduce or gather from: ``runs_variants`` offers the ``runs`` form (its runs read in place, any
layout with at most ``MAX_MASK_RUNS`` runs a row) and, for a causal window plus sinks, the
``sinks`` closed form, and ``FlexSession.prepare_runs`` builds their BlockMask from the runs
(``designer.formats.runs_block_mask``), lists one entry per key tile wide on FLASH (FA4 checks
that width) and on Triton where they fit (compact past that). Each such case compiles its own
``mask_mod``.

FlexAttention compiles once per distinct ``mask_mod`` function, tile, backend and shape. So each
``mask_mod`` is built once per session and reads its parameters (the layout, the causal flag,
the band's block size and window) from small persistent tensors that a new case ``copy_``-s or
``fill_``-s: a new case of the same family and shape reuses the compiled kernel (one
``torch.compile(flex_attention)`` per compile mode and backend). Triton is compiled two ways:
Inductor's default tile choice, and ``max-autotune-no-cudagraphs``, which times Triton's
candidate tiles once per graph and keeps the fastest (slower to compile, the strongest Triton
FlexAttention we can field).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from designer.formats.flex_tiles import FLEX_BLOCK, flex_tile_size, kv_lists
from designer.formats.flex_tiles import tile_classes as designer_tile_classes
from designer.formats.runs_block_mask import (
    MAX_MASK_RUNS,
    layout_runs_mask_mod,
    runs_block_mask,
    sinks_window,
)
from designer.layout import Layout
from designer.validate import check_choice, check_int
from gpu.bench.flex_masks import (
    MASK_GRANULARITY,
    causal_mask,
    fill_lookup,
    generate_band_mask,
    generate_gather_mask,
    generate_lookup_mask,
    lookup_buffer,
)

#: The backends: FlexAttention's Triton templates, or FlashAttention-4 (``"FLASH"``).
TRITON, FLASH = "TRITON", "FLASH"
BACKENDS = (TRITON, FLASH)
#: The ``mask_mod`` forms: the layout gathered or looked up from a buffer, or a closed form;
#: for a layout held as row runs, its runs read in place (``runs``) or the closed form of a
#: causal window plus sinks (``sinks``), ``designer.formats.runs_block_mask``.
GATHER, LOOKUP, CAUSAL, BAND, DENSE = "gather", "lookup", "causal", "band", "dense"
RUNS, SINKS = "runs", "sinks"
MASKS = (GATHER, LOOKUP, CAUSAL, BAND, DENSE, RUNS, SINKS)
#: The forms each backend runs (FLASH in torch 2.11 cannot load the 0-d tensors of the gather's
#: causal flag or the band's parameters; see ``flex_masks.py``).
BACKEND_MASKS = {
    TRITON: (GATHER, CAUSAL, BAND, DENSE, RUNS, SINKS),
    FLASH: (LOOKUP, CAUSAL, DENSE, RUNS, SINKS),
}
#: The smallest tile a variant uses (the layout's own block size, from 64 tokens up).
MIN_TILE = 64
#: The layout's own tile is offered when it computes at least this fraction less area than
#: 128-token tiles (the 25 % band at 64-token blocks saves 4.3 % and ran 3-7 % faster at 64 on
#: the H200 on 2026-11-30; causal at S=16384 saves 0.4 %, dense nothing).
MIN_AREA_SAVING = 0.01
#: Compiled graphs kept for ``flex_attention``: a sweep compiles one per (mode, backend, mask
#: form, tile, head dim, sequence length), about 32 for the standard sweep, past Dynamo's
#: default of 8. Hitting the limit raises instead of silently running Flex eagerly.
RECOMPILE_LIMIT = 256
#: The default compile mode's forward tile (128 x 128 or 128 x 64 on Hopper) must divide the
#: ``BLOCK_SIZE``; below 128 tokens it is set to this square.
SMALL_TILE_KERNEL = 64
#: Why a sparse layout never gets a ``mask_mod``-free BlockMask on FLASH.
NO_OP_MASK_TRAP = (
    "the FLASH backend drops the block lists of a BlockMask without a mask_mod and computes "
    "dense attention (pytorch issue 188322): a sparse layout needs the lookup mask_mod"
)


class FlexUnavailable(RuntimeError):
    """The layout or shape cannot be expressed in Flex's tiles."""


@dataclass(frozen=True)
class FlexVariant:
    """One way to run a case in FlexAttention: the ``mask_mod`` form, the tile in tokens and the
    backend.

    >>> FlexVariant(BAND, 64, window_blocks=3).name
    'band-t64'
    """

    mask: str
    tile_size: int
    window_blocks: int = 0  # the band's ``window_blocks`` (``band`` only)
    backend: str = TRITON

    def __post_init__(self) -> None:
        check_choice("backend", self.backend, BACKENDS)
        check_choice("mask", self.mask, MASKS)
        if self.mask not in BACKEND_MASKS[self.backend]:
            raise ValueError(
                f"mask {self.mask!r} does not run on the {self.backend} backend; it takes "
                f"{', '.join(BACKEND_MASKS[self.backend])}"
            )
        tile = check_int("tile_size", self.tile_size, low=MASK_GRANULARITY)
        if tile & (tile - 1):
            raise ValueError(f"tile_size must be a power of two, got {tile}")
        window = check_int("window_blocks", self.window_blocks, low=0)
        if (self.mask == BAND) != (window > 0):
            raise ValueError(
                f"window_blocks must be positive for a band and 0 otherwise, got {window} for "
                f"{self.mask!r}"
            )

    @property
    def name(self) -> str:
        return f"{self.mask}-t{self.tile_size}"


def closed_form(blocks: torch.Tensor, *, causal: bool) -> tuple[str, int] | None:
    """``(mask form, window_blocks)`` of the closed form whose token mask is exactly the layout's
    (with ``causal``) for bool ``[H, M, N]`` blocks, or None when it has none.

    >>> closed_form(torch.ones(1, 4, 4, dtype=torch.bool).tril(), causal=True)
    ('causal', 0)
    >>> band = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 1, 1]], dtype=torch.bool)[None]
    >>> closed_form(band, causal=False)
    ('band', 2)
    """
    _, n_q, n_k = blocks.shape
    rows, cols = torch.arange(n_q)[:, None], torch.arange(n_k)[None, :]
    if causal:  # every block on and below the diagonal: the token mask is q >= kv
        return (CAUSAL, 0) if bool((blocks | (cols > rows)).all()) else None
    if bool(blocks.all()):
        return DENSE, 0
    window = int(blocks[0, 0].sum())
    band = (rows - cols).abs() < window
    return (BAND, window) if window and bool((blocks == band).all()) else None


def flex_variants(
    blocks: torch.Tensor, block_size: int, *, causal: bool, backend: str = TRITON
) -> tuple[FlexVariant, ...]:
    """Every variant of ``backend`` that runs this layout exactly: each tile (see the module
    doc) with, on Triton, the gather and the layout's closed form if it has one; on FLASH the
    causal or dense form if the layout is one, else the lookup. Raises ``FlexUnavailable``
    when none fits."""
    check_choice("backend", backend, BACKENDS)
    tiles = _tiles(blocks, block_size, causal)
    form = closed_form(blocks, causal=causal)
    buffered = [(GATHER if backend == TRITON else LOOKUP, 0)]
    if block_size % MASK_GRANULARITY:
        buffered = []
    if backend == TRITON:
        masks = buffered + ([form] if form is not None else [])
    else:
        masks = [form] if form is not None and form[0] in BACKEND_MASKS[FLASH] else buffered
    if not masks:
        raise FlexUnavailable(f"block_size must be a multiple of {MASK_GRANULARITY}")
    return tuple(FlexVariant(mask, tile, window, backend) for tile in tiles
                 for mask, window in masks)  # fmt: skip


def runs_variants(layout: Layout, *, backend: str = TRITON) -> tuple[FlexVariant, ...]:
    """The variants of a layout held as row runs, at Flex's 128-token tiles (or the layout's
    own blocks from 128 tokens): the sinks-and-window closed form when the layout is that
    family, and the runs read in place (any layout with at most ``MAX_MASK_RUNS`` runs a
    row). Raises ``FlexUnavailable`` when none fits."""
    check_choice("backend", backend, BACKENDS)
    tile = flex_tile_size(layout.block_size)
    if tile % layout.block_size:
        raise FlexUnavailable(
            f"a BlockMask from runs needs blocks dividing {tile} tokens, got block_size "
            f"{layout.block_size}"
        )
    runs = layout.to_runs()
    masks = [SINKS] if sinks_window(runs) is not None else []
    if int((runs.row_ptr[1:] - runs.row_ptr[:-1]).max()) <= MAX_MASK_RUNS:
        masks.append(RUNS)
    if not masks:
        raise FlexUnavailable(
            f"no mask_mod without a dense table fits: a block row has more than "
            f"{MAX_MASK_RUNS} runs and the layout has no closed form"
        )
    return tuple(FlexVariant(mask, tile, backend=backend) for mask in masks)


def _tiles(blocks: torch.Tensor, block_size: int, causal: bool) -> list[int]:
    """The tiles a layout's variants use: 128 tokens and the layout's own block (see the module
    doc), those that divide both sequence lengths."""
    _, n_q, n_k = blocks.shape
    tiles = [FLEX_BLOCK] if FLEX_BLOCK % block_size == 0 else []
    if block_size >= MIN_TILE and block_size != FLEX_BLOCK and not block_size & (block_size - 1):
        tiles.append(block_size)
    tiles = [t for t in tiles if (n_q * block_size) % t == 0 and (n_k * block_size) % t == 0]
    if not tiles:
        raise FlexUnavailable(
            f"the Flex contender needs block_size dividing {FLEX_BLOCK} (or a power of two from "
            f"{MIN_TILE}) and Sq, Sk multiples of its tile, got block_size {block_size}, "
            f"Sq {n_q * block_size}, Sk {n_k * block_size}"
        )
    if len(tiles) == 2:  # the layout's own tile only where it skips work
        default, own = (computed_area(blocks, block_size, causal=causal, tile_size=t)
                        for t in tiles)  # fmt: skip
        if own > (1 - MIN_AREA_SAVING) * default:
            tiles = tiles[:1]
    return tiles


def computed_area(blocks: torch.Tensor, block_size: int, *, causal: bool, tile_size: int) -> int:
    """Token pairs a BlockMask of ``tile_size``-token tiles computes: its full and partial tiles.

    >>> causal = torch.ones(1, 4, 4, dtype=torch.bool).tril()
    >>> computed_area(causal, 64, causal=True, tile_size=128), 128 * 128 * 3
    (49152, 49152)
    """
    full, partial = tile_classes(blocks, block_size, causal=causal, tile_size=tile_size)
    return int((full | partial).sum()) * tile_size * tile_size


def tile_classes(
    blocks: torch.Tensor, block_size: int, *, causal: bool, tile_size: int = FLEX_BLOCK
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(full, partial)`` bool ``[H, Sq/tile, Sk/tile]`` tiles for a bool ``[H, M, N]`` layout,
    within the limits of this contender: the tile a multiple of the block size, or the block
    size itself, and whole tiles.

    >>> full, partial = tile_classes(torch.ones(1, 8, 8, dtype=torch.bool), 32, causal=True)
    >>> full[0].int().tolist(), partial[0].int().tolist()
    ([[0, 0], [1, 0]], [[1, 0], [0, 1]])
    """
    _, n_q, n_k = blocks.shape
    if tile_size % block_size or (n_q * block_size) % tile_size or (n_k * block_size) % tile_size:
        raise FlexUnavailable(
            f"the Flex contender needs block_size dividing {tile_size} and Sq, Sk multiples of "
            f"{tile_size}, got block_size {block_size}, Sq {n_q * block_size}, "
            f"Sk {n_k * block_size}"
        )
    return designer_tile_classes(blocks, block_size, causal=causal, tile_size=tile_size)


@dataclass(frozen=True)
class FlexCall:
    """A compiled ``flex_attention`` bound to one case's ``BlockMask`` and kernel options."""

    compiled: Any
    block_mask: Any
    kernel_options: dict[str, Any] | None

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float
    ) -> torch.Tensor:
        with torch._dynamo.config.patch(
            recompile_limit=RECOMPILE_LIMIT, fail_on_recompile_limit_hit=True
        ):
            return self.compiled(
                q, k, v, block_mask=self.block_mask, scale=scale,
                kernel_options=self.kernel_options,
            )  # fmt: skip


class FlexSession:
    """The compiled ``flex_attention`` and the persistent mask state, reused across cases."""

    def __init__(self) -> None:
        self._compiled: dict[tuple[str | None, str], Any] = {}
        self._gathers: dict[tuple, tuple[torch.Tensor, torch.Tensor, Callable]] = {}
        self._lookups: dict[tuple, tuple[torch.Tensor, Callable]] = {}
        self._bands: dict[str, tuple[torch.Tensor, torch.Tensor, Callable]] = {}

    def prepare(
        self,
        blocks: torch.Tensor,
        block_size: int,
        *,
        causal: bool,
        device: torch.device,
        mode: str | None = None,
        variant: FlexVariant | None = None,
        heads: int | None = None,
    ) -> FlexCall:
        """The call of ``variant`` (default: gather at 128-token tiles) on this layout, host work
        only; ``mode`` is the ``torch.compile`` mode (None: the default), ``heads`` the query
        heads (default: the layout's; the lookup keeps one entry per query head)."""
        from torch.nn.attention.flex_attention import BlockMask, flex_attention

        variant = variant or FlexVariant(GATHER, FLEX_BLOCK)
        if variant.backend == FLASH and variant.mask == DENSE and not bool(blocks.all()):
            raise FlexUnavailable(NO_OP_MASK_TRAP)
        full, partial = tile_classes(blocks, block_size, causal=causal, tile_size=variant.tile_size)
        mask_mod = self._mask_mod(variant, blocks, block_size, causal, device,
                                  heads or blocks.shape[0])  # fmt: skip
        kv_num, kv_indices = kv_lists(partial)
        full_num, full_indices = kv_lists(full)
        block_mask = BlockMask.from_kv_blocks(
            kv_num.to(device),
            kv_indices.to(device),
            full_num.to(device),
            full_indices.to(device),
            BLOCK_SIZE=variant.tile_size,
            mask_mod=mask_mod,
            seq_lengths=(blocks.shape[1] * block_size, blocks.shape[2] * block_size),
        )
        key = (mode, variant.backend)
        if key not in self._compiled:
            self._compiled[key] = torch.compile(flex_attention, dynamic=False, mode=mode)
        options: dict[str, Any] | None = None
        if variant.backend == FLASH:
            options = {"BACKEND": FLASH}
        elif mode is None and variant.tile_size < FLEX_BLOCK:
            options = {"BLOCK_M": SMALL_TILE_KERNEL, "BLOCK_N": SMALL_TILE_KERNEL}
        return FlexCall(self._compiled[key], block_mask, options)

    def prepare_runs(
        self,
        layout: Layout,
        *,
        causal: bool,
        device: torch.device,
        mode: str | None = None,
        variant: FlexVariant,
        backward: bool = False,
    ) -> FlexCall:
        """The call of a ``runs`` or ``sinks`` variant on a layout held as row runs: its
        BlockMask built from the runs (``runs_block_mask``; lists one entry per key tile wide
        on FLASH, whose FA4 checks that width, and on Triton where that fits, as
        ``create_block_mask`` makes them; the transposed lists only for a ``backward``), never
        from a dense grid."""
        from torch.nn.attention.flex_attention import flex_attention

        if variant.mask not in (RUNS, SINKS):
            raise FlexUnavailable(f"a layout held as runs runs the {RUNS} or {SINKS} mask_mod")
        try:
            mask_mod = layout_runs_mask_mod(layout, causal, device, form=variant.mask)
            width = "tiles" if variant.backend == FLASH else "auto"
            block_mask = runs_block_mask(layout, causal=causal, device=device, width=width,
                                         mask_mod=mask_mod, q_lists=backward)  # fmt: skip
        except ValueError as error:
            raise FlexUnavailable(str(error)) from error
        key = (mode, variant.backend)
        if key not in self._compiled:
            self._compiled[key] = torch.compile(flex_attention, dynamic=False, mode=mode)
        options = {"BACKEND": FLASH} if variant.backend == FLASH else None
        return FlexCall(self._compiled[key], block_mask, options)

    def _mask_mod(self, variant, blocks, block_size, causal, device, heads) -> Callable | None:
        """The session's ``mask_mod`` of ``variant``'s form, its state set for this case."""
        if variant.mask == DENSE:
            return None
        if variant.mask == CAUSAL:
            return causal_mask
        if variant.mask == BAND:
            block, window, mask_mod = self._band(device)
            block.fill_(block_size)
            window.fill_(variant.window_blocks)
            return mask_mod
        if block_size % MASK_GRANULARITY:
            raise FlexUnavailable(f"block_size must be a multiple of {MASK_GRANULARITY}")
        seq_q, seq_k = blocks.shape[1] * block_size, blocks.shape[2] * block_size
        if variant.mask == LOOKUP:
            buffer, mask_mod = self._lookup(heads, seq_q, seq_k, causal, device)
            fill_lookup(buffer, blocks, block_size)
            return mask_mod
        buffer, causal_flag, mask_mod = self._gather(blocks.shape[0], seq_q, seq_k, device)
        ratio = block_size // MASK_GRANULARITY
        buffer.copy_(blocks.repeat_interleave(ratio, 1).repeat_interleave(ratio, 2))
        causal_flag.fill_(causal)
        return mask_mod

    def _band(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, Callable]:
        key = str(device)
        if key not in self._bands:
            block = torch.zeros((), dtype=torch.int32, device=device)
            window = torch.zeros((), dtype=torch.int32, device=device)
            self._bands[key] = (block, window, generate_band_mask(block, window))
        return self._bands[key]

    def _gather(self, heads: int, seq_q: int, seq_k: int, device: torch.device):
        key = (heads, seq_q, seq_k, str(device))
        if key not in self._gathers:
            buffer = torch.zeros(
                heads, seq_q // MASK_GRANULARITY, seq_k // MASK_GRANULARITY,
                dtype=torch.bool, device=device,
            )  # fmt: skip
            causal_flag = torch.zeros((), dtype=torch.bool, device=device)
            self._gathers[key] = (buffer, causal_flag, generate_gather_mask(buffer, causal_flag))
        return self._gathers[key]

    def _lookup(self, heads: int, seq_q: int, seq_k: int, causal: bool, device: torch.device):
        key = (heads, seq_q, seq_k, causal, str(device))
        if key not in self._lookups:
            buffer = lookup_buffer(heads, seq_q, seq_k, device)
            self._lookups[key] = (buffer, generate_lookup_mask(buffer, causal=causal))
        return self._lookups[key]
