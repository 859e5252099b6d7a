"""What the views show about a design, computed once per design: tiles, statistics, lints.

Pure (no Streamlit): ``analyse`` segments the layout, keeps the per-block maps the pictures are
drawn from (the tile rows themselves are dropped: at 16 × 256 × 256 blocks they weigh megabytes),
and adds ``segment_stats`` and ``lint_design``. ``design_digest`` names exactly what the analysis
depends on (every block, not a sample), so caches key on it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from designer.design import Design
from designer.lints import Lint, lint_design
from designer.segment import sdd_segment
from designer.segment_stats import SegmentStats, segment_stats
from designer.ui.pictures import tile_maps

#: Head dimension the FLOP counts assume (they scale linearly with it).
HEAD_DIM = 128


@dataclass(frozen=True)
class Analysis:
    """A design's segmentation as per-block maps ``[H, M, N]``, its statistics and lints."""

    widths: np.ndarray  # uint16: width of each block's tile, 0 where inactive
    odd: np.ndarray  # bool: the block's tile is an odd one of its width (drawn darker)
    stats: SegmentStats
    lints: tuple[Lint, ...]


def design_digest(design: Design) -> str:
    """A digest of all the analysis depends on: blocks, block size, start width, causal flag."""
    layout = design.layout
    digest = hashlib.blake2b(digest_size=16)
    settings = (layout.shape, layout.block_size, design.effective_start_width, design.causal)
    digest.update(repr(settings).encode())
    digest.update(layout.to_numpy().tobytes())
    return digest.hexdigest()


def analyse(design: Design) -> Analysis:
    """Segment ``design`` at its start width and gather what the views show about it.

    >>> analysis = analyse(Design(Layout(torch.ones(1, 4, 4, dtype=torch.bool), 64)))
    >>> [(row.width, row.tiles) for row in analysis.stats.widths]
    [(2, 4)]
    """
    layout = design.layout
    segments = sdd_segment(layout, design.effective_start_width)
    widths, odd = tile_maps(layout.shape, segments)
    stats = segment_stats(layout, segments, head_dim=HEAD_DIM)
    return Analysis(widths, odd, stats, tuple(lint_design(design)))
