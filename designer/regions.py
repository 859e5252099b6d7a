"""Regions of a block grid that an edit paints, as frozen values.

Coordinates are blocks ``(row, col)`` = ``(query block, key block)``:

- ``Cells(((r, c), ...))``: the listed blocks;
- ``Rect(row0, col0, row1, col1)``: the box between two corners, both included;
- ``Row(row)`` / ``Column(col)``: one whole row or column;
- ``Band(lo, hi)``: the diagonals ``lo <= col - row <= hi``, clipped to the grid.

Each checks its own values when made, ``check_fits`` a grid without building anything, ``mask``
gives its blocks as a bool grid, and ``to_dict`` / ``region_from_dict`` carry it through files.

>>> Band(-1, 0).mask(3, 3).int().tolist()
[[1, 0, 0], [1, 1, 0], [0, 1, 1]]
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

import numpy as np
import torch

from designer.validate import MAX_BLOCKS, check_choice, check_int, check_int_list, check_keys

#: Most blocks one ``Cells`` region may list (a painted selection, never a whole layout).
MAX_EDIT_CELLS = 1 << 20
#: Largest block coordinate or diagonal offset a region may name (a grid is at most 2**16 wide).
MAX_COORD = MAX_BLOCKS


def _outside(name: str, value: Any, n_rows: int, n_cols: int) -> ValueError:
    return ValueError(
        f"{name} = {value} is outside the grid of {n_rows} q_blocks x {n_cols} k_blocks "
        f"(rows 0..{n_rows - 1}, cols 0..{n_cols - 1})"
    )


# --------------------------------------------------------------------------- regions
class _Region:
    """What every region does: check it fits a grid, mark its blocks, write itself as a dict."""

    kind: ClassVar[str]

    def check_fits(self, n_rows: int, n_cols: int) -> None:
        """Raise naming the coordinate that a grid of ``n_rows x n_cols`` blocks lacks.

        Cheap (no mask is built), so a recipe checks every edit it holds. A band is clipped to
        the grid, so this default checks nothing.
        """

    def mask(self, n_rows: int, n_cols: int) -> torch.Tensor:
        """The ``[n_rows, n_cols]`` bool mask of the region; raises if it does not fit."""
        self.check_fits(n_rows, n_cols)
        mask = torch.zeros(n_rows, n_cols, dtype=torch.bool)
        mask[self._where()] = True
        return mask

    def index(self, n_rows: int, n_cols: int) -> tuple[Any, ...]:
        """The region's blocks as an index into a ``[n_rows, n_cols]`` grid; raises if it does
        not fit. Costs the region's size, not the grid's (a band gives its mask)."""
        self.check_fits(n_rows, n_cols)
        where = self._where()
        return where if isinstance(where, tuple) else (where,)

    def _where(self) -> Any:
        """The index of the region's blocks in a grid it fits."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}  # type: ignore[call-overload]


@dataclass(frozen=True)
class Cells(_Region):
    """The listed ``(row, col)`` blocks.

    A lasso can select tens of thousands of blocks, so the pairs are checked and indexed in one
    numpy pass (``_index``, int64 ``[n, 2]``) rather than one by one.
    """

    cells: tuple[tuple[int, int], ...]
    kind: ClassVar[str] = "cells"

    def __post_init__(self) -> None:
        if not isinstance(self.cells, (list, tuple)):
            raise TypeError(
                f"cells must be a list of [row, col] pairs, got {type(self.cells).__name__}"
            )
        if not 1 <= len(self.cells) <= MAX_EDIT_CELLS:
            raise ValueError(f"cells must list 1 to {MAX_EDIT_CELLS} blocks, got {len(self.cells)}")
        pairs, index = _read_cells(self.cells)
        index.flags.writeable = False
        object.__setattr__(self, "cells", pairs)
        object.__setattr__(self, "_index", index)

    def check_fits(self, n_rows: int, n_cols: int) -> None:
        outside = (self._index[:, 0] >= n_rows) | (self._index[:, 1] >= n_cols)
        if outside.any():
            k = int(outside.argmax())
            raise _outside(f"cells[{k}]", self.cells[k], n_rows, n_cols)

    def _where(self) -> Any:
        return torch.from_numpy(self._index.copy()).unbind(1)  # a copy: torch wants it writable

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "cells": [list(cell) for cell in self.cells]}


def _read_cells(cells: list | tuple) -> tuple[tuple[tuple[int, int], ...], np.ndarray]:
    """``cells`` as a tuple of int pairs and as an int64 ``[n, 2]`` array, checked.

    Pairs of Python ints (what the editor and JSON files give) are checked all at once by numpy;
    anything else goes pair by pair, so a message always names the first bad coordinate.
    """
    try:
        plain = set(map(type, itertools.chain.from_iterable(cells))) == {int}
        array = np.array(cells) if plain else None
    except (TypeError, ValueError, OverflowError):  # a pair that is not a list, ragged, huge
        array = None
    if array is None or array.dtype.kind not in "iu" or array.shape != (len(cells), 2):
        pairs = tuple(
            tuple(check_int_list(f"cells[{i}]", cell, low=0, high=MAX_COORD, min_len=2, max_len=2))
            for i, cell in enumerate(cells)
        )
        return pairs, np.array(pairs, dtype=np.int64)  # type: ignore[return-value]
    bad = (array < 0) | (array > MAX_COORD)
    if bad.any():
        k, j = np.argwhere(bad)[0]
        check_int(f"cells[{k}][{j}]", int(array[k, j]), low=0, high=MAX_COORD)  # raises
    if not isinstance(cells, tuple) or set(map(type, cells)) != {tuple}:
        cells = tuple(map(tuple, array.tolist()))
    return cells, array.astype(np.int64, copy=False)


@dataclass(frozen=True)
class Rect(_Region):
    """The box of blocks from ``(row0, col0)`` to ``(row1, col1)``, both corners included."""

    row0: int
    col0: int
    row1: int
    col1: int
    kind: ClassVar[str] = "rect"

    def __post_init__(self) -> None:
        for name in ("row0", "col0", "row1", "col1"):
            value = check_int(name, getattr(self, name), low=0, high=MAX_COORD)
            object.__setattr__(self, name, value)
        if self.row1 < self.row0 or self.col1 < self.col0:
            raise ValueError(
                f"rect must have row0 <= row1 and col0 <= col1, got rows {self.row0}..{self.row1} "
                f"and cols {self.col0}..{self.col1}"
            )

    def check_fits(self, n_rows: int, n_cols: int) -> None:
        if self.row1 >= n_rows or self.col1 >= n_cols:
            raise _outside("rect corner (row1, col1)", (self.row1, self.col1), n_rows, n_cols)

    def _where(self) -> Any:
        return slice(self.row0, self.row1 + 1), slice(self.col0, self.col1 + 1)


@dataclass(frozen=True)
class Row(_Region):
    """Every block of query block ``row``."""

    row: int
    kind: ClassVar[str] = "row"

    def __post_init__(self) -> None:
        object.__setattr__(self, "row", check_int("row", self.row, low=0, high=MAX_COORD))

    def check_fits(self, n_rows: int, n_cols: int) -> None:
        if self.row >= n_rows:
            raise _outside("row", self.row, n_rows, n_cols)

    def _where(self) -> Any:
        return self.row


@dataclass(frozen=True)
class Column(_Region):
    """Every block of key block ``col``."""

    col: int
    kind: ClassVar[str] = "column"

    def __post_init__(self) -> None:
        object.__setattr__(self, "col", check_int("col", self.col, low=0, high=MAX_COORD))

    def check_fits(self, n_rows: int, n_cols: int) -> None:
        if self.col >= n_cols:
            raise _outside("col", self.col, n_rows, n_cols)

    def _where(self) -> Any:
        return slice(None), self.col


@dataclass(frozen=True)
class Band(_Region):
    """The diagonals ``lo <= col - row <= hi`` (0 is the main diagonal), clipped to the grid."""

    lo: int
    hi: int
    kind: ClassVar[str] = "band"

    def __post_init__(self) -> None:
        lo = check_int("lo", self.lo, low=-MAX_COORD, high=MAX_COORD)
        hi = check_int("hi", self.hi, low=-MAX_COORD, high=MAX_COORD)
        if hi < lo:
            raise ValueError(f"band must have lo <= hi, got lo={lo}, hi={hi}")
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)

    def mask(self, n_rows: int, n_cols: int) -> torch.Tensor:
        """Filled row by row: a grid-sized table of offsets would take 8 bytes a cell."""
        mask = torch.zeros(n_rows, n_cols, dtype=torch.bool)
        cells = mask.numpy()
        for row in range(max(0, -self.hi), min(n_rows, n_cols - self.lo)):
            cells[row, max(0, row + self.lo) : row + self.hi + 1] = True
        return mask

    def index(self, n_rows: int, n_cols: int) -> tuple[Any, ...]:
        return (self.mask(n_rows, n_cols),)


Region = Cells | Rect | Row | Column | Band
REGIONS: dict[str, type] = {region.kind: region for region in (Cells, Rect, Row, Column, Band)}


def region_from_dict(data: Any) -> Region:
    """Read a region written by ``region.to_dict()``, checking every key and value."""
    every_key = {f.name for region in REGIONS.values() for f in fields(region)}
    check_keys("region", data, ("kind",), every_key)
    kind = check_choice("region kind", data["kind"], tuple(REGIONS))
    names = [f.name for f in fields(REGIONS[kind])]
    check_keys(f"{kind} region", data, ("kind", *names))
    return REGIONS[kind](**{name: data[name] for name in names})
