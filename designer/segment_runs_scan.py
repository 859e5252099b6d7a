"""The compiled scan behind ``designer.segment_runs.sdd_segment_runs``: the scan of
``designer.segment_scan`` on row runs, in memory that grows with a head's active blocks.

The scan is the same greedy row-major "largest square" DP on compressed coordinates (see
``segment_scan``); only its state moves from ``[M, N]`` grids to one slot per active block
(its rank in the head, row-major) and a few ``[N]`` vectors:

- ``best`` and ``remaining`` live per block. A DP neighbour is always a block visited in this
  pass or 0: ``up`` is column ``n``'s newest visit, ``left`` the previous visit if it lies in
  row ``m``, and ``diag`` (row ``pt``, column ``pl``) is found by walking column ``pl``'s visits
  back from the previous one (a few steps), else by a binary search of row ``pt``'s runs.
- Column ``n``'s ring of its last ``w`` visit rows is a linked list: each visited block links
  to the column's visit before it, so the ring costs nothing per column and ``O(w)`` to read.
- The gap rule (a column strictly between ``pl`` and ``n`` visited after row ``pt``) asks a
  max segment tree over each column's newest visit row: ``O(log N)`` instead of the gap width
  (a sink column far left of a window would otherwise cost ``O(N)`` per row).

Every function releases the GIL so heads can run on several threads. The hot loop calls no
helper that takes arrays except on rare paths: each such call pays reference counts, which cost
more than the scan itself (122 against 26 ns a block, measured on 2 cores, 2026-12-01).
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: Steps along a column's visits before ``diag`` falls back to a binary search.
_DIAG_WALK = 8


@njit(cache=True, nogil=True)
def segment_run_heads(
    row_ptr, starts, stops, n_rows, n_cols, heads, widths, safe, row_offsets, rows, counts
):  # pragma: no cover (numba)
    """Segment head ``h`` for each ``h`` in ``heads``: its ``(row, col, rank in head)`` rows go
    to ``rows[row_offsets[h]:row_offsets[h + 1]]`` while they fit, and ``counts[h, p]`` is how
    many rows pass ``p`` emitted (fitting or not). ``rank`` is -1 for an absent (phantom) cell."""
    for h in heads:
        head_rows = rows[row_offsets[h] : row_offsets[h + 1]]
        first_run = row_ptr[h * n_rows]
        head_ptr = row_ptr[h * n_rows : (h + 1) * n_rows + 1] - first_run
        head_starts = starts[first_run : row_ptr[(h + 1) * n_rows]]
        head_stops = stops[first_run : row_ptr[(h + 1) * n_rows]]
        segment_run_head(
            head_ptr, head_starts, head_stops, n_cols, widths, safe, head_rows, counts[h]
        )


@njit(cache=True, nogil=True)
def segment_run_head(
    row_ptr, starts, stops, n_cols, widths, safe, rows, counts
):  # pragma: no cover (numba)
    """All passes over one head given by its own runs (``row_ptr`` from 0), widest first."""
    n_rows = row_ptr.size - 1
    run_rank = np.zeros(starts.size + 1, dtype=np.int64)  # rank of each run's first block
    for i in range(starts.size):
        run_rank[i + 1] = run_rank[i] + stops[i] - starts[i]
    nnz = run_rank[starts.size]
    block_row = np.empty(nnz, dtype=np.int32)
    block_col = np.empty(nnz, dtype=np.int32)
    for m in range(n_rows):
        for i in range(row_ptr[m], row_ptr[m + 1]):
            block_row[run_rank[i] : run_rank[i + 1]] = m
            block_col[run_rank[i] : run_rank[i + 1]] = np.arange(starts[i], stops[i])
    remaining = np.ones(nnz, dtype=np.uint8)
    best = np.zeros(nnz, dtype=np.int32)
    below = np.empty(nnz, dtype=np.int32)  # the column's visit before this block's (-1: none)
    tree_size = 1
    while tree_size < max(n_cols, 1):
        tree_size *= 2
    newest = np.empty(2 * tree_size, dtype=np.int32)  # max tree over each column's newest row
    newest_block = np.empty(n_cols, dtype=np.int32)  # the rank of each column's newest visit
    # Until a pass extracts a group its DP does not depend on w, so after a pass that extracted
    # nothing, a narrower pass can only extract if it is no wider than the widest DP value seen.
    reachable = n_rows
    count = np.int64(0)  # a literal 0 would compile each pass twice (Literal[int](0), int64)
    for p in range(widths.size):
        w = widths[p]
        before = count
        if w == 1:
            count = _emit_singles(row_ptr, starts, stops, run_rank, remaining, rows, count)
        elif w <= reachable:
            best[:] = 0
            newest[:] = -1
            newest_block[:] = -1
            scratch = (block_row, block_col, remaining, best, below, newest, newest_block)
            count, widest = _scan_pass(row_ptr, starts, stops, run_rank, scratch, w, safe, rows,
                                       count)  # fmt: skip
            if count == before:
                reachable = widest
        counts[p] = count - before


@njit(cache=True, nogil=True)
def _scan_pass(
    row_ptr, starts, stops, run_rank, scratch, w, safe, rows, count
):  # pragma: no cover (numba)
    """One pass of width ``w >= 2``; returns the new row count and the widest DP value seen."""
    block_row, block_col, remaining, best, below, newest, newest_block = scratch
    tree_size = newest.size // 2
    recent_cols = np.full(w, -1, dtype=np.int32)
    next_col_slot = 0
    group_rows = np.empty(w, dtype=np.int32)
    group_at = np.empty(w, dtype=np.int64)  # the rank of (group_rows[i], n): column n's visits
    group_cols = np.empty(w, dtype=np.int32)
    pl = -1  # the previous visit's column, rank and row
    prev = -1
    prev_row = -1
    widest = 0
    for m in range(row_ptr.size - 1):
        for i in range(row_ptr[m], row_ptr[m + 1]):
            for n in range(starts[i], stops[i]):
                k = run_rank[i] + n - starts[i]
                if remaining[k] == 0:
                    continue
                pt = newest[tree_size + n]
                up = best[newest_block[n]] if pt >= 0 else 0
                left = best[prev] if prev_row == m else 0
                diag = 0
                if pt >= 0 and pl >= 0 and min(up, left) > 0:
                    at = prev  # column pl's visits, newest first, down to row pt
                    for _ in range(_DIAG_WALK):
                        if at < 0 or block_row[at] <= pt:
                            break
                        at = below[at]
                    if at >= 0 and block_row[at] > pt:  # a long walk: search row pt instead
                        at = _rank_of(row_ptr, starts, stops, run_rank, pt, pl)
                    diag = best[at] if at >= 0 and block_row[at] == pt else 0
                width = 1 + min(up, left, diag)
                if width > 1 and pl + 1 < n and _tree_max(newest, tree_size, pl + 1, n) > pt:
                    width = 1  # gap rule
                best[k] = width
                widest = max(widest, width)
                recent_cols[next_col_slot] = n
                next_col_slot = next_col_slot + 1 if next_col_slot + 1 < w else 0
                pl, prev, prev_row = n, k, m
                below[k] = newest_block[n]
                newest_block[n] = k
                node = tree_size + n  # column n's newest row is m (rows only grow)
                newest[node] = m
                node //= 2
                while node >= 1 and newest[node] < m:
                    newest[node] = m
                    node //= 2
                if width != w:
                    continue
                at, slot = k, next_col_slot
                for j in range(w):  # both rings, oldest first
                    group_rows[w - 1 - j] = block_row[at] if at >= 0 else -1
                    group_at[w - 1 - j] = at
                    at = below[at] if at >= 0 else -1
                    group_cols[j] = recent_cols[slot]
                    slot = slot + 1 if slot + 1 < w else 0
                # Helpers taking arrays cost reference counts per call: the loops stay here.
                whole = not safe  # safe: refuse a group with a cell absent or extracted
                for t in range(w if safe else 0):
                    for c in group_cols:
                        found = group_at[t] - (n - c)  # inside one run the rank steps with c
                        if group_rows[t] < 0 or c < 0:
                            found = -1
                        elif not (
                            found >= 0 and block_row[found] == group_rows[t]
                            and block_col[found] == c
                        ):  # fmt: skip
                            found = _rank_of(row_ptr, starts, stops, run_rank, group_rows[t], c)
                        whole = found >= 0 and remaining[found] != 0
                        if not whole:
                            break
                    if not whole:
                        break
                if safe and not whole:
                    best[k] = w - 1
                    continue
                for t in range(w):
                    r = group_rows[t]
                    for c in group_cols:
                        if r < 0 or c < 0:
                            continue
                        found = group_at[t] - (n - c)
                        if not (found >= 0 and block_row[found] == r and block_col[found] == c):
                            found = _rank_of(row_ptr, starts, stops, run_rank, r, c)
                        if found >= 0:
                            remaining[found] = 0
                            best[found] = 0
                        if count < rows.shape[0]:
                            rows[count, 0] = r
                            rows[count, 1] = c
                            rows[count, 2] = found
                        count += 1
    return count, widest


@njit(cache=True, nogil=True, inline="always")
def _rank_of(row_ptr, starts, stops, run_rank, row, col):  # pragma: no cover (numba)
    """The rank of block ``(row, col)`` in its head, or -1 if it is not active."""
    lo, hi = row_ptr[row], row_ptr[row + 1]
    while lo < hi:  # the first run starting after col
        mid = (lo + hi) // 2
        if starts[mid] <= col:
            lo = mid + 1
        else:
            hi = mid
    i = lo - 1
    if i < row_ptr[row] or col >= stops[i]:
        return -1
    return run_rank[i] + col - starts[i]


@njit(cache=True, nogil=True, inline="always")
def _tree_max(tree, size, first, stop):  # pragma: no cover (numba)
    """The newest row over columns ``first <= c < stop`` (-1 if none was visited)."""
    found = -1
    lo, hi = first + size, stop + size
    while lo < hi:
        if lo & 1:
            found = max(found, tree[lo])
            lo += 1
        if hi & 1:
            hi -= 1
            found = max(found, tree[hi])
        lo //= 2
        hi //= 2
    return found


@njit(cache=True, nogil=True)
def _emit_singles(
    row_ptr, starts, stops, run_rank, remaining, rows, count
):  # pragma: no cover (numba)
    """The width-1 pass: every remaining block, row-major; returns the new row count."""
    for m in range(row_ptr.size - 1):
        for i in range(row_ptr[m], row_ptr[m + 1]):
            for n in range(starts[i], stops[i]):
                k = run_rank[i] + n - starts[i]
                if remaining[k]:
                    remaining[k] = 0
                    if count < rows.shape[0]:
                        rows[count, 0] = m
                        rows[count, 1] = n
                        rows[count, 2] = k
                    count += 1
    return count


@njit(cache=True, nogil=True)
def write_tile_codes(rows, counts, widths, first_rank, odd_flag, codes):  # pragma: no cover
    """Give each of one head's ``rows`` (in scan order: ``counts[p]`` rows of pass ``p``, in
    tiles of ``widths[p]²``) its tile code at ``codes[first_rank + rank]``: ``p + 1``, plus
    ``odd_flag`` for every other tile of a pass (``segment_runs.RunTileMaps``)."""
    at = 0
    for p in range(widths.size):
        area = widths[p] * widths[p]
        for k in range(counts[p]):
            code = p + 1
            if (k // area) & 1:
                code |= odd_flag
            codes[first_rank + rows[at, 2]] = code
            at += 1
