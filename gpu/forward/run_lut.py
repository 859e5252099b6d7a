"""The kernels' look-up tables built from a layout's row runs, without its ``[H, M, N]`` grid.

``build_fused_lut_runs`` and ``build_backward_lut_runs`` (``gpu.backward.lut``) return exactly
the tables ``build_fused_lut`` and ``build_backward_lut`` build from the dense layout (same
entries, flags, mask words, items and orders; ``gpu.forward.lut`` describes them), in time and
memory that follow the active blocks: a compiled walk over each query tile's block rows
visits every cell of every run once (``tile_entries``), so a 32-head design of 16,384² blocks
costs its blocks, never its 8.6 G cells. Runs are ``designer.run_arrays.RunArrays``.

Partial blocks (token masks, ``gpu.partials``) become token tiles as in the dense tables:
``token_entries`` finds the tiles the partial blocks touch among the entries by their keys
(``gpu.partials.run_token_tiles``), flags and numbers them, and drops those that let nothing
through, so the work follows the partial blocks too.

>>> from designer.run_arrays import RunArrays
>>> runs = RunArrays((1, 2, 2), np.array([0, 1, 2]), np.array([0, 0], np.int32),
...                  np.array([1, 2], np.int32))
>>> lut = build_fused_lut_runs(runs, 64, block_m=128, block_n=64, causal=True)
>>> lut.items.tolist(), lut.entries[:, :2].tolist()
([[0, 0, 0, 2]], [[0, 2], [1, 3]])
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit

from designer.run_arrays import RunArrays
from gpu.forward.lut import (
    FLAG_DIAGONAL,
    FLAG_KEY_BOUND,
    FLAG_PARTIAL,
    FLAG_TOKENS,
    FusedLut,
    fused_lut,
    tile_cells,
)
from gpu.partials import Partials, RunTokenTiles, run_token_tiles


def tile_work_of_runs(
    runs: RunArrays,
    block_size: int,
    *,
    block_m: int,
    block_n: int,
    causal: bool,
    causal_offset: int = 0,
    seq_q: int | None = None,
    seq_k: int | None = None,
) -> tuple[int, int]:
    """``FusedLut.work`` of ``build_fused_lut_runs`` (active tiles, work items) without
    building the table: each query tile's key tiles are counted as the union of its runs'
    tile intervals, in time that follows the runs, not the blocks."""
    geometry, n_q_tiles = _geometry(runs, block_size, block_m, block_n, causal, causal_offset,
                                    seq_q, seq_k)  # fmt: skip
    widest = int(np.diff(runs.row_ptr).max(initial=0)) * int(geometry[3])
    n_tiles = tile_count(runs.row_ptr, runs.starts, runs.stops, runs.shape[0], runs.shape[1],
                         geometry, max(widest, 1))  # fmt: skip
    return n_tiles, runs.shape[0] * n_q_tiles


def tile_entries_of_runs(
    runs: RunArrays,
    block_size: int,
    *,
    block_m: int,
    block_n: int,
    causal: bool,
    causal_offset: int = 0,
    seq_q: int | None = None,
    seq_k: int | None = None,
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """``(counts, entries, n_q_tiles, n_k_tiles)``: the active tiles per (head, q_tile), head
    major, and their int32 entries ``(k_tile, flags, mask bits 0-31, 32-63)`` in (head, q_tile,
    k_tile) order: ``gpu.forward.lut.tile_masks`` and ``grouped_entries`` without the grid."""
    geometry, n_q_tiles = _geometry(runs, block_size, block_m, block_n, causal, causal_offset,
                                    seq_q, seq_k)  # fmt: skip
    sub_rows, sub_cols = int(geometry[1]), int(geometry[2])
    cells_per_block = (block_size // sub_rows) * (block_size // sub_cols)
    capacity = int((runs.stops.astype(np.int64) - runs.starts).sum()) * cells_per_block
    counts, entries = tile_entries(runs.row_ptr, runs.starts, runs.stops, runs.shape[0],
                                   runs.shape[1], geometry, capacity)  # fmt: skip
    return counts, entries, n_q_tiles, int(geometry[10])


def _geometry(
    runs: RunArrays, block_size: int, block_m: int, block_n: int, causal: bool,
    causal_offset: int, seq_q: int | None, seq_k: int | None,
) -> tuple[np.ndarray, int]:  # fmt: skip
    """The compiled walks' int64 settings (see ``tile_entries``) and the query tiles."""
    sub_rows, sub_cols, rows_per_tile, cols_per_tile = tile_cells(block_size, block_m, block_n)
    _, n_q_blocks, n_k_blocks = runs.shape
    seq_q = n_q_blocks * block_size if seq_q is None else seq_q
    seq_k = n_k_blocks * block_size if seq_k is None else seq_k
    n_q_tiles, n_k_tiles = -(-seq_q // block_m), -(-seq_k // block_n)
    geometry = np.array(
        [block_size, sub_rows, sub_cols, rows_per_tile, cols_per_tile, causal, causal_offset,
         seq_q, seq_k, n_q_tiles, n_k_tiles],
        dtype=np.int64,
    )  # fmt: skip
    return geometry, n_q_tiles


def build_fused_lut_runs(
    runs: RunArrays,
    block_size: int,
    *,
    block_m: int,
    block_n: int,
    causal: bool,
    causal_offset: int = 0,
    seq_q: int | None = None,
    seq_k: int | None = None,
    partials: Partials | None = None,
) -> FusedLut:
    """``gpu.forward.lut.build_fused_lut`` of the layout that ``runs`` holds, with its
    ``partials`` (checked by ``gpu.partials.check_partials``) if any."""
    options = {"block_m": block_m, "block_n": block_n, "causal": causal,
               "causal_offset": causal_offset, "seq_q": seq_q, "seq_k": seq_k}  # fmt: skip
    counts, entries, n_q_tiles, n_k_tiles = tile_entries_of_runs(runs, block_size, **options)
    token_words = torch.zeros(0, block_m, -(-block_n // 32), dtype=torch.int32)
    if partials is not None:
        tokens = token_tiles_of_entries(partials, runs, counts, entries, n_q_tiles, n_k_tiles,
                                        **options, by_key_tile=False)  # fmt: skip
        keys = forward_keys(counts, entries, n_k_tiles)
        counts, entries = token_entries(counts, entries, keys, tokens)
        token_words = tokens.words
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return fused_lut(counts, starts, torch.from_numpy(entries), token_words, n_q_tiles,
                     n_k_tiles, tile_cells(block_size, block_m, block_n)[:2])  # fmt: skip


def forward_keys(counts: np.ndarray, entries: np.ndarray, n_k_tiles: int) -> np.ndarray:
    """int64 ``[E]``: the tile key ``(head · q_tiles + q_tile) · k_tiles + k_tile`` of each
    entry of ``tile_entries`` (grouped per (head, q_tile), key order: the keys are sorted)."""
    groups = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    return groups * n_k_tiles + entries[:, 0]


def token_tiles_of_entries(
    partials: Partials,
    runs: RunArrays,
    counts: np.ndarray,
    entries: np.ndarray,
    n_q_tiles: int,
    n_k_tiles: int,
    *,
    block_m: int,
    block_n: int,
    causal: bool,
    causal_offset: int,
    seq_q: int | None,
    seq_k: int | None,
    by_key_tile: bool,
) -> RunTokenTiles:
    """The token tiles of the forward's entries of ``tile_entries`` (the backward's with
    ``by_key_tile``): ``gpu.partials.run_token_tiles`` on their keys and mask words."""
    _, n_q_blocks, n_k_blocks = runs.shape
    block = partials.block_size
    halves = [np.ascontiguousarray(entries[:, i]).view(np.uint32).astype(np.uint64)
              for i in (2, 3)]  # fmt: skip
    return run_token_tiles(
        partials, runs, forward_keys(counts, entries, n_k_tiles),
        halves[0] | (halves[1] << np.uint64(32)), n_q_tiles=n_q_tiles, n_k_tiles=n_k_tiles,
        block_m=block_m, block_n=block_n, causal=causal, causal_offset=causal_offset,
        seq_q=n_q_blocks * block if seq_q is None else seq_q,
        seq_k=n_k_blocks * block if seq_k is None else seq_k, by_key_tile=by_key_tile,
    )  # fmt: skip


def token_entries(
    counts: np.ndarray, entries: np.ndarray, keys: np.ndarray, tokens: RunTokenTiles
) -> tuple[np.ndarray, np.ndarray]:
    """``(counts, entries)`` of a table whose entries have tile ``keys`` (any order), with the
    token tiles of ``tokens`` as ``(tile, FLAG_TOKENS, token tile, 0)`` and the dropped ones
    removed (``counts`` per group less them), as ``gpu.forward.lut.masked_tiles`` does."""
    kept = tokens.keys
    entries = entries.copy()
    if len(kept):
        sorter = np.argsort(kept)
        at = sorter[np.minimum(np.searchsorted(kept, keys, sorter=sorter), len(kept) - 1)]
        token = kept[at] == keys
        entries[token, 1] = FLAG_TOKENS
        entries[token, 2] = at[token]
        entries[token, 3] = 0
    if not len(tokens.dropped):
        return counts, entries
    at = np.minimum(np.searchsorted(tokens.dropped, keys), len(tokens.dropped) - 1)
    dropped = tokens.dropped[at] == keys
    groups = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    counts = counts - np.bincount(groups[dropped], minlength=len(counts))
    return counts, entries[~dropped]


@njit(cache=True, nogil=True)
def tile_entries(
    row_ptr, starts, stops, n_heads, n_rows, geometry, capacity
):  # pragma: no cover (numba)
    """Walk every (head, q_tile): OR the cells of its block rows' runs into their key tiles'
    mask words and flags, then write the tiles in key order (see ``tile_entries_of_runs``)."""
    block_size, sub_rows, sub_cols, rows_per_tile, cols_per_tile = geometry[:5]
    causal, offset, seq_q, seq_k, n_q_tiles, n_k_tiles = geometry[5:]
    settings = (block_size, sub_rows, sub_cols, rows_per_tile, cols_per_tile, causal, offset,
                seq_q, seq_k)  # fmt: skip
    k_cells = block_size // sub_cols  # cells per block side
    full = np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(64 - rows_per_tile * cols_per_tile)
    straddling = seq_k // sub_cols if seq_k % sub_cols else -1  # the cell column across seq_k
    counts = np.zeros(n_heads * n_q_tiles, dtype=np.int64)
    entries = np.empty((capacity, 4), dtype=np.int32)
    words = np.zeros(n_k_tiles, dtype=np.uint64)  # per key tile of the current query tile
    flags = np.zeros(n_k_tiles, dtype=np.int32)
    touched = np.empty(n_k_tiles, dtype=np.int32)  # its key tiles, ascending
    merged = np.empty(n_k_tiles, dtype=np.int32)
    n_entries = 0
    for h in range(n_heads):
        for q_tile in range(n_q_tiles):
            n_touched = 0
            for cell_row in range(rows_per_tile):
                m, q_first, _, limit = _cell_row(q_tile, cell_row, n_rows, settings)
                if m < 0:
                    break
                before = n_touched
                r = h * n_rows + m
                for run in range(row_ptr[r], row_ptr[r + 1]):
                    first, stop = starts[run] * k_cells, min(stops[run] * k_cells, limit)
                    if first >= stop:
                        break  # this run and the later ones lie past seq_k or the limit
                    for k_tile in range(first // cols_per_tile, (stop - 1) // cols_per_tile + 1):
                        lo = max(first, k_tile * cols_per_tile)  # the run's cells in the tile
                        hi = min(stop, (k_tile + 1) * cols_per_tile)
                        if words[k_tile] == 0:
                            touched[n_touched] = k_tile
                            n_touched += 1
                        shift = cell_row * cols_per_tile + lo - k_tile * cols_per_tile
                        ones = (np.uint64(1) << np.uint64(hi - lo)) - np.uint64(1)
                        words[k_tile] |= ones << np.uint64(shift)
                        k_last = min(hi * sub_cols, seq_k) - 1  # the last cell's last key
                        if causal and k_last > q_first + offset:
                            flags[k_tile] |= FLAG_DIAGONAL
                        if lo <= straddling < hi:
                            flags[k_tile] |= FLAG_KEY_BOUND
                if 0 < before < n_touched:
                    _merge(touched, before, n_touched, merged)
            for t in range(n_touched):
                k_tile = touched[t]
                word = words[k_tile]
                entries[n_entries, 0] = k_tile
                entries[n_entries, 1] = flags[k_tile] | (FLAG_PARTIAL if word != full else 0)
                entries[n_entries, 2] = _signed_word(word & np.uint64(0xFFFFFFFF))
                entries[n_entries, 3] = _signed_word(word >> np.uint64(32))
                words[k_tile] = 0
                flags[k_tile] = 0
                n_entries += 1
            counts[h * n_q_tiles + q_tile] = n_touched
    return counts, entries[:n_entries]


@njit(cache=True, nogil=True)
def tile_count(
    row_ptr, starts, stops, n_heads, n_rows, geometry, widest
):  # pragma: no cover (numba)
    """The active tiles of ``tile_entries``, counted per query tile as the union of the key
    tile intervals of its cell rows' runs (clipped to ``seq_k`` and the causal limit);
    ``widest`` bounds a query tile's intervals."""
    block_size, sub_rows, sub_cols, rows_per_tile, cols_per_tile = geometry[:5]
    causal, offset, seq_q, seq_k, n_q_tiles = geometry[5:10]
    settings = (block_size, sub_rows, sub_cols, rows_per_tile, cols_per_tile, causal, offset,
                seq_q, seq_k)  # fmt: skip
    k_cells = block_size // sub_cols
    firsts = np.empty(widest, dtype=np.int64)
    lasts = np.empty(widest, dtype=np.int64)
    total = 0
    for h in range(n_heads):
        for q_tile in range(n_q_tiles):
            n_spans = 0
            for cell_row in range(rows_per_tile):
                m, _, _, limit = _cell_row(q_tile, cell_row, n_rows, settings)
                if m < 0:
                    break
                r = h * n_rows + m
                for run in range(row_ptr[r], row_ptr[r + 1]):
                    first, stop = starts[run] * k_cells, min(stops[run] * k_cells, limit)
                    if first >= stop:
                        break
                    at = n_spans  # insertion by first tile: the lists are short
                    while at > 0 and firsts[at - 1] > first // cols_per_tile:
                        firsts[at], lasts[at] = firsts[at - 1], lasts[at - 1]
                        at -= 1
                    firsts[at], lasts[at] = first // cols_per_tile, (stop - 1) // cols_per_tile
                    n_spans += 1
            covered_to = -1  # the last tile counted
            for i in range(n_spans):
                if lasts[i] > covered_to:
                    total += lasts[i] - max(firsts[i], covered_to + 1) + 1
                    covered_to = lasts[i]
    return total


@njit(cache=True, nogil=True)
def transpose_entries(counts, entries, n_heads, n_q_tiles, n_k_tiles):  # pragma: no cover (numba)
    """The entries of ``tile_entries`` regrouped per (head, k_tile), query order inside:
    ``(counts, starts, entries (q_tile, flags, bits 0-31, 32-63))``, a stable counting sort."""
    per_key = np.zeros(n_heads * n_k_tiles, dtype=np.int64)
    at = 0
    for row in range(counts.size):
        h = row // n_q_tiles
        for _ in range(counts[row]):
            per_key[h * n_k_tiles + entries[at, 0]] += 1
            at += 1
    key_starts = np.zeros(per_key.size, dtype=np.int64)
    for key in range(1, per_key.size):
        key_starts[key] = key_starts[key - 1] + per_key[key - 1]
    fill = key_starts.copy()
    out = np.empty_like(entries)
    at = 0
    for row in range(counts.size):
        h, q_tile = row // n_q_tiles, row % n_q_tiles
        for _ in range(counts[row]):
            key = h * n_k_tiles + entries[at, 0]
            out[fill[key], 0] = q_tile
            out[fill[key], 1:] = entries[at, 1:]
            fill[key] += 1
            at += 1
    return per_key, key_starts, out


@njit(cache=True, nogil=True, inline="always")
def _cell_row(q_tile, cell_row, n_rows, settings):  # pragma: no cover (numba)
    """Cell row ``cell_row`` of query tile ``q_tile``: its block row (-1: past ``seq_q``), its
    first and last query, and the first cell column it drops (cells start before ``seq_k``
    and, when causal, at or before ``q_last + causal_offset``). ``settings`` is the geometry
    as a tuple of ints (an array would cost reference counts per call)."""
    block_size, sub_rows, sub_cols, rows_per_tile, _, causal, offset, seq_q, seq_k = settings
    q_first = (q_tile * rows_per_tile + cell_row) * sub_rows
    m = (q_tile * rows_per_tile + cell_row) // (block_size // sub_rows)
    if q_first >= seq_q or m >= n_rows:
        return -1, q_first, q_first, 0
    q_last = min(q_first + sub_rows, seq_q) - 1
    limit = -(-seq_k // sub_cols)
    if causal:
        limit = min(limit, (q_last + offset) // sub_cols + 1)
    return m, q_first, q_last, limit


@njit(cache=True, nogil=True)
def _merge(touched, middle, stop, merged):  # pragma: no cover (numba)
    """Merge the ascending ``touched[:middle]`` and ``touched[middle:stop]`` in place."""
    i, j, k = 0, middle, 0
    while i < middle or j < stop:
        if j >= stop or (i < middle and touched[i] < touched[j]):
            merged[k] = touched[i]
            i += 1
        else:
            merged[k] = touched[j]
            j += 1
        k += 1
    touched[:stop] = merged[:stop]


@njit(cache=True, nogil=True)
def _signed_word(half):  # pragma: no cover (numba)
    """A 32-bit half of a mask word as the int32 with the same bits."""
    value = np.int64(half)
    return value - (1 << 32) if value >= (1 << 31) else value
