"""What the views show about a design: tiles per head, statistics, lints. Pure (no Streamlit).

Large designs stay interactive because the work is done per head and kept: ``head_tiles`` maps
one head's blocks to its segmentation (per-block width and odd/even maps, tile counts, active
blocks per row), cached by the head's content, so an edit, an undo or a redo segments only the
heads that changed. ``analyse`` assembles a design's ``Analysis`` from those and adds the
totals (``SegmentStats``) and ``lint_design``. The tile rows themselves are dropped: at 16 × 256
× 256 blocks they weigh megabytes.

``analysis_key`` names exactly what an analysis depends on (every block, not a sample), so caches
key on it; ``design_digest`` is the stable name runs are stored under.

``analysis_cost`` estimates an analysis before any of it runs (per cell and per active block,
measured on one core). The app runs one within ``INLINE_ANALYSIS_NS`` and
``INLINE_ANALYSIS_BYTES`` with the page and offers the others on demand (``analysed`` says
whether one is ready), where ``analyse`` reports its progress and segments one head at a time,
so its memory is one head's.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from designer.cache import LruCache, head_key, head_keys
from designer.design import Design
from designer.layout import Layout, TokenStats
from designer.lints import Lint, lint_design
from designer.segment_runs import RunTileMaps, tile_maps_runs
from designer.segment_stats import (
    UNTILED,
    SegmentStats,
    head_tile_maps,
    tile_count_stats,
)

#: Head dimension the FLOP counts assume (they scale linearly with it).
HEAD_DIM = 128
#: Memory the per-head segmentations of every session together may keep (a 4096 × 4096-block
#: head takes 48 MiB: two designs at the size cap).
HEAD_CACHE_BYTES = 384 << 20
#: Seconds a cached result may go unasked before its memory is given back.
CACHE_SECONDS = 15 * 60
#: Whole-design lint lists kept (they are small).
LINT_CACHE_ENTRIES = 16
#: Whole analyses kept, and the memory of the heads they hold: they share their heads with the
#: head cache, but keep them after it lets them go (a 16 x 2048 x 2048-block analysis: 192 MiB).
ANALYSIS_CACHE_ENTRIES = 4
#: What an analysis costs, per cell and per active block (one core, 2026-12-01: 64M cells took
#: 1.3-5.7 s to segment and 1.5-3.8 s to lint, at 1 % to 50 % density), with a margin.
SEGMENT_NS_PER_CELL, SEGMENT_NS_PER_BLOCK = 25, 140
LINT_NS_PER_CELL, LINT_NS_PER_BLOCK = 26, 80
#: Token statistics of partial blocks, per byte of their bits (popcount and masks).
PARTIAL_NS_PER_BYTE = 4
#: Peak bytes: one head's segmentation scratch and tile rows, then the lints over the layout.
SEGMENT_BYTES_PER_CELL, SEGMENT_BYTES_PER_BLOCK = 9, 36
LINT_BYTES_PER_CELL = 12
#: The most an analysis may cost to run with the page (the rest of its 2 s budget goes to
#: reading, building, drawing and the autosave); a costlier one runs when asked.
INLINE_ANALYSIS_NS = 1.0e9
INLINE_ANALYSIS_BYTES = 256 << 20
ANALYSIS_CACHE_BYTES = 256 << 20


@dataclass(frozen=True, eq=False)
class HeadTiles:
    """One head's segmentation as the views use it; arrays are read-only.

    ``widths`` ``[M, N]`` uint16: the width of each block's tile, 0 where inactive,
    ``pictures.UNTILED`` where active but in no tile. ``odd`` ``[M, N]`` bool: the block's tile
    is an odd one of its width (drawn darker). ``tiles``: ``(width, tile count)`` pairs, widest
    first. ``row_blocks`` ``[M]``: active blocks in each query row. ``key``: ``head_key`` of
    the blocks.
    """

    key: str
    widths: np.ndarray
    odd: np.ndarray
    tiles: tuple[tuple[int, int], ...]
    row_blocks: np.ndarray

    @property
    def active(self) -> int:
        return int(self.row_blocks.sum())

    @property
    def nbytes(self) -> int:
        return self.widths.nbytes + self.odd.nbytes + self.row_blocks.nbytes


@dataclass(frozen=True, eq=False)
class Analysis:
    """A design's segmentation per head, its statistics and lints. Segmentation follows block
    activity: a partial block is a block of its tile like any other; ``tokens`` counts full,
    partial and empty blocks and what partial blocks mask away."""

    heads: tuple[HeadTiles, ...]
    stats: SegmentStats
    lints: tuple[Lint, ...]
    tokens: TokenStats
    #: Of a design held as runs (no per-head maps): every block's tile, one byte a block.
    run_tiles: RunTileMaps | None = None

    @property
    def nbytes(self) -> int:
        """What the analysis holds in arrays (its per-head maps or run tile maps)."""
        tiles = 0 if self.run_tiles is None else self.run_tiles.nbytes
        return sum(head.nbytes for head in self.heads) + tiles

    @property
    def widths(self) -> tuple[np.ndarray, ...]:
        """Each head's ``[M, N]`` width map (``analysis.widths[head]``)."""
        return tuple(head.widths for head in self.heads)

    @property
    def odd(self) -> tuple[np.ndarray, ...]:
        """Each head's ``[M, N]`` odd-tile map."""
        return tuple(head.odd for head in self.heads)


_HEADS = LruCache(HEAD_CACHE_BYTES, size=lambda head: head.nbytes, ttl_seconds=CACHE_SECONDS)
_LINTS = LruCache(LINT_CACHE_ENTRIES, ttl_seconds=CACHE_SECONDS)
_ANALYSES = LruCache(
    ANALYSIS_CACHE_BYTES,
    # A small analysis counts as its share of the entries, so no more than those are kept.
    size=lambda found: max(found.nbytes, ANALYSIS_CACHE_BYTES // ANALYSIS_CACHE_ENTRIES),
    ttl_seconds=CACHE_SECONDS,
)


def clear_caches() -> None:
    """Forget every cached segmentation, lint list and analysis (an idle server shrinks back)."""
    for cache in (_HEADS, _LINTS, _ANALYSES):
        cache.clear()


def analysis_cost(design: Design) -> tuple[float, int]:
    """Estimated ``(nanoseconds, peak bytes)`` of ``analyse(design)``, from counts alone."""
    layout = design.layout
    cells, active = layout.cells, layout.nnz
    head_cells, head_active = cells // layout.n_heads, active / layout.n_heads
    ns = (SEGMENT_NS_PER_CELL + LINT_NS_PER_CELL) * cells
    ns += (SEGMENT_NS_PER_BLOCK + LINT_NS_PER_BLOCK) * active
    if layout.partials is not None:  # token statistics: a count over the bits
        ns += PARTIAL_NS_PER_BYTE * layout.partials.bits.numel()
    segment = SEGMENT_BYTES_PER_CELL * head_cells + SEGMENT_BYTES_PER_BLOCK * head_active
    return ns, int(max(segment, LINT_BYTES_PER_CELL * cells))


def runs_with_the_page(design: Design) -> bool:
    """Whether ``design``'s analysis is cheap enough to run with every page that needs it."""
    ns, memory = analysis_cost(design)
    return ns <= INLINE_ANALYSIS_NS and memory <= INLINE_ANALYSIS_BYTES


def analysed(design: Design) -> Analysis | None:
    """``design``'s analysis if it was made already (by anyone on this server), else None."""
    return _ANALYSES.peek(analysis_key(design))


def head_view(design: Design, head: int) -> HeadTiles:
    """One head as the paint canvas draws it: its tiles when the design was analysed or the
    head alone is cheap to segment, else its blocks as untiled (``plain_tiles``)."""
    if (found := analysed(design)) is not None:
        return found.heads[head]
    blocks = design.layout.to_numpy()[head]
    ns = SEGMENT_NS_PER_CELL * blocks.size + SEGMENT_NS_PER_BLOCK * np.count_nonzero(blocks)
    if ns <= INLINE_ANALYSIS_NS and SEGMENT_BYTES_PER_CELL * blocks.size <= INLINE_ANALYSIS_BYTES:
        return head_tiles(blocks, design.effective_start_width)
    return plain_tiles(blocks)


def plain_tiles(blocks: np.ndarray) -> HeadTiles:
    """One head's blocks as ``HeadTiles`` with no segmentation: every active block untiled."""
    widths = np.asarray(blocks, dtype=bool) * np.uint16(UNTILED)
    odd = np.zeros(blocks.shape, dtype=bool)
    row_blocks = np.count_nonzero(blocks, axis=1)
    for array in (widths, odd, row_blocks):
        array.flags.writeable = False
    return HeadTiles("plain-" + head_key(blocks), widths, odd, (), row_blocks)


def head_tiles(blocks: np.ndarray, start_width: int) -> HeadTiles:
    """One head's segmentation at ``start_width``, cached by its content.

    >>> tiles = head_tiles(np.ones((4, 4), dtype=np.uint8), 2)
    >>> tiles.tiles, tiles.active
    (((2, 4),), 16)
    """
    blocks = np.asarray(blocks)
    return _heads_tiles(blocks[None], (head_key(blocks),), start_width)[0]


def _token_digest(layout, digest) -> None:
    """Add a token-exact layout's lengths and partial blocks to ``digest`` (nothing for a
    block-level layout, so its digests are what they were)."""
    if layout.whole_blocks:
        return
    digest.update(repr((layout.seq_len_q, layout.seq_len_k)).encode())
    if layout.partials is not None:
        digest.update(layout.partials.index.numpy().tobytes())
        digest.update(layout.partials.bits.numpy().tobytes())


def analysis_key(design: Design) -> str:
    """A digest of all an analysis depends on: every head, block size, start width, causal,
    and a token-exact layout's lengths and partial blocks."""
    layout = design.layout
    settings = (layout.shape, layout.block_size, design.effective_start_width, design.causal)
    digest = hashlib.blake2b(repr(settings).encode(), digest_size=16)
    for key in head_keys(layout):
        digest.update(key.encode())
    _token_digest(layout, digest)
    return digest.hexdigest()


def design_digest(design: Design) -> str:
    """The name a design's benchmark runs are stored under: blocks, block size, start width,
    causal flag (unchanged across versions, so stored runs stay found), and a token-exact
    layout's lengths and partial blocks."""
    layout = design.layout
    digest = hashlib.blake2b(digest_size=16)
    settings = (layout.shape, layout.block_size, design.effective_start_width, design.causal)
    digest.update(repr(settings).encode())
    if layout.runs is not None:  # held as runs: its canonical arrays name its blocks
        for array in (layout.runs.row_ptr, layout.runs.starts, layout.runs.stops):
            digest.update(array.numpy().tobytes())
    else:
        digest.update(layout.to_numpy().tobytes())
    _token_digest(layout, digest)
    return digest.hexdigest()


@functools.cache
def load_scan_kernels() -> None:
    """Compile (or load from numba's cache) the segmentation's kernels, of a grid and of runs,
    on the calling thread, for the array types the analyses pass them.

    An analysis shares its heads out to scan threads of a lower priority
    (``designer.segment.SCAN_NICENESS``), and whichever thread first calls a kernel compiles it
    while the others wait: on a loaded machine a scan thread compiling a fresh install's kernels
    (20 s at full priority) kept the analysis waiting for minutes. Analyses call this first, and
    a caller at a lower priority itself (a background job) calls it before lowering it.
    """
    tiny = Layout(torch.ones(1, 4, 4, dtype=torch.bool), 16)
    head_tile_maps(tiny.to_numpy()[0], 2)
    tile_maps_runs(tiny.to_runs(), 2)


def analyse(
    design: Design, key: str | None = None, progress: Callable[[float], None] | None = None
) -> Analysis:
    """Segment ``design`` at its start width, head by head, and gather what the views show.

    ``key`` is ``analysis_key(design)`` when the caller has it already. With ``progress``, heads
    are segmented one at a time (memory: one head's) and ``progress(done)`` is called after
    each, ``done`` going from 0 to 1.

    >>> analysis = analyse(Design(Layout(torch.ones(1, 4, 4, dtype=torch.bool), 64)))
    >>> [(row.width, row.tiles) for row in analysis.stats.widths]
    [(2, 4)]
    """
    layout = design.layout
    if layout.runs is not None:
        raise ValueError(
            f"analyse segments each head's dense grid, and this layout of {layout.cells:,} "
            "cells is held as row runs: use designer.layout_stats.layout_stats and "
            "designer.lints.lint_design, which work on runs, and segment it on its runs"
        )
    key = key or analysis_key(design)
    # Lints first: their scratch then comes before the heads' maps are kept, not on top of them.
    lints = _LINTS.get(key, lambda: tuple(lint_design(design)))
    blocks, names, width = layout.to_numpy(), head_keys(layout), design.effective_start_width
    if progress is None:
        heads = _heads_tiles(blocks, names, width)
    else:
        progress(1 / (layout.n_heads + 1))
        heads = ()
        for h in range(layout.n_heads):
            heads += _heads_tiles(blocks[h : h + 1], names[h : h + 1], width)
            progress((h + 2) / (layout.n_heads + 1))
    counts: dict[int, int] = {}
    for head in heads:
        for width, tiles in head.tiles:
            counts[width] = counts.get(width, 0) + tiles
    active = sum(head.active for head in heads)
    stats = tile_count_stats(layout, counts, active, head_dim=HEAD_DIM)
    return Analysis(heads, stats, lints, layout.token_stats())


def analyse_runs(design: Design) -> Analysis:
    """The analysis of a design held as runs, computed on them: the tile of every block
    (``tile_maps_runs``: the canvas colours its windows from it) and the statistics from its
    tile counts, lints on runs, and no per-head maps (views draw such a design from its runs)."""
    layout = design.layout
    load_scan_kernels()
    tiles = tile_maps_runs(layout.to_runs(), design.effective_start_width)
    stats = tile_count_stats(layout, tiles.totals(), layout.nnz, head_dim=HEAD_DIM)
    return Analysis((), stats, tuple(lint_design(design)), layout.token_stats(), tiles)


def cached_runs_analysis(design: Design) -> Analysis:
    """``analyse_runs(design)``, computed once per design content (and kept as ``analysed``
    finds it)."""
    return _ANALYSES.get(analysis_key(design), lambda: analyse_runs(design))


def cached_analysis(
    design: Design, progress: Callable[[float], None] | None = None
) -> tuple[str, Analysis]:
    """``(analysis_key(design), analyse(design))``, both computed once per design."""
    key = analysis_key(design)
    return key, _ANALYSES.get(key, lambda: analyse(design, key, progress))


def _heads_tiles(
    blocks: np.ndarray, names: tuple[str, ...], start_width: int
) -> tuple[HeadTiles, ...]:
    """Every head's ``HeadTiles``: cached ones reused, the others segmented together (heads
    with equal blocks once)."""
    keys = [(name, start_width) for name in names]
    made = {key: _HEADS.peek(key) for key in keys}
    first_of = {key: h for h, key in reversed(list(enumerate(keys)))}
    missing = [first_of[key] for key, head in made.items() if head is None]
    if missing:
        segmented = _segment_heads(blocks[missing], [keys[h][0] for h in missing], start_width)
        for h, head in zip(missing, segmented, strict=True):
            _HEADS.put(keys[h], head)
            made[keys[h]] = head
    return tuple(made[key] for key in keys)


def _segment_heads(blocks: np.ndarray, names: list[str], start_width: int) -> list[HeadTiles]:
    """Each head segmented on its own (``head_tile_maps``): its memory is one head's."""
    load_scan_kernels()
    heads = []
    for h in range(len(blocks)):
        widths, odd, tiles = head_tile_maps(blocks[h], start_width)
        row_blocks = np.count_nonzero(blocks[h], axis=1)
        for array in (widths, odd, row_blocks):
            array.flags.writeable = False
        heads.append(HeadTiles(names[h], widths, odd, tiles, row_blocks))
    return heads
