"""Segmentation of a block layout into the square tiles an SDD (QKᵀ) kernel launches.

``sdd_segment`` is DeepSpeed's ``sdd_segment`` (``csrc/sparse_attention/utils.cpp``, Triton 1.0's
``superblock``), specified in ``SDD_SEGMENT.md``: for each width of the halving chain
``start_width, start_width // 2, ..., 1``, a greedy row-major scan per head extracts square
groups of that width (the scan itself is in ``designer.segment_scan``). For widths >= 3
DeepSpeed's groups can contain absent cells (phantoms, ``orig_idx`` 0) and cells it emitted
before (duplicates): ``mode="deepspeed"`` reproduces them, ``mode="safe"`` refuses such groups.

Heads run on a small thread pool (the compiled scan releases the GIL) and are gathered in
ascending head order, so results never depend on timing. Numba's ``parallel=True`` is avoided on
purpose: its fallback threading layer aborts when two app sessions call it at once. The pool's
threads run at a lower priority (``SCAN_NICENESS``): alone they have every core, but beside
them another session's rerun gets a core at once instead of waiting for a large layout's scan.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from designer.layout import Layout
from designer.segment_scan import gather_width, segment_heads
from designer.threads import lower_priority
from designer.validate import MAX_LAYOUT_CELLS, as_block_tensor, check_choice, check_int

MODES = ("safe", "deepspeed")

#: Room for DeepSpeed mode's phantom and duplicate rows, as a fraction of a head's blocks (they
#: stay far below it on random layouts); a head that needs more is segmented again.
_DEEPSPEED_SPARE_ROWS = 0.25

#: Below this many cells a layout is segmented on the calling thread (threads cost more).
_THREADED_MIN_CELLS = 1 << 16
#: The scan threads' niceness (Linux): 10 gives a thread at the default 0 about ten times the
#: CPU share of a scan thread when both want a core.
SCAN_NICENESS = 10

Segments = list[tuple[int, torch.Tensor]]


def sdd_segment(layout: Any, start_width: int, *, mode: str = "safe") -> Segments:
    """Group the present blocks of each head into square tiles, widest first.

    Args:
        layout: ``[H, M, N]`` torch tensor or numpy array of any integer or bool dtype (non-zero
            means present, negative values are refused), or a ``Layout``. Never modified.
        start_width: widest tile, in blocks; the widths tried are ``start_width,
            start_width // 2, ..., 1``; ``0`` gives ``[]``. Widths above ``min(M, N)`` cannot
            hold a group and are skipped, so a huge value costs nothing.
        mode: ``"deepspeed"`` reproduces DeepSpeed's output bit for bit, phantom (absent,
            ``orig_idx`` 0) and duplicate blocks included. ``"safe"`` follows the same scan but,
            when a group reaches width ``w``, first checks that all ``w²`` cells are present and
            not yet extracted; if one is not, it refuses the group (its blocks stay for smaller
            widths) and stores ``w - 1`` as the corner's DP value, so neighbouring squares can
            still reach ``w``. Where DeepSpeed emits no phantom or duplicate, no group is refused
            and both modes agree; otherwise every present block is emitted exactly once.

    Returns:
        ``[(width, rows), ...]`` with widths strictly decreasing and empty widths left out;
        ``rows`` is an int64 ``[k * width², 4]`` tensor of ``(head, row, col, orig_idx)``,
        ``k`` groups one after the other (ascending head, then the order the scan reached each
        group's bottom-right corner, row-major inside a group). ``orig_idx`` is the block's rank
        in ``layout.nonzero()`` order, its index in a packed ``[B, nnz, block, block]`` tensor.

    >>> [(w, rows.shape) for w, rows in sdd_segment(torch.ones(1, 3, 3, dtype=torch.int32), 2)]
    [(2, torch.Size([4, 4])), (1, torch.Size([5, 4]))]
    """
    present = _present_blocks(layout)
    start_width = check_int("start_width", start_width, low=0)
    safe = check_choice("mode", mode, MODES) == "safe"
    n_heads, n_rows, n_cols = present.shape
    widths = width_chain(start_width, min(n_rows, n_cols))
    if not widths.size or not present.any():
        return []
    per_head = present.reshape(n_heads, -1).sum(axis=1, dtype=np.int64)

    def scan(capacity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _segment_heads(present, widths, safe, capacity)[:2]

    return segments_from_scan(per_head, widths, safe, scan)


def segments_from_scan(
    per_head: np.ndarray,
    widths: np.ndarray,
    safe: bool,
    scan: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
) -> Segments:
    """``sdd_segment``'s result from a scan: ``scan(capacity)`` gives the ``(rows, counts)``
    of ``_segment_heads`` for heads holding ``per_head`` active blocks. DeepSpeed mode may emit
    more rows than blocks: it gets room for some and is scanned again if a head needs more."""
    first_idx = np.concatenate(([0], np.cumsum(per_head)[:-1]))
    spare = 0 if safe else np.ceil(per_head * _DEEPSPEED_SPARE_ROWS).astype(np.int64)
    capacity = per_head + spare
    rows, counts = scan(capacity)
    if (counts.sum(axis=1) > capacity).any():
        capacity = counts.sum(axis=1)
        rows, counts = scan(capacity)
    row_offsets = np.concatenate(([0], np.cumsum(capacity)))
    segments = []
    for p, width in enumerate(widths.tolist()):
        if counts[:, p].any():
            out = np.empty((int(counts[:, p].sum()), 4), dtype=np.int64)
            gather_width(rows, row_offsets, counts, first_idx, p, out)
            segments.append((width, torch.from_numpy(out)))
    return segments


def scan_head(blocks: np.ndarray, start_width: int) -> list[tuple[int, np.ndarray]]:
    """``sdd_segment`` of one ``[M, N]`` head as compact rows: ``[(width, int32 [k * width², 2]
    (row, col))]``, the same groups in the same order, without the int64 ``(head, row, col,
    orig_idx)`` copy or the scan's rank map (for views that only draw the tiles)."""
    present = _present_blocks(np.asarray(blocks)[None])
    widths = width_chain(check_int("start_width", start_width, low=0), min(present.shape[1:]))
    if not widths.size or not present.any():
        return []
    capacity = np.array([np.count_nonzero(present)], dtype=np.int64)
    rows, counts, _ = _segment_heads(present, widths, True, capacity, ranked=False)
    bounds = np.concatenate(([0], np.cumsum(counts[0])))
    return [
        (int(width), rows[bounds[p] : bounds[p + 1]])
        for p, width in enumerate(widths.tolist())
        if counts[0, p]
    ]


def deepspeed_repeats(layout: Any, start_width: int) -> np.ndarray:
    """How often DeepSpeed's segmentation emits each block beyond what the layout asks for.

    An int32 ``[H, M, N]`` array: for an absent block, the number of times it is emitted as a
    phantom; for a present one, the number of copies after its first. All zeros means
    ``sdd_segment(layout, start_width, mode="deepspeed")`` emits every block exactly once (or,
    at ``start_width`` 0, none). Arguments as for ``sdd_segment``; no rows are built.
    """
    present = _present_blocks(layout)
    start_width = check_int("start_width", start_width, low=0)
    widths = width_chain(start_width, min(present.shape[1:]))
    if not widths.size or not present.any():
        return np.zeros(present.shape, dtype=np.int32)
    no_rows = np.zeros(present.shape[0], dtype=np.int64)
    return _segment_heads(present, widths, False, no_rows)[2]


def _present_blocks(layout: Any) -> np.ndarray:
    """A C-contiguous uint8 ``[H, M, N]`` copy of the layout: 1 where a block is present.

    Works in numpy only: torch's intra-op threads keep spinning after an operation and would
    compete with the segmentation threads that follow.
    """
    if isinstance(layout, Layout):
        return layout.to_numpy().copy()  # writable: numba compiles read-only arrays apart
    array = _integer_array(layout)
    if array is None or array.ndim != 3 or array.size > MAX_LAYOUT_CELLS:
        as_block_tensor("layout", layout)  # raises the shared message for this type, rank or size
    if array.size and array.min() < 0:
        raise ValueError(f"layout must not hold negative values, got minimum {int(array.min())}")
    return np.ascontiguousarray(array != 0).view(np.uint8)


def _integer_array(layout: Any) -> np.ndarray | None:
    """``layout`` as a numpy array if it is an integer or bool tensor or array, else None."""
    if isinstance(layout, torch.Tensor) and not (layout.is_floating_point() or layout.is_complex()):
        return layout.detach().cpu().numpy()
    if isinstance(layout, np.ndarray) and layout.dtype.kind in "biu":
        return layout
    return None


def width_chain(start_width: int, max_width: int) -> np.ndarray:
    """The halving chain from ``start_width``, without the widths above ``max_width``."""
    widths = []
    while start_width > 0:
        if start_width <= max_width:
            widths.append(start_width)
        start_width //= 2
    return np.array(widths, dtype=np.int64)


def _segment_heads(
    present: np.ndarray,
    widths: np.ndarray,
    safe: bool,
    capacity: np.ndarray,
    *,
    ranked: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run the scan over every head and return ``(rows, counts, repeats)``.

    ``rows`` holds head ``h``'s ``(row, col, rank in head)`` rows (``(row, col)`` unless
    ``ranked``: the scan then keeps no rank map) in a slot of ``capacity[h]``,
    ``counts[h, p]`` is how many rows pass ``p`` of head ``h`` emitted, and ``repeats`` is as in
    ``deepspeed_repeats``. Heads are shared out round-robin between the usable CPUs, each share
    on a scan thread (``SCAN_NICENESS``) while the calling thread waits; a small layout is
    scanned on the calling thread.
    """
    n_heads = present.shape[0]
    rows = np.empty((int(capacity.sum()), 3 if ranked else 2), dtype=np.int32)
    counts = np.zeros((n_heads, widths.size), dtype=np.int64)
    repeats = np.zeros(present.shape, dtype=np.int32)  # its pages are touched only if written
    row_offsets = np.concatenate(([0], np.cumsum(capacity)))

    def run(heads: np.ndarray) -> None:
        segment_heads(present, heads, widths, safe, row_offsets, rows, counts, repeats)

    on_scan_threads(n_heads, run, threaded=present.size >= _THREADED_MIN_CELLS)
    return rows, counts, repeats


def on_scan_threads(n_heads: int, run: Callable[[np.ndarray], None], *, threaded: bool) -> None:
    """Call ``run(heads)`` on every head: shared out round-robin between the usable CPUs, each
    share on a scan thread (``SCAN_NICENESS``) while the calling thread waits, or all on the
    calling thread when not ``threaded`` (threads cost more than a small layout's scan)."""
    if not threaded:
        run(np.arange(n_heads))
        return
    workers = min(n_heads, _usable_cpus())
    with ThreadPoolExecutor(workers, initializer=lower_priority, initargs=(SCAN_NICENESS,)) as pool:
        shares = [pool.submit(run, np.arange(first, n_heads, workers)) for first in range(workers)]
        for share in shares:
            share.result()


def _usable_cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
