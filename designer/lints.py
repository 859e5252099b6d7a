"""Checks that tell a person designing attention what in their layout may surprise them.

``lint_design(design)`` returns ``Lint`` findings, errors first: query rows that attend to
nothing, blocks above the diagonal of a causal design, heads that share one layout, a start width
that makes no tiles, the layouts DeepSpeed's own segmentation gets wrong (phantom or duplicate
blocks, or no tiles at all), blocks so scattered that our fused kernel's tiles compute mostly
inactive scores, and the scores partial blocks compute only to mask away.
Each finding names the heads and a few example blocks, so a view can point at them.
A layout held as row runs is checked on its runs (``lints_runs``), in time that follows them.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from designer.cache import LruCache, head_keys
from designer.design import Design
from designer.layout import Layout
from designer.lints_runs import above_diagonal, visited_squares
from designer.segment_stats import DeepSpeedDefects, deepspeed_defects, deepspeed_start_width
from designer.validate import MAX_LAYOUT_CELLS

SEVERITIES = ("error", "warning", "info")

#: Example blocks (or rows) a finding carries: enough to point at, few enough to read.
MAX_EXAMPLES = 5
#: Query x key tokens of the smallest tiles our fused kernel computes on Hopper (its 64-row
#: build, which a plan takes for scattered layouts; gpu/forward/builds.py, HOPPER_BUILDS).
FUSED_TILE = 64
#: Share of a visited tile's blocks that must be active before the tile waste is reported.
TILE_FILL_FLOOR = 0.5
#: Cells the cached per-head DeepSpeed findings may hold in all.
DEFECT_CACHE_CELLS = 1 << 22

_DEFECTS = LruCache(
    DEFECT_CACHE_CELLS,
    size=lambda d: 1 + len(d.phantom_cells) + len(d.duplicate_cells),
    ttl_seconds=15 * 60,
)


@dataclass(frozen=True)
class Lint:
    """One finding about a design.

    ``code`` is stable (for tests and filters), ``severity`` one of ``SEVERITIES``, ``message``
    a sentence for the user. ``heads`` lists the heads concerned; ``cells`` a few example
    ``(head, row, col)`` blocks and ``rows`` a few example ``(head, row)`` query rows.
    """

    code: str
    severity: str
    message: str
    heads: tuple[int, ...]
    cells: tuple[tuple[int, int, int], ...] = ()
    rows: tuple[tuple[int, int], ...] = ()


#: Heads of at most this many cells are scanned for DeepSpeed's defects in parallel.
PARALLEL_SCAN_CELLS = 1 << 22


def lint_design(design: Design) -> list[Lint]:
    """Every finding about ``design``, errors first, then warnings, then information.

    >>> layout = Layout(torch.tensor([[[1, 1], [0, 0]]]), 64)
    >>> [lint.code for lint in lint_design(Design(layout, causal=True))]
    ['causal-violation', 'empty-query-rows']
    """
    if not isinstance(design, Design):
        raise TypeError(f"design must be a Design, got {type(design).__name__}")
    layout = design.layout
    lints = [*_empty_query_rows(layout), *_identical_heads(layout)]
    if design.causal:
        lints += _causal_violations(layout)
    lints += _no_tiles(layout, design.effective_start_width)
    lints += _deepspeed_segmentation(layout, design.effective_start_width)
    lints += _scattered_for_fused_tiles(layout)
    lints += _partial_blocks(layout)
    return sorted(lints, key=lambda lint: SEVERITIES.index(lint.severity))


def _empty_query_rows(layout: Layout) -> list[Lint]:
    if layout.runs is not None:
        empty = np.argwhere(layout.row_counts() == 0)  # (head, row) pairs
    else:
        empty = np.argwhere(~layout.to_numpy().any(axis=2))
    if not empty.size:
        return []
    heads = _unique_heads(empty)
    b = layout.block_size
    return [
        Lint(
            code="empty-query-rows",
            severity="warning",
            message=(
                f"{_count(len(empty), 'query block row')} in {_heads_text(heads)} "
                f"{'has' if len(empty) == 1 else 'have'} no active key block: those "
                f"{len(empty) * b:,} queries attend to nothing and output zeros. Give every row "
                "at least one block (its diagonal block or a sink), unless these queries are "
                "padding."
            ),
            heads=heads,
            rows=_examples(empty),
        )
    ]


def _causal_violations(layout: Layout) -> list[Lint]:
    if layout.runs is not None:
        per_head, found = above_diagonal(layout.runs, MAX_EXAMPLES)
        if not int(per_head.sum()):
            return []
        examples = [found]
    else:
        above = torch.triu(layout.blocks, diagonal=1)  # one pass in C; most causal designs pass
        if not above.any():
            return []
        per_head = torch.tensor([torch.count_nonzero(head) for head in above])
        examples = []
        for head in torch.nonzero(per_head).flatten().tolist():  # first cells, (head, row, col)
            cells = np.argwhere(above[head].numpy())[:MAX_EXAMPLES]
            examples.append(np.column_stack([np.full(len(cells), head), cells]))
            if sum(map(len, examples)) >= MAX_EXAMPLES:
                break
    heads = tuple(torch.nonzero(per_head).flatten().tolist())
    n_cells = int(per_head.sum())
    return [
        Lint(
            code="causal-violation",
            severity="error",
            message=(
                f"The design is causal, but {_heads_text(heads)} "
                f"{'has' if len(heads) == 1 else 'have'} {_count(n_cells, 'block')} above "
                "the diagonal, where every key comes after every query. A causal kernel masks "
                "them out entirely, so they only cost time, and a library that reads the layout "
                "alone would let queries see later tokens. Clip the layout to causal, or clear "
                "the causal flag if these blocks are meant."
            ),
            heads=heads,
            cells=_examples(np.concatenate(examples)),
        )
    ]


#: Share of computed scores masked away inside partial blocks past which it is a warning.
MASKED_WARNING = 0.25


def _partial_blocks(layout: Layout) -> list[Lint]:
    """How many blocks are partial and what their masks cost: their tiles are computed whole."""
    if layout.partials is None:
        return []
    stats = layout.token_stats()
    index = layout.partials.index
    heads = tuple(sorted(set(index[:, 0].tolist())))
    severity = "warning" if stats.masked_fraction > MASKED_WARNING else "info"
    active = stats.partial_blocks + stats.full_blocks
    return [
        Lint(
            code="partial-blocks",
            severity=severity,
            message=(
                f"{_count(stats.partial_blocks, 'block')} of {active:,} "
                f"active {'is' if stats.partial_blocks == 1 else 'are'} partial (a token mask "
                f"inside the block) in {_heads_text(heads)}: the kernel computes them whole, so "
                f"{stats.masked_fraction:.1%} of the scores computed are masked away. Smaller "
                "blocks follow the mask more closely."
            ),
            heads=heads,
            cells=tuple(tuple(cell) for cell in index[:MAX_EXAMPLES].tolist()),
        )
    ]


def _identical_heads(layout: Layout) -> list[Lint]:
    if layout.n_heads < 2:
        return []
    groups: dict[bytes, list[int]] = {}
    if layout.runs is not None:
        signatures = layout.runs.head_signatures()
    else:
        blocks = layout.to_numpy()
        signatures = [np.packbits(blocks[h]).tobytes() for h in range(layout.n_heads)]
    for h, signature in enumerate(signatures):
        groups.setdefault(signature, []).append(h)
    lints = []
    for heads in (tuple(group) for group in groups.values() if len(group) > 1):
        every = len(heads) == layout.n_heads
        lints.append(
            Lint(
                code="identical-heads",
                severity="info",
                message=(
                    f"{f'All {len(heads)} heads' if every else _heads_text(heads).capitalize()} "
                    "share one layout, so together they see no more of the sequence than one "
                    "head does. Fine if intended (one pattern for every head); otherwise give "
                    "them different patterns, offsets or seeds."
                ),
                heads=heads,
            )
        )
    return lints


def _no_tiles(layout: Layout, start_width: int) -> list[Lint]:
    if start_width:
        return []
    return [
        Lint(
            code="no-tiles",
            severity="warning",
            message=(
                "This design's segmentation start width is 0, so the segmentation makes no "
                "tiles and an SDD pipeline computes no block at all. Use 1 or more (leave it "
                "unset for 128-token tiles)."
            ),
            heads=tuple(range(layout.n_heads)),
        )
    ]


def _scattered_for_fused_tiles(layout: Layout) -> list[Lint]:
    """Our fused kernel computes whole ``FUSED_TILE``-token squares: blocks smaller than that,
    scattered so that the squares they touch are mostly inactive, cost the whole squares."""
    per_side = FUSED_TILE // layout.block_size
    if per_side <= 1:
        return []
    if layout.runs is not None:
        visited = visited_squares(layout.runs, per_side) * per_side**2
        active = layout.runs.head_counts()
    else:
        blocks = layout.to_numpy()
        # Each square's blocks or'ed together, rows then columns (a last, partial square
        # included): no padded copy of the layout, a quarter of it at most.
        rows = np.maximum.reduceat(blocks, np.arange(0, layout.n_q_blocks, per_side), axis=1)
        squares = np.maximum.reduceat(rows, np.arange(0, layout.n_k_blocks, per_side), axis=2)
        del rows
        visited = torch.from_numpy(np.count_nonzero(squares, axis=(1, 2)) * per_side**2)
        active = torch.from_numpy(np.count_nonzero(blocks, axis=(1, 2)))  # blocks, per head
    if not int(active.sum()):
        return []
    fill = float(active.sum()) / int(visited.sum())
    if fill >= TILE_FILL_FLOOR:
        return []
    low = active < TILE_FILL_FLOOR * visited
    heads = tuple(torch.nonzero(low).flatten().tolist())
    return [
        Lint(
            code="scattered-for-fused-tiles",
            severity="info",
            message=(
                f"Our fused kernel computes tiles of at least {FUSED_TILE} x {FUSED_TILE} tokens "
                f"on Hopper, and this design's active blocks fill {fill:.0%} of the tiles they "
                "touch "
                f"(under {TILE_FILL_FLOOR:.0%} in {_heads_text(heads)}): it computes "
                f"{1 / fill:.1f}x the scores the layout needs. Blocks that group into aligned "
                f"{FUSED_TILE}-token squares cost nothing extra."
            ),
            heads=heads,
        )
    ]


def _deepspeed_segmentation(layout: Layout, design_width: int) -> list[Lint]:
    b = layout.block_size
    default_width = deepspeed_start_width(b)
    if default_width == 0:
        return [
            Lint(
                code="deepspeed-no-tiles",
                severity="warning",
                message=(
                    f"At block size {b}, DeepSpeed's default segmentation start width "
                    f"(128 // {b}) is 0: its segmentation returns no tiles, so its SDD kernel "
                    "computes no block at all. With DeepSpeed, pass a start width of 1 or more, "
                    "or use blocks of at most 128 tokens."
                ),
                heads=tuple(range(layout.n_heads)),
            ),
            *_deepspeed_defect_lints(layout, design_width, "this design's start width"),
        ]
    if design_width == default_width:
        where = f"DeepSpeed's default for block size {b}, and this design's"
        return _deepspeed_defect_lints(layout, default_width, where)
    return [
        *_deepspeed_defect_lints(layout, default_width, f"DeepSpeed's default for block size {b}"),
        *_deepspeed_defect_lints(layout, design_width, "this design's start width"),
    ]


def _deepspeed_defect_lints(layout: Layout, start_width: int, where: str) -> list[Lint]:
    """Phantom and duplicate findings for DeepSpeed's segmentation at ``start_width``."""
    if start_width < 3:  # widths 2 and 1 are exact (SDD_SEGMENT.md)
        return []
    if layout.runs is not None and layout.n_q_blocks * layout.n_k_blocks > MAX_LAYOUT_CELLS:
        return [_deepspeed_unchecked(layout, start_width, where)]
    defects = _layout_defects(layout, start_width)
    at = f"DeepSpeed's segmentation at start width {start_width} ({where})"
    lints = []
    if defects.phantom_rows:
        heads = _unique_heads(np.array(defects.phantom_cells))
        lints.append(
            Lint(
                code="deepspeed-phantom-blocks",
                severity="warning",
                message=(
                    f"{at} puts {_count(defects.phantom_rows, 'absent block')} of "
                    f"{_heads_text(heads)} into its tiles: DeepSpeed's SDD kernel computes them "
                    "and writes them over packed block 0, corrupting its scores. Our kernels "
                    "segment safely and are not affected. With DeepSpeed, use start width 2."
                ),
                heads=heads,
                cells=defects.phantom_cells[:MAX_EXAMPLES],
            )
        )
    if defects.duplicate_rows:
        heads = _unique_heads(np.array(defects.duplicate_cells))
        lints.append(
            Lint(
                code="deepspeed-duplicate-blocks",
                severity="warning",
                message=(
                    f"{at} emits {_count(len(defects.duplicate_cells), 'block')} of "
                    f"{_heads_text(heads)} more than once ({defects.duplicate_rows:,} extra "
                    "copies): DeepSpeed computes them again and sizes its score tensor for every "
                    "copy, leaving blocks at its end that are never written. Our kernels segment "
                    "safely and are not affected. With DeepSpeed, use start width 2."
                ),
                heads=heads,
                cells=defects.duplicate_cells[:MAX_EXAMPLES],
            )
        )
    return lints


def _deepspeed_unchecked(layout: Layout, start_width: int, where: str) -> Lint:
    """A head too large to scan for DeepSpeed's defects, said so rather than passed."""
    m, n = layout.n_q_blocks, layout.n_k_blocks
    return Lint(
        code="deepspeed-unchecked",
        severity="info",
        message=(
            f"DeepSpeed's segmentation at start width {start_width} ({where}) was not checked "
            f"for phantom or duplicate blocks: a head of {m:,} x {n:,} blocks is past the "
            f"{MAX_LAYOUT_CELLS:,} cells its scan takes. Our kernels segment safely; with "
            "DeepSpeed, use start width 2, where its segmentation is exact."
        ),
        heads=tuple(range(layout.n_heads)),
    )


def _layout_defects(layout: Layout, start_width: int) -> DeepSpeedDefects:
    """``deepspeed_defects`` of the layout, worked out head by head (heads scan independently)
    and cached by each head's content, so an edit re-scans only the heads it changed."""
    keys = [(key, start_width) for key in head_keys(layout)]
    first_of = {key: h for h, key in reversed(list(enumerate(keys)))}  # equal heads scan once
    missing = [h for key, h in first_of.items() if _DEFECTS.peek(key) is None]

    def scan(h: int) -> DeepSpeedDefects:
        if layout.runs is not None:  # one head at a time, as its dense grid
            return deepspeed_defects(
                Layout(layout.runs.select_heads([h]).to_dense(), 1), start_width
            )
        return deepspeed_defects(Layout(layout.blocks[h : h + 1], 1), start_width)

    # Heads in parallel while their scratch is small (a scan takes about 20 bytes a cell)
    parallel = layout.n_q_blocks * layout.n_k_blocks <= PARALLEL_SCAN_CELLS
    workers = max(1, min(len(missing), os.cpu_count() or 1)) if parallel else 1
    with ThreadPoolExecutor(workers) as pool:
        for h, found in zip(missing, pool.map(scan, missing), strict=True):  # scans drop the GIL
            _DEFECTS.put(keys[h], found)
    per_head = [_DEFECTS.peek(key) or scan(first_of[key]) for key in keys]

    def cells(name: str) -> tuple[tuple[int, int, int], ...]:
        return tuple(
            (h, row, col) for h, d in enumerate(per_head) for _, row, col in getattr(d, name)
        )

    return DeepSpeedDefects(
        start_width=start_width,
        phantom_rows=sum(d.phantom_rows for d in per_head),
        duplicate_rows=sum(d.duplicate_rows for d in per_head),
        phantom_cells=cells("phantom_cells"),
        duplicate_cells=cells("duplicate_cells"),
    )


def _unique_heads(found: np.ndarray) -> tuple[int, ...]:
    return tuple(np.unique(found[:, 0]).tolist())


def _examples(found: np.ndarray) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(item) for item in found[:MAX_EXAMPLES].tolist())


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _heads_text(heads: tuple[int, ...]) -> str:
    """``head 3``, ``heads 0, 1 and 5``, or ``heads 0, 1, 2, … (12 heads)`` when long."""
    if len(heads) == 1:
        return f"head {heads[0]}"
    if len(heads) > 6:
        return f"heads {', '.join(map(str, heads[:4]))}, … ({len(heads)} heads)"
    return f"heads {', '.join(map(str, heads[:-1]))} and {heads[-1]}"
