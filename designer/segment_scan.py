"""The compiled scan behind ``designer.segment.sdd_segment`` (numba, one head at a time).

For each width ``w`` of the chain, one greedy row-major scan over the head's remaining blocks
runs the "largest square" DP on compressed coordinates (previous visited row of the column,
previous visited column of the scan) and extracts every group that reaches ``w``::

    for (m, n) remaining, row-major:
        pl, pt = newest visited column, newest row column n was visited at
        width = 1 + min(best[pt, n], best[m, pl], best[pt, pl])
        width = 1 if a column strictly between pl and n was visited after row pt   # gap rule
        best[m, n] = width; push n into recent_cols, m into recent_rows[n]
        if width == w: emit recent_rows[n] x recent_cols row-major, zero them in layout and best

Rings are circular buffers (slot ``next`` is the oldest entry), the scan walks a per-row list of
present columns (so a sparse head costs its blocks, not its area), and every function releases
the GIL so heads can run on several threads.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def segment_heads(
    present, heads, widths, safe, row_offsets, rows, counts, repeats
):  # pragma: no cover (numba)
    """Segment ``present[h]`` for each ``h`` in ``heads`` (numba; see ``segment_head``).

    Head ``h`` writes into ``rows[row_offsets[h]:row_offsets[h + 1]]``, ``counts[h]`` and
    ``repeats[h]``.
    """
    for h in heads:
        head_rows = rows[row_offsets[h] : row_offsets[h + 1]]
        segment_head(present[h], widths, safe, head_rows, counts[h], repeats[h])


@njit(cache=True, nogil=True)
def segment_head(present, widths, safe, rows, counts, repeats):  # pragma: no cover (numba)
    """All passes over one ``[M, N]`` uint8 head, in the order of ``widths`` (decreasing).

    Writes ``(row, col, rank)`` rows while they fit in ``rows`` (int32 ``[capacity, 3]``, or
    ``[capacity, 2]`` for ``(row, col)`` alone, which spares the rank map) and sets ``counts[p]``
    to the number of rows pass ``p`` emitted, fitting or not. ``rank`` is the block's rank in
    the head's row-major order, or -1 for an absent (phantom) cell. With
    ``safe`` a group with a cell that is absent or already extracted is refused, and its corner
    keeps the DP value ``w - 1``; without it, each emission of such a cell adds 1 to its entry
    of ``repeats`` (``[M, N]``, zeros on entry).
    """
    n_rows, n_cols = present.shape
    row_start = np.zeros(n_rows + 1, dtype=np.int64)
    # Scratch sized by what is asked: the present blocks' columns, and their ranks only when
    # rows with ranks are written (a scan for repeats alone writes none).
    cols = np.empty(np.count_nonzero(present) + 1, dtype=np.int32)
    ranked = rows.shape[0] > 0 and rows.shape[1] > 2
    rank = np.empty((n_rows, n_cols) if ranked else (1, 1), dtype=np.int32)
    nnz = 0
    for m in range(n_rows):
        for n in range(n_cols):  # branch-free: random layouts defeat the branch predictor
            is_present = present[m, n] != 0
            cols[nnz] = n
            if ranked:
                rank[m, n] = nnz if is_present else -1
            nnz += is_present
        row_start[m + 1] = nnz
    remaining = present.copy()  # 1 where a block is present and not yet extracted
    # The DP, shifted by one row and column so that index -1 (no previous row or column) lands
    # on a border of zeros: ``best[r + 1, c + 1]`` is the widest square ending at ``(r, c)``,
    # at most the pass's width, itself at most min(M, N) (8,192 at the layout cell limit).
    best = np.empty((n_rows + 1, n_cols + 1), dtype=np.uint16)
    ring_rows = np.empty(n_cols * widths[0], dtype=np.int32)
    # Until a pass extracts a group its DP does not depend on w, so after a pass that extracted
    # nothing, a narrower pass can only extract if it is no wider than the widest DP value seen.
    reachable = n_rows
    count = np.int64(0)  # a literal 0 would compile each pass twice (Literal[int](0), int64)
    for p in range(widths.size):
        w = widths[p]
        before = count
        if w == 1:  # each visit extracts its own block at once, so the DP never leaves 0
            count = _emit_singles(row_start, cols, remaining, rows, count)
        elif w <= reachable:
            best[:] = 0
            recent_rows = ring_rows[: n_cols * w].reshape(n_cols, w)
            count, widest = _scan_pass(
                row_start, cols, remaining, rank, w, safe, best, recent_rows, rows, count, repeats
            )
            if count == before:
                reachable = widest
        counts[p] = count - before


@njit(cache=True, nogil=True)
def _scan_pass(
    row_start, cols, remaining, rank, w, safe, best, recent_rows, rows, count, repeats
):  # pragma: no cover (numba)
    """One pass of width ``w >= 2``; returns the new row count and the widest DP value seen.

    ``best`` (the DP, shifted by one) must be all 0; ``recent_rows`` is scratch.
    """
    n_cols = remaining.shape[1]
    recent_cols = np.full(w, -1, dtype=np.int32)
    recent_rows[:] = -1
    next_col_slot = 0
    next_row_slot = np.zeros(n_cols, dtype=np.int32)
    newest_row = np.full(n_cols, -1, dtype=np.int32)  # the newest entry of each recent_rows
    pl = -1  # the newest entry of recent_cols
    group_rows = np.empty(w, dtype=np.int32)
    group_cols = np.empty(w, dtype=np.int32)
    widest = 0
    for m in range(row_start.size - 1):
        for k in range(row_start[m], row_start[m + 1]):
            n = cols[k]
            if remaining[m, n] == 0:
                continue
            pt = newest_row[n]
            width = 1 + min(best[pt + 1, n + 1], best[m + 1, pl + 1], best[pt + 1, pl + 1])
            for c in range(pl + 1, n):  # gap rule
                if newest_row[c] > pt:
                    width = 1
                    break
            best[m + 1, n + 1] = width
            widest = max(widest, width)
            recent_cols[next_col_slot] = n
            next_col_slot = next_col_slot + 1 if next_col_slot + 1 < w else 0
            pl = n
            slot = next_row_slot[n]
            recent_rows[n, slot] = m
            next_row_slot[n] = slot + 1 if slot + 1 < w else 0
            newest_row[n] = m
            if width != w:
                continue
            row_slot, col_slot = next_row_slot[n], next_col_slot
            for i in range(w):  # unroll both rings, oldest first
                group_rows[i] = recent_rows[n, row_slot]
                group_cols[i] = recent_cols[col_slot]
                row_slot = row_slot + 1 if row_slot + 1 < w else 0
                col_slot = col_slot + 1 if col_slot + 1 < w else 0
            if safe and not _all_remaining(remaining, group_rows, group_cols):
                best[m + 1, n + 1] = w - 1
                continue
            for r in group_rows:
                for c in group_cols:
                    if r < 0 or c < 0:
                        continue
                    if remaining[r, c] == 0:  # a phantom or a duplicate
                        repeats[r, c] += 1
                    remaining[r, c] = 0
                    best[r + 1, c + 1] = 0
                    if count < rows.shape[0]:
                        rows[count, 0] = r
                        rows[count, 1] = c
                        if rows.shape[1] > 2:
                            rows[count, 2] = rank[r, c]
                    count += 1
    return count, widest


@njit(cache=True, nogil=True)
def _all_remaining(remaining, group_rows, group_cols):  # pragma: no cover (numba)
    """Whether every cell of the group is present and not yet extracted."""
    for r in group_rows:
        for c in group_cols:
            if r < 0 or c < 0 or remaining[r, c] == 0:
                return False
    return True


@njit(cache=True, nogil=True)
def _emit_singles(row_start, cols, remaining, rows, count):  # pragma: no cover (numba)
    """The width-1 pass: every remaining block, row-major; returns the new row count."""
    for m in range(row_start.size - 1):
        for k in range(row_start[m], row_start[m + 1]):
            n = cols[k]
            if remaining[m, n]:
                remaining[m, n] = 0
                if count < rows.shape[0]:
                    rows[count, 0] = m
                    rows[count, 1] = n
                    if rows.shape[1] > 2:
                        rows[count, 2] = k
                count += 1
    return count


@njit(cache=True, nogil=True)
def gather_width(rows, row_offsets, counts, first_idx, p, out):  # pragma: no cover (numba)
    """Pass ``p`` of every head, in head order, as int64 ``(head, row, col, orig_idx)`` rows.

    ``orig_idx`` is ``first_idx[h]`` plus the block's rank in its head, or 0 for a phantom cell
    (DeepSpeed's index table holds 0 there).
    """
    k = 0
    for h in range(counts.shape[0]):
        first = row_offsets[h]
        for q in range(p):
            first += counts[h, q]
        for i in range(first, first + counts[h, p]):
            out[k, 0] = h
            out[k, 1] = rows[i, 0]
            out[k, 2] = rows[i, 1]
            out[k, 3] = first_idx[h] + rows[i, 2] if rows[i, 2] >= 0 else 0
            k += 1
