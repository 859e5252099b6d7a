"""What the views show about a design: tiles per head, statistics, lints. Pure (no Streamlit).

Large designs stay interactive because the work is done per head and kept: ``head_tiles`` maps
one head's blocks to its segmentation (per-block width and odd/even maps, tile counts, active
blocks per row), cached by the head's content, so an edit, an undo or a redo segments only the
heads that changed. ``analyse`` assembles a design's ``Analysis`` from those and adds the
totals (``SegmentStats``) and ``lint_design``. The tile rows themselves are dropped: at 16 × 256
× 256 blocks they weigh megabytes.

``analysis_key`` names exactly what an analysis depends on (every block, not a sample), so caches
key on it; ``design_digest`` is the stable name runs are stored under.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from designer.cache import LruCache, head_key, head_keys
from designer.design import Design
from designer.lints import Lint, lint_design
from designer.segment import sdd_segment
from designer.segment_stats import SegmentStats, tile_count_stats, tile_maps

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
    """A design's segmentation per head, its statistics and lints."""

    heads: tuple[HeadTiles, ...]
    stats: SegmentStats
    lints: tuple[Lint, ...]

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
    size=lambda found: max(
        sum(head.nbytes for head in found.heads), ANALYSIS_CACHE_BYTES // ANALYSIS_CACHE_ENTRIES
    ),
    ttl_seconds=CACHE_SECONDS,
)


def clear_caches() -> None:
    """Forget every cached segmentation, lint list and analysis (an idle server shrinks back)."""
    for cache in (_HEADS, _LINTS, _ANALYSES):
        cache.clear()


def head_tiles(blocks: np.ndarray, start_width: int) -> HeadTiles:
    """One head's segmentation at ``start_width``, cached by its content.

    >>> tiles = head_tiles(np.ones((4, 4), dtype=np.uint8), 2)
    >>> tiles.tiles, tiles.active
    (((2, 4),), 16)
    """
    blocks = np.asarray(blocks)
    return _heads_tiles(blocks[None], (head_key(blocks),), start_width)[0]


def analysis_key(design: Design) -> str:
    """A digest of all an analysis depends on: every head, block size, start width, causal."""
    layout = design.layout
    settings = (layout.shape, layout.block_size, design.effective_start_width, design.causal)
    digest = hashlib.blake2b(repr(settings).encode(), digest_size=16)
    for key in head_keys(layout):
        digest.update(key.encode())
    return digest.hexdigest()


def design_digest(design: Design) -> str:
    """The name a design's benchmark runs are stored under: blocks, block size, start width,
    causal flag (unchanged across versions, so stored runs stay found)."""
    layout = design.layout
    digest = hashlib.blake2b(digest_size=16)
    settings = (layout.shape, layout.block_size, design.effective_start_width, design.causal)
    digest.update(repr(settings).encode())
    digest.update(layout.to_numpy().tobytes())
    return digest.hexdigest()


def analyse(design: Design, key: str | None = None) -> Analysis:
    """Segment ``design`` at its start width, head by head, and gather what the views show.

    ``key`` is ``analysis_key(design)`` when the caller has it already.

    >>> analysis = analyse(Design(Layout(torch.ones(1, 4, 4, dtype=torch.bool), 64)))
    >>> [(row.width, row.tiles) for row in analysis.stats.widths]
    [(2, 4)]
    """
    layout = design.layout
    heads = _heads_tiles(layout.to_numpy(), head_keys(layout), design.effective_start_width)
    counts: dict[int, int] = {}
    for head in heads:
        for width, tiles in head.tiles:
            counts[width] = counts.get(width, 0) + tiles
    active = sum(head.active for head in heads)
    stats = tile_count_stats(layout, counts, active, head_dim=HEAD_DIM)
    key = key or analysis_key(design)
    lints = _LINTS.get(key, lambda: tuple(lint_design(design)))
    return Analysis(heads, stats, lints)


def cached_analysis(design: Design) -> tuple[str, Analysis]:
    """``(analysis_key(design), analyse(design))``, both computed once per design."""
    key = analysis_key(design)
    return key, _ANALYSES.get(key, lambda: analyse(design, key))


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
    segments = sdd_segment(blocks, start_width)  # heads run in parallel
    widths, odd = tile_maps(blocks, segments)
    counts = np.zeros((len(blocks), len(segments)), dtype=np.int64)
    for p, (width, rows) in enumerate(segments):
        counts[:, p] = np.bincount(rows[:, 0].numpy(), minlength=len(blocks)) // (width * width)
    row_blocks = np.count_nonzero(blocks, axis=2)
    heads = []
    for h in range(len(blocks)):
        arrays = [array[h].copy() for array in (widths, odd, row_blocks)]  # own their memory
        for array in arrays:
            array.flags.writeable = False
        tiles = tuple(
            (width, int(counts[h, p])) for p, (width, _) in enumerate(segments) if counts[h, p]
        )
        heads.append(HeadTiles(names[h], arrays[0], arrays[1], tiles, arrays[2]))
    return heads
