"""Manual edits of a layout, as values: set, clear or toggle a region of some heads, copy a head.

An edit is a frozen value rather than a function call so that a design's recipe can replay it, an
undo history can hold it and a file can carry it (``to_dict`` / ``edit_from_dict``). Regions are
given in block coordinates ``(row, col)`` = ``(query block, key block)``:

- ``Cells(((r, c), ...))``: the listed blocks;
- ``Rect(row0, col0, row1, col1)``: the box between two corners, both included;
- ``Row(row)`` / ``Column(col)``: one whole row or column;
- ``Band(lo, hi)``: the diagonals ``lo <= col - row <= hi``, clipped to the grid.

>>> layout = Layout.zeros(2, 4, 4, 16)
>>> apply_edit(layout, EditOp("set", Band(-1, 0), heads=(1,))).blocks.sum(dim=(1, 2)).tolist()
[0, 7]
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

import numpy as np
import torch

from designer.layout import Layout
from designer.validate import (
    MAX_BLOCKS,
    MAX_HEADS,
    check_choice,
    check_int,
    check_int_list,
    check_keys,
)

#: What an ``EditOp`` does to the blocks of its region.
ACTIONS = ("set", "clear", "toggle")
#: Most blocks one ``Cells`` region may list (a painted selection, never a whole layout).
MAX_EDIT_CELLS = 1 << 20
#: Largest block coordinate or diagonal offset an edit may name (a grid is at most 2**16 wide).
MAX_COORD = MAX_BLOCKS
#: Largest head index an edit may name.
MAX_HEAD = MAX_HEADS - 1

Shape = tuple[int, int, int]


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
        offset = torch.arange(n_cols)[None, :] - torch.arange(n_rows)[:, None]
        return (offset >= self.lo) & (offset <= self.hi)


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


# --------------------------------------------------------------------------- edit operations
def check_heads(name: str, heads: Any) -> tuple[int, ...]:
    """Return ``heads`` as a tuple of distinct head indices (at least one)."""
    values = check_int_list(name, heads, low=0, high=MAX_HEAD, min_len=1, max_len=MAX_HEAD + 1)
    if len(set(values)) != len(values):
        raise ValueError(f"{name} must not repeat a head, got {values}")
    return tuple(values)


def fit_heads(name: str, heads: tuple[int, ...], n_heads: int) -> None:
    """Raise naming the first of ``heads`` that a layout of ``n_heads`` heads does not have."""
    for i, head in enumerate(heads):
        if head >= n_heads:
            raise ValueError(
                f"{name}[{i}] = {head} is outside the layout's {n_heads} heads (0..{n_heads - 1})"
            )


@dataclass(frozen=True)
class EditOp:
    """Set, clear or toggle the blocks of ``region`` in ``heads`` (``None``: every head)."""

    action: str
    region: Region
    heads: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        check_choice("action", self.action, ACTIONS)
        if not isinstance(self.region, tuple(REGIONS.values())):
            raise TypeError(
                f"region must be a {', '.join(r.__name__ for r in REGIONS.values())}, "
                f"got {type(self.region).__name__}"
            )
        if self.heads is not None:
            object.__setattr__(self, "heads", check_heads("heads", self.heads))

    def output_shape(self, shape: Shape) -> Shape:
        """The layout shape after this edit; raises if the edit does not fit ``shape``."""
        fit_heads("heads", self.heads or (), shape[0])
        self.region.check_fits(shape[1], shape[2])
        return shape

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": "edit",
            "action": self.action,
            "region": self.region.to_dict(),
            "heads": None if self.heads is None else list(self.heads),
        }


@dataclass(frozen=True)
class CopyHead:
    """Copy every block of head ``source`` onto each of the ``targets`` heads."""

    source: int
    targets: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "source", check_int("source", self.source, low=0, high=MAX_HEAD))
        object.__setattr__(self, "targets", check_heads("targets", self.targets))

    def output_shape(self, shape: Shape) -> Shape:
        """The layout shape after this edit; raises if a head is outside ``shape``."""
        fit_heads("source", (self.source,), shape[0])
        fit_heads("targets", self.targets, shape[0])
        return shape

    def to_dict(self) -> dict[str, Any]:
        return {"op": "copy_head", "source": self.source, "targets": list(self.targets)}


@dataclass(frozen=True)
class Transpose:
    """Swap query and key blocks in every head (``[H, M, N]`` becomes ``[H, N, M]``)."""

    def output_shape(self, shape: Shape) -> Shape:
        return (shape[0], shape[2], shape[1])

    def to_dict(self) -> dict[str, Any]:
        return {"op": "transpose"}


Edit = EditOp | CopyHead | Transpose


def apply_edit(layout: Layout, op: Edit) -> Layout:
    """Return a new layout with ``op`` applied; ``layout`` itself never changes.

    >>> one = apply_edit(Layout.zeros(1, 2, 3, 16), EditOp("set", Rect(0, 1, 1, 2)))
    >>> one.blocks[0].int().tolist()
    [[0, 1, 1], [0, 1, 1]]
    """
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a Layout, got {type(layout).__name__}")
    if not isinstance(op, (EditOp, CopyHead, Transpose)):
        raise TypeError(f"op must be an EditOp, CopyHead or Transpose, got {type(op).__name__}")
    op.output_shape(layout.shape)
    if isinstance(op, Transpose):
        return layout.transpose()
    if isinstance(op, CopyHead):
        return layout.with_heads(list(op.targets), layout.select_heads([op.source]))
    mask = op.region.mask(layout.n_q_blocks, layout.n_k_blocks)
    heads = list(range(layout.n_heads)) if op.heads is None else list(op.heads)
    blocks = layout.blocks.clone()
    if op.action == "set":
        blocks[heads] |= mask
    elif op.action == "clear":
        blocks[heads] &= ~mask
    else:
        blocks[heads] ^= mask
    return Layout(blocks, layout.block_size)


def edit_from_dict(data: Any) -> Edit:
    """Read an edit written by ``op.to_dict()``, checking every key and value.

    >>> edit_from_dict({"op": "copy_head", "source": 0, "targets": [1, 2]})
    CopyHead(source=0, targets=(1, 2))
    """
    check_keys("edit", data, ("op",), ("action", "region", "heads", "source", "targets"))
    kind = check_choice("edit op", data["op"], ("edit", "copy_head", "transpose"))
    if kind == "edit":
        check_keys("edit", data, ("op", "action", "region", "heads"))
        return EditOp(data["action"], region_from_dict(data["region"]), data["heads"])
    if kind == "copy_head":
        check_keys("copy_head edit", data, ("op", "source", "targets"))
        return CopyHead(data["source"], data["targets"])
    check_keys("transpose edit", data, ("op",))
    return Transpose()
