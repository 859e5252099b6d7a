"""Regions of a block grid that an edit paints, as frozen values.

Coordinates are blocks ``(row, col)`` = ``(query block, key block)``:

- ``Cells(((r, c), ...))``: the listed blocks;
- ``Rect(row0, col0, row1, col1)``: the box between two corners, both included;
- ``Row(row)`` / ``Column(col)``: one whole row or column;
- ``Band(low, high)``: the diagonals ``low <= row - col <= high``, clipped to the grid (offsets
  count ``row - col`` everywhere in the designer: 0 is the main diagonal, 1 the one below it,
  -1 the one above; a version-1 band, ``{"lo", "hi"}`` as ``col - row``, still reads);
- ``Bitmap``: the set blocks of a bit-packed box (a lasso, a scattered selection), one bit per
  block of the box however many are set (``Bitmap.of(mask, row0, col0)`` makes one).

Each checks its own values when made, ``check_fits`` a grid without building anything, ``mask``
gives its blocks as a bool grid, and ``to_dict`` / ``region_from_dict`` carry it through files.

>>> Band(0, 1).mask(3, 3).int().tolist()
[[1, 0, 0], [1, 1, 0], [0, 1, 1]]
"""

from __future__ import annotations

import base64
import binascii
import functools
import itertools
import zlib
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

import numpy as np
import torch

from designer.validate import (
    MAX_BLOCKS,
    MAX_LAYOUT_CELLS,
    check_choice,
    check_int,
    check_int_list,
    check_keys,
)

#: Most blocks one ``Cells`` region may list (a painted selection, never a whole layout).
MAX_EDIT_CELLS = 1 << 20
#: Largest block coordinate or diagonal offset a region may name (a grid is at most 2**16 wide).
MAX_COORD = MAX_BLOCKS
#: Cell lists longer than this are kept as a ``Bitmap`` (about 10 characters a cell as pairs).
COMPACT_CELLS = 4096
#: zlib level of a ``Bitmap``'s bits: on 8 MiB of scattered blocks (5 %) level 1 takes 0.18 s
#: and zlib's default 6 takes 1.3 s, for 11 % fewer bytes (one core, 2026-12-01).
DEFLATE_LEVEL = 1


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

    @property
    def array(self) -> np.ndarray:
        """The cells as a read-only int64 ``[n, 2]`` array of ``(row, col)``."""
        return self._index

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
    """``cells`` as a tuple of int pairs and as an int64 ``[n, 2]`` array, checked."""
    array = _cells_array(cells)
    kept = isinstance(cells, tuple) and set(map(type, cells)) == {tuple}
    if not kept or set(map(type, itertools.chain.from_iterable(cells))) != {int}:
        cells = tuple(map(tuple, array.tolist()))
    return cells, array


def _cells_array(cells: list | tuple) -> np.ndarray:
    """``cells`` as a checked int64 ``[n, 2]`` array of ``(row, col)``.

    Pairs of Python ints (what the editor and JSON files give) are checked all at once by numpy;
    anything else goes pair by pair, so a message always names the first bad coordinate.
    """
    try:
        plain = set(map(type, itertools.chain.from_iterable(cells))) == {int}
        array = np.array(cells) if plain else None
    except (TypeError, ValueError, OverflowError):  # a pair that is not a list, ragged, huge
        array = None
    if array is None or array.dtype.kind not in "iu" or array.shape != (len(cells), 2):
        pairs = [
            check_int_list(f"cells[{i}]", cell, low=0, high=MAX_COORD, min_len=2, max_len=2)
            for i, cell in enumerate(cells)
        ]
        return np.array(pairs, dtype=np.int64).reshape(-1, 2)
    bad = (array < 0) | (array > MAX_COORD)
    if bad.any():
        k, j = np.argwhere(bad)[0]
        check_int(f"cells[{k}][{j}]", int(array[k, j]), low=0, high=MAX_COORD)  # raises
    return array.astype(np.int64, copy=False)


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
    """The diagonals ``low <= row - col <= high`` (0 is the main diagonal, 1 the one below it),
    clipped to the grid."""

    low: int
    high: int
    kind: ClassVar[str] = "band"

    def __post_init__(self) -> None:
        low = check_int("band low", self.low, low=-MAX_COORD, high=MAX_COORD)
        high = check_int("band high", self.high, low=-MAX_COORD, high=MAX_COORD)
        if high < low:
            raise ValueError(
                f"band must have low <= high (offsets row - col), got low={low}, high={high}"
            )
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    @classmethod
    def legacy(cls, lo: int, hi: int) -> Band:
        """A version-1 band, ``lo <= col - row <= hi``, in today's offsets."""
        lo = check_int("band lo", lo, low=-MAX_COORD, high=MAX_COORD)
        hi = check_int("band hi", hi, low=-MAX_COORD, high=MAX_COORD)
        return cls(-hi, -lo)

    def mask(self, n_rows: int, n_cols: int) -> torch.Tensor:
        """Filled row by row: a grid-sized table of offsets would take 8 bytes a cell."""
        mask = torch.zeros(n_rows, n_cols, dtype=torch.bool)
        cells = mask.numpy()
        for row in range(max(0, self.low), min(n_rows, n_cols + self.high)):
            cells[row, max(0, row - self.high) : row - self.low + 1] = True
        return mask

    def index(self, n_rows: int, n_cols: int) -> tuple[Any, ...]:
        return (self.mask(n_rows, n_cols),)


@dataclass(frozen=True)
class Bitmap(_Region):
    """The set blocks of the ``rows x cols`` box whose top-left block is ``(row0, col0)``.

    ``deflated`` holds the box's blocks bit-packed row-major (``numpy.packbits``, the unused low
    bits of the last byte zero), deflated (zlib) and base64 encoded: what a file stores. A lasso
    of 0.9M blocks in a 2048 x 2048 grid is then a few KiB to 700 KB of text rather than 20 MB
    of ``[row, col]`` pairs, and 512 KiB in memory at most. At least one block must be set.

    >>> region = Bitmap.of(np.eye(3, dtype=bool), 2, 5)
    >>> region.rows, region.cols, int(region.mask(6, 9).sum())
    (3, 3, 3)
    """

    row0: int
    col0: int
    rows: int
    cols: int
    deflated: str
    kind: ClassVar[str] = "bitmap"

    def __post_init__(self) -> None:
        for name in ("row0", "col0"):
            object.__setattr__(self, name, check_int(name, getattr(self, name), low=0,
                                                     high=MAX_COORD))  # fmt: skip
        for name, corner in (("rows", self.row0), ("cols", self.col0)):
            object.__setattr__(self, name, check_int(name, getattr(self, name), low=1,
                                                     high=MAX_COORD + 1 - corner))  # fmt: skip
        if self.rows * self.cols > MAX_LAYOUT_CELLS:
            raise ValueError(
                f"bitmap must have at most {MAX_LAYOUT_CELLS:,} blocks, got {self.rows} x "
                f"{self.cols}"
            )
        self.__dict__["_packed"] = _inflated(self.deflated, self.rows * self.cols)

    @classmethod
    def of(cls, mask: np.ndarray, row0: int = 0, col0: int = 0) -> Bitmap | None:
        """The set blocks of a bool ``mask`` placed at ``(row0, col0)``, cropped to the box
        that holds them; None when none is set."""
        mask = np.asarray(mask, dtype=bool)
        rows, cols = np.any(mask, axis=1), np.any(mask, axis=0)
        if not rows.any():
            return None
        (r0, r1), (c0, c1) = (np.flatnonzero(rows)[[0, -1]], np.flatnonzero(cols)[[0, -1]])
        packed = np.packbits(mask[r0 : r1 + 1, c0 : c1 + 1], axis=None).tobytes()
        text = base64.b64encode(zlib.compress(packed, DEFLATE_LEVEL)).decode("ascii")
        return cls(int(row0 + r0), int(col0 + c0), int(r1 - r0 + 1), int(c1 - c0 + 1), text)

    @classmethod
    def of_cells(cls, cells: np.ndarray) -> Bitmap:
        """The blocks of an int ``[n, 2]`` array of ``(row, col)`` (at least one)."""
        low = cells.min(axis=0)
        mask = np.zeros(tuple(cells.max(axis=0) - low + 1), dtype=bool)
        mask[cells[:, 0] - low[0], cells[:, 1] - low[1]] = True
        return cls.of(mask, int(low[0]), int(low[1]))  # type: ignore[return-value]

    @property
    def box(self) -> tuple[slice, slice]:
        """The box's rows and columns, as slices of a grid."""
        return slice(self.row0, self.row0 + self.rows), slice(self.col0, self.col0 + self.cols)

    def box_mask(self) -> torch.Tensor:
        """The ``[rows, cols]`` bool blocks of the box."""
        bits = np.unpackbits(np.frombuffer(self.__dict__["_packed"], dtype=np.uint8),
                             count=self.rows * self.cols)  # fmt: skip
        return torch.from_numpy(bits.view(np.bool_).reshape(self.rows, self.cols))

    @functools.cached_property
    def count(self) -> int:
        """How many blocks are set."""
        packed = np.frombuffer(self.__dict__["_packed"], dtype=np.uint8)
        return int(np.bitwise_count(packed).sum(dtype=np.int64))

    def check_fits(self, n_rows: int, n_cols: int) -> None:
        if self.row0 + self.rows > n_rows or self.col0 + self.cols > n_cols:
            corner = (self.row0 + self.rows - 1, self.col0 + self.cols - 1)
            raise _outside("bitmap corner (row0 + rows - 1, col0 + cols - 1)", corner, n_rows,
                           n_cols)  # fmt: skip

    def mask(self, n_rows: int, n_cols: int) -> torch.Tensor:
        self.check_fits(n_rows, n_cols)
        mask = torch.zeros(n_rows, n_cols, dtype=torch.bool)
        mask[self.box] = self.box_mask()
        return mask

    def index(self, n_rows: int, n_cols: int) -> tuple[Any, ...]:
        return (self.mask(n_rows, n_cols),)


def _inflated(text: Any, n_cells: int) -> bytes:
    """The packed bits of ``n_cells`` blocks from a ``Bitmap``'s text, every byte checked:
    the work is bounded by the box, whatever the text claims."""
    if not isinstance(text, str):
        raise TypeError(f"bitmap deflated must be a base64 string, got {type(text).__name__}")
    need = -(-n_cells // 8)
    most = 4 * ((need + need // 1000 + 64 + 2) // 3) + 4  # zlib's worst case, in base64
    if len(text) > most:
        raise ValueError(
            f"bitmap deflated must be at most {most:,} characters for {n_cells:,} blocks, "
            f"got {len(text):,}"
        )
    try:
        inflater = zlib.decompressobj()
        packed = inflater.decompress(base64.b64decode(text, validate=True), need + 1)
    except (binascii.Error, ValueError, zlib.error) as error:
        raise ValueError(f"bitmap deflated is not base64 of zlib data: {error}") from None
    if len(packed) != need or not inflater.eof or inflater.unconsumed_tail:
        raise ValueError(
            f"bitmap bits must be {need:,} bytes for {n_cells:,} blocks, got "
            f"{len(packed):,}{' or more' if not inflater.eof else ''}"
        )
    last = packed[-1] & (0xFF >> (n_cells % 8 or 8)) if packed else 0
    if last:
        raise ValueError("bitmap bits past the last block must be 0")
    if packed.count(0) == len(packed):
        raise ValueError("bitmap must set at least one block")
    return packed


Region = Cells | Rect | Row | Column | Band | Bitmap
REGIONS: dict[str, type] = {
    region.kind: region for region in (Cells, Rect, Row, Column, Band, Bitmap)
}


def region_from_dict(data: Any) -> Region:
    """Read a region written by ``region.to_dict()``, checking every key and value."""
    every_key = {f.name for region in REGIONS.values() for f in fields(region)} | {"lo", "hi"}
    check_keys("region", data, ("kind",), every_key)
    kind = check_choice("region kind", data["kind"], tuple(REGIONS))
    if kind == "band" and "lo" in data:  # version 1: col - row
        check_keys("band region", data, ("kind", "lo", "hi"))
        return Band.legacy(data["lo"], data["hi"])
    names = [f.name for f in fields(REGIONS[kind])]
    check_keys(f"{kind} region", data, ("kind", *names))
    cells = data.get("cells")
    if kind == "cells" and isinstance(cells, list) and COMPACT_CELLS < len(cells) <= MAX_EDIT_CELLS:
        return Bitmap.of_cells(_cells_array(cells))  # what a recipe keeps: no pairs made
    return REGIONS[kind](**{name: data[name] for name in names})
