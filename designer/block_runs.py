"""A block layout stored by its active blocks: maximal runs of key blocks in each block row.

A ``[H, M, N]`` layout has ``H·M`` block rows (row ``r = h·M + m``). ``BlockRuns`` keeps, for
each row, the key-block intervals it attends:

- ``row_ptr`` int64 ``[H·M + 1]``: row ``r``'s runs are ``runs[row_ptr[r]:row_ptr[r + 1]]``;
- ``starts``, ``stops`` int32 ``[R]``: a run covers key blocks ``starts[i] <= n < stops[i]``.

Within a row, runs are sorted, non-empty, disjoint and never touch (``stops[i] < starts[i +
1]``), so equal layouts have equal arrays. A sliding window is one run per row whatever its
width, so memory follows the runs, and counts follow from run lengths, never from the grid.

Every operation is vectorised over all runs (no Python loop over rows): sets of intervals are
combined by one sweep over their sorted end points (``_sweep``), as a scan-line does.

>>> grid = torch.tensor([[[1, 1, 0, 1], [0, 0, 0, 0], [0, 1, 1, 1]]], dtype=torch.bool)
>>> runs = BlockRuns.from_dense(grid)
>>> runs.row_ptr.tolist(), runs.starts.tolist(), runs.stops.tolist()
([0, 2, 2, 3], [0, 3, 1], [2, 4, 4])
>>> runs.nnz, bool(torch.equal(runs.to_dense(), grid))
(6, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from designer.validate import check_int, check_int_list

#: Cells ``to_dense`` builds unless told otherwise: 2**26 (a 64 MiB bool grid).
DENSE_CELLS = 1 << 26

_Predicate = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
_OPERATIONS: dict[str, _Predicate] = {
    "or": torch.logical_or,
    "and": torch.logical_and,
    "andnot": lambda a, b: a & ~b,
}


@dataclass(frozen=True, eq=False)
class BlockRuns:
    """A ``[H, M, N]`` layout as maximal row runs (see the module docstring); checked on
    creation, so a value of this class is always canonical."""

    shape: tuple[int, int, int]
    row_ptr: torch.Tensor
    starts: torch.Tensor
    stops: torch.Tensor

    def __post_init__(self) -> None:
        if not isinstance(self.shape, (tuple, list)) or len(self.shape) != 3:
            raise ValueError(f"runs shape must be [H, M, N], got {self.shape!r}")
        shape = tuple(check_int(f"runs shape[{i}]", v, low=1) for i, v in enumerate(self.shape))
        object.__setattr__(self, "shape", shape)
        h, m, n = shape
        for name, dtype in (("row_ptr", torch.int64), ("starts", torch.int32),
                            ("stops", torch.int32)):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, torch.Tensor) or value.dtype != dtype or value.dim() != 1:
                found = f"{value.dtype} {list(value.shape)}" if isinstance(value, torch.Tensor) \
                    else type(value).__name__  # fmt: skip
                raise ValueError(f"runs {name} must be a 1-D {dtype} tensor, got {found}")
            object.__setattr__(self, name, value.cpu().contiguous())
        row_ptr, starts, stops = self.row_ptr, self.starts, self.stops
        if len(row_ptr) != h * m + 1:
            raise ValueError(
                f"runs row_ptr must have H*M + 1 = {h * m + 1} entries, got {len(row_ptr)}"
            )
        if len(starts) != len(stops) or int(row_ptr[0]) != 0 or int(row_ptr[-1]) != len(starts):
            raise ValueError(
                f"runs row_ptr must go from 0 to the {len(starts)} runs, with as many stops "
                f"({len(stops)}), got {int(row_ptr[0])} to {int(row_ptr[-1])}"
            )
        if bool((row_ptr[1:] < row_ptr[:-1]).any()):
            raise ValueError("runs row_ptr must be non-decreasing")
        if len(starts) and (int(starts.min()) < 0 or int(stops.max()) > n):
            raise ValueError(f"runs must lie in key blocks [0, {n}]")
        if bool((stops <= starts).any()):
            raise ValueError("every run must be non-empty (start < stop)")
        rows = self.run_rows()
        same_row = rows[1:] == rows[:-1]
        if bool((same_row & (starts[1:] <= stops[:-1])).any()):
            raise ValueError("runs of a row must be sorted, disjoint and not touching")

    # ----------------------------------------------------------------- building
    @classmethod
    def empty(cls, n_heads: int, n_q_blocks: int, n_k_blocks: int) -> BlockRuns:
        """No active block."""
        none = torch.zeros(0, dtype=torch.int32)
        ptr = torch.zeros(n_heads * n_q_blocks + 1, dtype=torch.int64)
        return cls((n_heads, n_q_blocks, n_k_blocks), ptr, none, none.clone())

    @classmethod
    def from_dense(cls, grid: torch.Tensor) -> BlockRuns:
        """The runs of a bool (or 0/1) ``[H, M, N]`` grid."""
        h, m, n = grid.shape
        rows = grid.reshape(h * m, n).to(torch.int8)
        edges = torch.diff(torch.nn.functional.pad(rows, (1, 1)), dim=1)  # [H*M, N + 1]
        row, start = torch.nonzero(edges == 1, as_tuple=True)
        _, stop = torch.nonzero(edges == -1, as_tuple=True)
        counts = torch.bincount(row, minlength=h * m)
        return cls((h, m, n), _pointers(counts), start.to(torch.int32), stop.to(torch.int32))

    @classmethod
    def from_intervals(
        cls, shape: tuple[int, int, int], rows: torch.Tensor, starts: torch.Tensor,
        stops: torch.Tensor,
    ) -> BlockRuns:  # fmt: skip
        """The union of key-block intervals ``[starts[i], stops[i])`` of rows ``rows[i]`` (any
        order; empty, overlapping and touching intervals allowed; clipped to ``[0, N]``)."""
        n = shape[2]
        rows = rows.to(torch.int64)
        starts, stops = starts.to(torch.int64).clamp(0, n), stops.to(torch.int64).clamp(0, n)
        keep = starts < stops
        base = rows[keep] * (n + 1)
        begin, end = base + starts[keep], base + stops[keep]
        if len(begin) > 1 and bool((begin[1:] < begin[:-1]).any()):  # generators give them sorted
            begin, order = torch.sort(begin)
            end = end[order]
        # in key order, an interval opens a new run when it starts past all earlier ones' reach
        reach = torch.cummax(end, 0).values if len(end) else end
        opens = torch.ones(len(begin), dtype=torch.bool)
        opens[1:] = begin[1:] > reach[:-1]
        first = torch.nonzero(opens).view(-1)
        last = torch.cat([first[1:] - 1, torch.tensor([len(begin) - 1])])[: len(first)]
        return _runs_of_keys(shape, begin[first], reach[last])

    @classmethod
    def from_cells(cls, shape: tuple[int, int, int], index: torch.Tensor) -> BlockRuns:
        """The runs of the ``(head, q_block, k_block)`` rows of ``index`` ``[K, 3]``."""
        index = index.to(torch.int64)
        rows = index[:, 0] * shape[1] + index[:, 1]
        return cls.from_intervals(shape, rows, index[:, 2], index[:, 2] + 1)

    # ----------------------------------------------------------------- reading
    @property
    def n_runs(self) -> int:
        return len(self.starts)

    @property
    def nbytes(self) -> int:
        return self.row_ptr.nbytes + self.starts.nbytes + self.stops.nbytes

    @property
    def nnz(self) -> int:
        """Active blocks over all heads."""
        return int((self.stops - self.starts).sum(dtype=torch.int64))

    @property
    def density(self) -> float:
        h, m, n = self.shape
        return self.nnz / (h * m * n)

    def run_rows(self) -> torch.Tensor:
        """int64 ``[R]``: the block row ``h·M + m`` of each run (made once): the number of rows
        that end at or before it."""
        rows = self.__dict__.get("_rows")
        if rows is None:
            ends = torch.zeros(self.n_runs + 1, dtype=torch.int64)
            ends.index_add_(
                0, self.row_ptr[1:], torch.ones(len(self.row_ptr) - 1, dtype=torch.int64)
            )
            rows = torch.cumsum(ends, 0)[: self.n_runs]
            object.__setattr__(self, "_rows", rows)
        return rows

    def row_counts(self) -> torch.Tensor:
        """int64 ``[H, M]``: active blocks in each query block row."""
        h, m, _ = self.shape
        total = _pointers(self.stops - self.starts)
        return (total[self.row_ptr[1:]] - total[self.row_ptr[:-1]]).view(h, m)

    def head_counts(self) -> torch.Tensor:
        """int64 ``[H]``: active blocks in each head."""
        return self.row_counts().sum(dim=1)

    def column_counts(self, column: int) -> torch.Tensor:
        """int64 ``[H]``: active blocks of each head in key block ``column``."""
        rows = self.run_rows()[(self.starts <= column) & (column < self.stops)]
        return torch.bincount(rows // self.shape[1], minlength=self.shape[0])

    def contains(self, index: torch.Tensor) -> torch.Tensor:
        """Bool ``[K]``: whether each ``(head, q_block, k_block)`` row of ``index`` is active."""
        index = index.to(torch.int64)
        keys = (index[:, 0] * self.shape[1] + index[:, 1]) * (self.shape[2] + 1) + index[:, 2]
        starts, stops = self._keys()
        if not len(starts):
            return torch.zeros(len(keys), dtype=torch.bool)
        at = torch.searchsorted(starts, keys, right=True) - 1
        return (at >= 0) & (keys < stops[at.clamp(min=0)])

    def columns(self) -> torch.Tensor:
        """int64 ``[nnz]``: the key block of every active block, in (head, row, col) order (a
        CSR's ``col_idx``)."""
        return _ranges(self.starts.to(torch.int64), (self.stops - self.starts).to(torch.int64))

    def head_signatures(self) -> list[bytes]:
        """Bytes per head, equal exactly when two heads' blocks are (the runs are canonical)."""
        h, m, n = self.shape
        sizes = (self.row_ptr[1:] - self.row_ptr[:-1]).view(h, m)
        signatures = []
        for head in range(h):
            first, last = int(self.row_ptr[head * m]), int(self.row_ptr[(head + 1) * m])
            parts = (sizes[head], self.starts[first:last], self.stops[first:last])
            signatures.append(repr((m, n)).encode() + b"".join(p.numpy().tobytes() for p in parts))
        return signatures

    def to_dense(self, max_cells: int = DENSE_CELLS) -> torch.Tensor:
        """The bool ``[H, M, N]`` grid, refused past ``max_cells`` cells."""
        h, m, n = self.shape
        if h * m * n > max_cells:
            raise ValueError(
                f"a dense grid of {h} x {m} x {n} blocks has {h * m * n:,} cells, more than "
                f"the limit of {max_cells:,}; work with the runs (row_ptr, starts, stops)"
            )
        edges = torch.zeros(h * m, n + 1, dtype=torch.int8)
        rows = self.run_rows()
        edges[rows, self.starts.to(torch.int64)] = 1  # runs never touch: no cell is hit twice
        edges[rows, self.stops.to(torch.int64)] = -1
        return torch.cumsum(edges, dim=1, dtype=torch.int8)[:, :n].view(h, m, n).to(torch.bool)

    # ----------------------------------------------------------------- algebra, per head
    def union(self, other: BlockRuns) -> BlockRuns:
        """Blocks active in either (``other`` may have one head for all)."""
        return self._combine(other, "or")

    def intersection(self, other: BlockRuns) -> BlockRuns:
        """Blocks active in both."""
        return self._combine(other, "and")

    def difference(self, other: BlockRuns) -> BlockRuns:
        """Blocks active here and not in ``other``."""
        return self._combine(other, "andnot")

    def complement(self) -> BlockRuns:
        """Every inactive block active and vice versa."""
        return self.full(*self.shape).difference(self)

    @classmethod
    def full(cls, n_heads: int, n_q_blocks: int, n_k_blocks: int) -> BlockRuns:
        """Every block active: one run per row."""
        rows = n_heads * n_q_blocks
        return cls((n_heads, n_q_blocks, n_k_blocks), torch.arange(rows + 1),
                   torch.zeros(rows, dtype=torch.int32),
                   torch.full((rows,), n_k_blocks, dtype=torch.int32))  # fmt: skip

    def causal_clip(self) -> BlockRuns:
        """Only the blocks on or below the diagonal (``col <= row``)."""
        m = self.shape[1]
        q_block = self.run_rows() % m
        stops = torch.minimum(self.stops.to(torch.int64), q_block + 1)
        return BlockRuns.from_intervals(self.shape, self.run_rows(), self.starts, stops)

    def select_heads(self, heads: list[int]) -> BlockRuns:
        """The listed heads, in that order (a head may repeat)."""
        h, m, n = self.shape
        heads = check_int_list("heads", heads, low=0, high=h - 1, min_len=1)
        if h == 1:  # one head copied: whole arrays repeated
            sizes = (self.row_ptr[1:] - self.row_ptr[:-1]).repeat(len(heads))
            return BlockRuns((len(heads), m, n), _pointers(sizes), self.starts.repeat(len(heads)),
                             self.stops.repeat(len(heads)))  # fmt: skip
        ptr = self.row_ptr.view(-1)
        first = ptr[torch.tensor(heads) * m]  # [K] first run of each head
        counts = ptr[(torch.tensor(heads) + 1) * m] - first
        rows = torch.arange(m).repeat(len(heads)) + torch.tensor(heads).repeat_interleave(m) * m
        row_sizes = ptr[rows + 1] - ptr[rows]
        taken = _ranges(first, counts)
        return BlockRuns((len(heads), m, n), _pointers(row_sizes), self.starts[taken],
                         self.stops[taken])  # fmt: skip

    def with_heads(self, heads: list[int], source: BlockRuns) -> BlockRuns:
        """Heads ``heads`` replaced with ``source``'s heads (one source head for all)."""
        h = self.shape[0]
        order = list(range(h)) + [h + i for i in range(source.shape[0])]
        for i, head in enumerate(heads):
            order[head] = h + (0 if source.shape[0] == 1 else i)
        return BlockRuns.stack([self, source]).select_heads(order[:h])

    @classmethod
    def stack(cls, parts: list[BlockRuns]) -> BlockRuns:
        """The heads of ``parts`` one after another (all of one ``[M, N]``)."""
        _, m, n = parts[0].shape
        if any(part.shape[1:] != (m, n) for part in parts):
            raise ValueError(f"stacked runs need one [M, N], got {[p.shape for p in parts]}")
        sizes = torch.cat([part.row_ptr[1:] - part.row_ptr[:-1] for part in parts])
        return cls((sum(part.shape[0] for part in parts), m, n), _pointers(sizes),
                   torch.cat([part.starts for part in parts]),
                   torch.cat([part.stops for part in parts]))  # fmt: skip

    def transpose(self) -> BlockRuns:
        """Query and key blocks swapped in every head (``[H, N, M]``).

        A column run of the transposed head starts at row ``m`` where block ``(m, n)`` is
        active and ``(m - 1, n)`` is not: the cells of this row less the row above, one per
        transposed run. Likewise it stops below the cells of this row less the row below.
        """
        h, m, n = self.shape
        begins = _cells(self.difference(self._shifted(1)))
        ends = _cells(self.difference(self._shifted(-1)))

        def ordered(cells: torch.Tensor) -> torch.Tensor:
            return cells[torch.argsort((cells[:, 0] * n + cells[:, 2]) * m + cells[:, 1])]

        begins, ends = ordered(begins), ordered(ends)
        rows = begins[:, 0] * n + begins[:, 2]
        return BlockRuns.from_intervals((h, n, m), rows, begins[:, 1], ends[:, 1] + 1)

    # ----------------------------------------------------------------- value semantics
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BlockRuns):
            return NotImplemented
        return (
            self.shape == other.shape
            and torch.equal(self.row_ptr, other.row_ptr)
            and torch.equal(self.starts, other.starts)
            and torch.equal(self.stops, other.stops)
        )

    def __hash__(self) -> int:
        arrays = (self.row_ptr, self.starts, self.stops)
        return hash((self.shape, *(array.numpy().tobytes() for array in arrays)))

    def __repr__(self) -> str:
        h, m, n = self.shape
        return (
            f"BlockRuns(heads={h}, q_blocks={m}, k_blocks={n}, runs={self.n_runs}, nnz={self.nnz})"
        )

    # ----------------------------------------------------------------- helpers
    def _keys(self) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 ``[R]`` start and stop keys ``row·(N + 1) + col``: sorted over all runs."""
        base = self.run_rows() * (self.shape[2] + 1)
        return base + self.starts.to(torch.int64), base + self.stops.to(torch.int64)

    def _combine(self, other: BlockRuns, how: str) -> BlockRuns:
        if not isinstance(other, BlockRuns):
            raise TypeError(f"runs combine with BlockRuns, got {type(other).__name__}")
        h, m, n = self.shape
        if other.shape[1:] != (m, n) or other.shape[0] not in (1, h):
            raise ValueError(
                f"runs must have the same [M, N] and heads (or one head), got {list(self.shape)} "
                f"and {list(other.shape)}"
            )
        a_starts, a_stops = self._keys()
        b_starts, b_stops = other._keys()
        if other.shape[0] != h:  # one head for all: its keys again at each head's offset
            offsets = torch.arange(h, dtype=torch.int64)[:, None] * (m * (n + 1))
            b_starts, b_stops = (offsets + b_starts).view(-1), (offsets + b_stops).view(-1)
        return _sweep(self.shape, a_starts, a_stops, b_starts, b_stops, how)

    def _shifted(self, by: int) -> BlockRuns:
        """Each head's rows moved down by ``by`` (up when negative), rows shifted out dropped."""
        m = self.shape[1]
        rows = self.run_rows()
        target = rows % m + by
        keep = (target >= 0) & (target < m)
        rows = rows[keep] + by
        return BlockRuns.from_intervals(self.shape, rows, self.starts[keep], self.stops[keep])


def _pointers(counts: torch.Tensor) -> torch.Tensor:
    """int64 ``[len + 1]`` running totals from 0 (a ``row_ptr`` of per-row run counts)."""
    return torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(counts.to(torch.int64), 0)])


def _ranges(first: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """int64 ``[sum(counts)]``: ``counts[i]`` items ``first[i], first[i] + 1, …`` for each ``i``."""
    total = int(counts.sum())
    group_start = _pointers(counts)[:-1]
    offsets = torch.arange(total) - torch.repeat_interleave(group_start, counts)
    return torch.repeat_interleave(first, counts) + offsets


def _cells(runs: BlockRuns) -> torch.Tensor:
    """int64 ``[K, 3]``: ``(head, q_block, k_block)`` of every active block, in order."""
    rows = torch.repeat_interleave(runs.run_rows(), (runs.stops - runs.starts).to(torch.int64))
    cols = runs.columns()
    m = runs.shape[1]
    return torch.stack([rows // m, rows % m, cols], dim=1)


def _sweep(shape: tuple[int, int, int], a_starts: torch.Tensor, a_stops: torch.Tensor,
           b_starts: torch.Tensor, b_stops: torch.Tensor, how: str) -> BlockRuns:  # fmt: skip
    """The maximal runs where ``how`` holds of (covered by an ``a`` interval, covered by a
    ``b`` interval), from the intervals' int64 keys ``row·(N + 1) + col``.

    The end points are sorted once; the coverage after each distinct key is a running sum of
    +1 (start) and -1 (stop); a run starts where the predicate turns true and stops where it
    turns false. Every operation here is false outside all intervals, and every row ends
    uncovered (keys stop at ``N < N + 1``), so no run crosses a row.
    """
    keys = torch.cat([a_starts, a_stops, b_starts, b_stops])
    ones = [torch.ones(len(part), dtype=torch.int32) for part in (a_starts, b_starts)]
    zeros = [torch.zeros(len(part), dtype=torch.int32) for part in (a_starts, b_starts)]
    a_step = torch.cat([ones[0], -ones[0], zeros[1], zeros[1]])
    b_step = torch.cat([zeros[0], zeros[0], ones[1], -ones[1]])
    keys, order = torch.sort(keys, stable=True)
    distinct, counts = torch.unique_consecutive(keys, return_counts=True)
    last = torch.cumsum(counts, 0) - 1
    a_cover = torch.cumsum(a_step[order], 0)[last] > 0
    b_cover = torch.cumsum(b_step[order], 0)[last] > 0
    holds = _OPERATIONS[how](a_cover, b_cover)
    before = torch.cat([torch.zeros(1, dtype=torch.bool), holds[:-1]])
    return _runs_of_keys(shape, distinct[holds & ~before], distinct[~holds & before])


def _runs_of_keys(
    shape: tuple[int, int, int], starts: torch.Tensor, stops: torch.Tensor
) -> BlockRuns:
    """``BlockRuns`` of canonical runs given by sorted int64 keys ``row·(N + 1) + col``."""
    h, m, n = shape
    rows = starts // (n + 1)
    counts = torch.bincount(rows, minlength=h * m)
    base = rows * (n + 1)
    return BlockRuns(shape, _pointers(counts), (starts - base).to(torch.int32),
                     (stops - base).to(torch.int32))  # fmt: skip
