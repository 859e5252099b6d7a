"""Manual edits of a layout, as values: set, clear or toggle a region of some heads, copy a head.

An edit is a frozen value rather than a function call so that a design's recipe can replay it, an
undo history can hold it and a file can carry it (``to_dict`` / ``edit_from_dict``). Regions are
given in block coordinates ``(row, col)`` = ``(query block, key block)``, and act on whole
blocks: a partial block painted ``set`` becomes full, ``clear`` empty, and ``toggle`` (it is
active) empty too; each is one edit, and the token masks of the blocks an edit does not touch
stay as they are. A ``CopyHead`` copies a head's partial blocks with it, a ``Transpose``
transposes them. Regions:

- ``Cells(((r, c), ...))``: the listed blocks;
- ``Rect(row0, col0, row1, col1)``: the box between two corners, both included;
- ``Row(row)`` / ``Column(col)``: one whole row or column;
- ``Band(low, high)``: the diagonals ``low <= row - col <= high``, clipped to the grid;
- ``Bitmap``: the set blocks of a bit-packed box (``Bitmap.of(mask, row0, col0)``).

>>> layout = Layout.zeros(2, 4, 4, 16)
>>> apply_edit(layout, EditOp("set", Band(0, 1), heads=(1,))).blocks.sum(dim=(1, 2)).tolist()
[0, 7]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from designer.edit_runs import apply_edit_runs
from designer.layout import Layout
from designer.partials import drop_cells, head_map, transposed
from designer.regions import (
    MAX_EDIT_CELLS,
    REGIONS,
    Band,
    Bitmap,
    Cells,
    Column,
    Rect,
    Region,
    Row,
    region_from_dict,
)
from designer.validate import MAX_HEADS, check_choice, check_int, check_int_list, check_keys

__all__ = [
    "ACTIONS",
    "MAX_EDIT_CELLS",
    "Band",
    "Bitmap",
    "Cells",
    "Column",
    "CopyHead",
    "Edit",
    "EditOp",
    "Rect",
    "Region",
    "Row",
    "Transpose",
    "apply_edit",
    "check_heads",
    "edit_from_dict",
    "edited_partials",
    "fit_heads",
    "region_from_dict",
]

#: What an ``EditOp`` does to the blocks of its region.
ACTIONS = ("set", "clear", "toggle")
#: Largest head index an edit may name.
MAX_HEAD = MAX_HEADS - 1

Shape = tuple[int, int, int]


# --------------------------------------------------------------------------- edit operations
def check_heads(name: str, heads: Any) -> tuple[int, ...]:
    """Return ``heads`` as a tuple of distinct head indices (at least one)."""
    values = check_int_list(name, heads, low=0, high=MAX_HEAD, min_len=1, max_len=MAX_HEAD + 1)
    if len(set(values)) != len(values):
        raise ValueError(f"{name} must not repeat a head, got {values}")
    return tuple(values)


def fit_heads(name: str, heads: tuple[int, ...], n_heads: int) -> None:
    """Raise naming the first of ``heads`` that a layout of ``n_heads`` heads does not have."""
    if not heads or max(heads) < n_heads:  # max at C speed: a head list may hold 1,024
        return
    i = next(i for i, head in enumerate(heads) if head >= n_heads)
    raise ValueError(
        f"{name}[{i}] = {heads[i]} is outside the layout's {n_heads} heads (0..{n_heads - 1})"
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
    if layout.runs is not None:  # past the dense grid: painted on its runs
        return apply_edit_runs(layout, op)
    mask = op.region.mask(layout.n_q_blocks, layout.n_k_blocks)
    heads = list(range(layout.n_heads)) if op.heads is None else list(op.heads)
    blocks = layout.blocks.clone()
    if op.action == "set":
        blocks[heads] |= mask
    elif op.action == "clear":
        blocks[heads] &= ~mask
    else:
        blocks[heads] ^= mask
    partials = drop_cells(layout.partials, op.heads, mask)
    return Layout(blocks, layout.block_size, partials, layout.seq_q, layout.seq_k)


def edited_partials(partials, op: Edit, shape: Shape, block_size: int):
    """The partial blocks after ``op`` on a layout of ``shape`` (see the module docstring)."""
    if partials is None:
        return None
    if isinstance(op, Transpose):
        return transposed(partials)
    if isinstance(op, CopyHead):
        sources: list[int | None] = [None] * shape[0]
        for target in op.targets:
            sources[target] = op.source
        return head_map(partials, sources, partials, block_size)
    return drop_cells(partials, op.heads, op.region.mask(shape[1], shape[2]))


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
