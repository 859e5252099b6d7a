"""What the paint canvas sends: numbered strokes from one canvas, checked and decoded.

Pure numpy, no Streamlit. The canvas's trigger value is ``{"client": id, "strokes": [...]}``:
``client`` names the canvas (a random id per page), ``strokes`` are every stroke it has drawn
and not yet seen done, numbered ``seq`` 1, 2, 3, ... in the order drawn, oldest first. A stroke
is a paint (its head, action, the heads it applies to and its region: ``rect``, ``row``,
``column``, ``band``, or ``mask``: a bit-packed box of cells) or an undo/redo.

``read_trigger`` checks the whole value before any of it is used. What would make the numbering
untrustworthy (no client, a bad or repeated number, too many strokes, masks past the size
budget) raises ``ValueError``/``TypeError`` and nothing is done. A stroke that is numbered
right but whose contents are wrong becomes an ``Unreadable``: done (it is not sent again), with
its reason, so the strokes after it still apply in order.

>>> trigger = read_trigger(
...     {"client": "tab-0001", "strokes": [{"seq": 1, "op": "undo"}]}, 1, 4, 4)
>>> trigger.client, trigger.strokes
('tab-0001', ((1, Step(back=True)),))
"""

from __future__ import annotations

import base64
import binascii
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from designer.edit import (
    ACTIONS,
    Bitmap,
    Cells,
    Rect,
    Region,
    check_heads,
    fit_heads,
    region_from_dict,
)
from designer.regions import COMPACT_CELLS
from designer.validate import capped, check_choice, check_int, check_keys, shown

#: Regions the canvas sends as their own kind; ``mask`` carries any other set of cells.
PAINT_KINDS = ("rect", "row", "column", "band", "mask")
#: Most strokes one trigger may carry (the canvas sends the rest in its next trigger).
MAX_STROKES = 64
#: Largest stroke number (the largest integer a JavaScript number holds exactly).
MAX_SEQ = (1 << 53) - 1
#: How a canvas names itself: a random id, so numbers from two canvases never mix.
CLIENT_ID = re.compile(r"[A-Za-z0-9_-]{8,32}")


@dataclass(frozen=True)
class Mask:
    """The painted cells of a ``mask`` stroke: a bool ``cells`` box placed at ``(row0, col0)``.

    Kept as an array until the stroke is applied, so its cost is known (``count``) before any
    per-cell region is built.
    """

    row0: int
    col0: int
    cells: np.ndarray = field(repr=False, compare=False)

    @property
    def count(self) -> int:
        return int(np.count_nonzero(self.cells))

    def region(self) -> Region:
        """The smallest edit region of these cells (see ``mask_region``)."""
        made = mask_region(self.cells, self.row0, self.col0)
        if made is None:
            raise ValueError("mask selects no cells")
        return made


@dataclass(frozen=True)
class Paint:
    """One stroke: ``action`` on ``region`` drawn on ``head``, applied to ``heads`` (None: all)."""

    head: int
    action: str
    region: Region | Mask
    heads: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Step:
    """Undo (``back``) or redo, asked for from the keyboard or the toolbar."""

    back: bool


@dataclass(frozen=True)
class Unreadable:
    """A stroke numbered right whose contents could not be read: done, and why not applied."""

    reason: str


Stroke = Paint | Step | Unreadable


@dataclass(frozen=True)
class Trigger:
    """A canvas's strokes, ``(seq, stroke)`` oldest first, numbered one after another."""

    client: str
    strokes: tuple[tuple[int, Stroke], ...]


def read_trigger(data: Any, n_heads: int, n_rows: int, n_cols: int) -> Trigger:
    """Check and decode a trigger value for a layout of ``n_heads`` heads of ``n_rows x n_cols``
    blocks (see the module docstring for what raises and what becomes ``Unreadable``)."""
    check_keys("canvas edit", data, ("client", "strokes"))
    client = data["client"]
    if not isinstance(client, str) or not CLIENT_ID.fullmatch(client):
        raise ValueError(f"canvas edit client must be 8 to 32 letters, digits, '-' or '_', got "
                         f"{shown(client)}")  # fmt: skip
    strokes = data["strokes"]
    if not isinstance(strokes, list) or not 1 <= len(strokes) <= MAX_STROKES:
        count = len(strokes) if isinstance(strokes, list) else type(strokes).__name__
        raise ValueError(f"canvas edit strokes must be a list of 1 to {MAX_STROKES}, got {count}")
    budget = 2 * bits_chars(n_rows * n_cols)  # two whole-grid masks: bounded time and memory
    chars = sum(len(s["region"].get("bits", "")) for s in strokes if _has_bits(s))
    if chars > budget:
        raise ValueError(
            f"canvas edit masks must total at most {budget:,} base64 characters for this grid, "
            f"got {chars:,}"
        )
    seqs = [_read_seq(i, stroke) for i, stroke in enumerate(strokes)]
    if any(b != a + 1 for a, b in itertools.pairwise(seqs)):
        raise ValueError(f"canvas edit strokes must be numbered one after another, got "
                         f"{capped(str(seqs), 120)}")  # fmt: skip
    read = tuple(
        (seq, _read_stroke(stroke, n_heads, n_rows, n_cols))
        for seq, stroke in zip(seqs, strokes, strict=True)
    )
    return Trigger(client, read)


def _read_seq(index: int, stroke: Any) -> int:
    if not isinstance(stroke, dict):
        raise TypeError(f"strokes[{index}] must be a dict, got {type(stroke).__name__}")
    return check_int(f"strokes[{index}] seq", stroke.get("seq"), low=1, high=MAX_SEQ)


def _read_stroke(data: dict, n_heads: int, n_rows: int, n_cols: int) -> Stroke:
    try:
        return read_stroke(data, n_heads, n_rows, n_cols)
    except (ValueError, TypeError) as error:
        return Unreadable(capped(str(error), 200))


def read_stroke(data: Any, n_heads: int, n_rows: int, n_cols: int) -> Paint | Step:
    """Check and decode one stroke's contents (its ``seq`` is read by ``read_trigger``)."""
    check_keys("stroke", data, ("seq", "op"), ("head", "action", "heads", "region"))
    op = check_choice("stroke op", data["op"], ("paint", "undo", "redo"))
    if op != "paint":
        check_keys(f"{op} stroke", data, ("seq", "op"))
        return Step(back=op == "undo")
    check_keys("paint stroke", data, ("seq", "op", "head", "action", "heads", "region"))
    head = check_int("stroke head", data["head"], low=0, high=n_heads - 1)
    action = check_choice("stroke action", data["action"], ACTIONS)
    heads = None if data["heads"] is None else check_heads("stroke heads", data["heads"])
    fit_heads("stroke heads", heads or (), n_heads)
    region = data["region"]
    if not isinstance(region, dict):
        raise TypeError(f"stroke region must be a dict, got {type(region).__name__}")
    kind = check_choice("stroke region kind", region.get("kind"), PAINT_KINDS)
    if kind == "mask":
        return Paint(head, action, _read_mask(region, n_rows, n_cols), heads)
    made = region_from_dict(region)
    made.check_fits(n_rows, n_cols)
    return Paint(head, action, made, heads)


def _has_bits(stroke: Any) -> bool:
    return (
        isinstance(stroke, dict)
        and isinstance(stroke.get("region"), dict)
        and isinstance(stroke["region"].get("bits"), str)
    )


def bits_chars(n_cells: int) -> int:
    """Base64 characters of ``n_cells`` bit-packed cells."""
    n_bytes = (n_cells + 7) // 8
    return 4 * ((n_bytes + 2) // 3)


def _read_mask(region: dict[str, Any], n_rows: int, n_cols: int) -> Mask:
    """A ``mask`` region: the cells of a ``rows x cols`` box at ``(row0, col0)``, bit-packed
    row-major and base64 encoded (not deflated: the canvas sends it as it draws)."""
    check_keys("mask region", region, ("kind", "row0", "col0", "rows", "cols", "bits"))
    row0 = check_int("mask row0", region["row0"], low=0, high=n_rows - 1)
    col0 = check_int("mask col0", region["col0"], low=0, high=n_cols - 1)
    rows = check_int("mask rows", region["rows"], low=1, high=n_rows - row0)
    cols = check_int("mask cols", region["cols"], low=1, high=n_cols - col0)
    bits = region["bits"]
    if not isinstance(bits, str):
        raise TypeError(f"mask bits must be a base64 string, got {type(bits).__name__}")
    expected = bits_chars(rows * cols)
    if len(bits) != expected:
        raise ValueError(
            f"mask bits must be {expected} base64 characters for {rows} x {cols} cells, "
            f"got {len(bits)}"
        )
    try:
        packed = np.frombuffer(base64.b64decode(bits, validate=True), dtype=np.uint8)
    except (binascii.Error, ValueError) as error:
        raise ValueError(f"mask bits are not valid base64: {error}") from None
    cells = np.unpackbits(packed, count=rows * cols).view(bool).reshape(rows, cols)
    if not cells.any():
        raise ValueError("mask selects no cells")
    return Mask(row0, col0, cells)


def mask_region(mask: np.ndarray, row0: int = 0, col0: int = 0) -> Region | None:
    """The smallest edit region for a bool mask placed at ``(row0, col0)``: a ``Rect`` when it
    is one, else ``Cells`` of a few blocks or a ``Bitmap`` of many (a lasso of any size); None
    when it selects nothing.

    >>> mask_region(np.eye(2, dtype=bool), 5, 0)
    Cells(cells=((5, 0), (6, 1)))
    """
    count = int(np.count_nonzero(mask))
    if count == 0:
        return None
    rows_with, cols_with = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    r0, r1, c0, c1 = rows_with[0], rows_with[-1], cols_with[0], cols_with[-1]
    if count == (r1 - r0 + 1) * (c1 - c0 + 1):  # a box: no per-cell index is ever built
        return Rect(int(r0 + row0), int(c0 + col0), int(r1 + row0), int(c1 + col0))
    if count > COMPACT_CELLS:
        return Bitmap.of(mask, row0, col0)
    rows, cols = np.nonzero(mask)
    return Cells(tuple(zip((rows + row0).tolist(), (cols + col0).tolist(), strict=True)))
