"""What the paint canvas and Python send each other: compact head payloads and checked edits.

Pure numpy, no Streamlit. Python sends the canvas one head (``head_payload``):

- ``cells``: the head's blocks, bit-packed row-major (``np.packbits``), deflated, base64;
- ``codes``: each block's tile as one byte, run-length encoded (values then ``<u4`` lengths),
  deflated, base64. Code 0 is no tile; ``k`` is ``widths[k - 1]``; +128 marks an odd tile (drawn
  darker). When the runs would pass ``MAX_CODE_BYTES`` the codes are max-pooled ``codes_scale``
  times per side first (huge heads of scattered single blocks), and the readout says so.

The canvas sends back its strokes (``read_strokes``): each a paint with its action and region
(``rect``, ``row``, ``column``, ``band``, or ``mask``: a bit-packed box of cells), or undo/redo.
Everything it sends is checked before any of it is used: a malformed or oversized edit raises a
``ValueError``/``TypeError`` naming what is wrong and changes nothing.

>>> eye = np.eye(3, dtype=bool)
>>> read_head(head_payload(eye, eye.astype(np.uint16), ~eye))[0].astype(int).tolist()
[[1, 0, 0], [0, 1, 0], [0, 0, 1]]
"""

from __future__ import annotations

import base64
import binascii
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from designer.edit import ACTIONS, Bitmap, Cells, Rect, Region, region_from_dict
from designer.regions import COMPACT_CELLS
from designer.segment_stats import UNTILED
from designer.validate import check_choice, check_int, check_keys
from ui.pictures import ALTERNATE_SHADE, EMPTY_RGB, max_pool, width_colour

#: Most bytes of run-length tile codes sent for one head before they are downsampled.
MAX_CODE_BYTES = 1 << 20
#: The odd-tile flag in a tile code.
ODD_FLAG = 128
#: Regions the canvas sends as their own kind; ``mask`` carries any other set of cells.
PAINT_KINDS = ("rect", "row", "column", "band", "mask")
#: Most strokes one trigger may carry (those drawn while Python was busy).
MAX_STROKES = 64
#: Largest stroke number (the largest integer a JavaScript number holds exactly).
MAX_SEQ = (1 << 53) - 1


# --------------------------------------------------------------------------- Python → canvas
def head_payload(blocks: np.ndarray, widths: np.ndarray, odd: np.ndarray) -> dict[str, Any]:
    """The canvas's data for one head: ``blocks`` ``[M, N]`` bool, its tiles' ``widths``
    (uint, 0 where inactive, ``UNTILED`` where active but in no tile) and ``odd`` flags. Colours
    are the pictures' palette; blocks in no tile are drawn like active blocks."""
    n_rows, n_cols = blocks.shape
    table = np.unique(widths[(widths > 0) & (widths != UNTILED)])  # active in no tile: code 0
    if len(table) >= ODD_FLAG:
        raise ValueError(f"a head may have at most {ODD_FLAG - 1} tile widths, got {len(table)}")
    code_of_width = np.zeros(int(widths.max(initial=0)) + 1, dtype=np.uint8)
    code_of_width[table] = np.arange(1, len(table) + 1)
    scale = 1
    while True:
        codes = code_of_width[max_pool(widths, scale)].ravel()
        codes |= max_pool(odd, scale).ravel().view(np.uint8) << 7  # ODD_FLAG
        n_runs = 1 + np.count_nonzero(codes[1:] != codes[:-1])
        if 5 * n_runs <= MAX_CODE_BYTES or scale >= max(n_rows, n_cols):
            break
        scale *= 2
    runs = _run_lengths(codes)
    return {
        "rows": n_rows,
        "cols": n_cols,
        "cells": _pack(np.packbits(blocks.astype(bool, copy=False), axis=None).tobytes()),
        "codes": _pack(runs),
        "codes_scale": scale,
        "widths": table.tolist(),
        "colours": [width_colour(w) for w in table.tolist()],
        "dark": [_shade(width_colour(w)) for w in table.tolist()],
        "empty": "#{:02x}{:02x}{:02x}".format(*EMPTY_RGB),
    }


def read_head(payload: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Decode ``head_payload``: ``(blocks [M, N] bool, codes [M/s, N/s] uint8)`` (for tests and
    as the reference the canvas's decoder follows)."""
    n_rows, n_cols, scale = payload["rows"], payload["cols"], payload["codes_scale"]
    bits = np.frombuffer(_unpack(payload["cells"]), dtype=np.uint8)
    blocks = np.unpackbits(bits, count=n_rows * n_cols).astype(bool).reshape(n_rows, n_cols)
    runs = np.frombuffer(_unpack(payload["codes"]), dtype=np.uint8)
    n_runs = len(runs) // 5
    values, lengths = runs[:n_runs], runs[n_runs:].view("<u4")
    codes = np.repeat(values, lengths).reshape(-(-n_rows // scale), -(-n_cols // scale))
    return blocks, codes


def payload_bytes(payload: dict[str, Any]) -> int:
    """What a payload weighs on the wire: its base64 strings plus a little for the rest."""
    return sum(len(v) if isinstance(v, str) else len(repr(v)) for v in payload.values())


def _run_lengths(values: np.ndarray) -> bytes:
    """``values`` (uint8) as its runs: every run's value, then every run's length as ``<u4``."""
    if not len(values):
        return b""
    starts = np.flatnonzero(values[1:] != values[:-1]) + 1
    starts = np.concatenate([[0], starts])
    lengths = np.diff(np.concatenate([starts, [len(values)]])).astype("<u4")
    return values[starts].tobytes() + lengths.tobytes()


def _pack(raw: bytes) -> str:
    return base64.b64encode(zlib.compress(raw, 1)).decode("ascii")


def _unpack(text: str) -> bytes:
    return zlib.decompress(base64.b64decode(text))


def _shade(hex_colour: str) -> str:
    value = int(hex_colour.lstrip("#"), 16)
    rgb = [int(((value >> s) & 255) * ALTERNATE_SHADE) for s in (16, 8, 0)]
    return "#{:02x}{:02x}{:02x}".format(*rgb)


# --------------------------------------------------------------------------- canvas → Python
@dataclass(frozen=True)
class Paint:
    """One stroke: ``action`` on ``region`` of the head the canvas showed."""

    head: int
    action: str
    region: Region


@dataclass(frozen=True)
class Step:
    """Undo (``back``) or redo, asked for from the keyboard."""

    back: bool


def read_strokes(
    data: Any, n_heads: int, n_rows: int, n_cols: int, *, applied: int
) -> list[tuple[int, Paint | Step]]:
    """Check and decode the canvas's trigger value: its strokes not applied yet, oldest first.

    ``data`` is ``{"strokes": [...]}``: every stroke the canvas has sent and not seen applied,
    each numbered (``seq``) in the order drawn; those up to ``applied`` are skipped. A paint must
    fit a grid of ``n_rows × n_cols`` blocks in a layout of ``n_heads`` heads. All strokes are
    checked before any is returned, so a bad one changes nothing.
    """
    check_keys("canvas edit", data, ("strokes",))
    strokes = data["strokes"]
    if not isinstance(strokes, list) or not 1 <= len(strokes) <= MAX_STROKES:
        count = len(strokes) if isinstance(strokes, list) else type(strokes).__name__
        raise ValueError(f"canvas edit strokes must be a list of 1 to {MAX_STROKES}, got {count}")
    budget = 2 * _bits_chars(n_rows * n_cols)  # two whole-grid masks: bounded time and memory
    chars = sum(len(s["region"].get("bits", "")) for s in strokes if _has_bits(s))
    if chars > budget:
        raise ValueError(
            f"canvas edit masks must total at most {budget:,} base64 characters for this grid, "
            f"got {chars:,}"
        )
    read = [read_stroke(stroke, n_heads, n_rows, n_cols) for stroke in strokes]
    seqs = [seq for seq, _ in read]
    if seqs != sorted(set(seqs)):
        raise ValueError(f"canvas edit strokes must be numbered in increasing order, got {seqs}")
    return [(seq, stroke) for seq, stroke in read if seq > applied]


def newest_seq(data: Any, default: int) -> int:
    """The highest stroke number in a trigger value that may be malformed (``default`` if none),
    so a stroke that could not be read is not sent again."""
    strokes = data.get("strokes") if isinstance(data, dict) else None
    if not isinstance(strokes, list):
        return default
    seqs = [s.get("seq") for s in strokes if isinstance(s, dict)]
    return max([default, *(v for v in seqs if isinstance(v, int) and not isinstance(v, bool))])


def read_stroke(data: Any, n_heads: int, n_rows: int, n_cols: int) -> tuple[int, Paint | Step]:
    """Check and decode one stroke: ``(seq, Paint or Step)``."""
    check_keys("stroke", data, ("seq", "op"), ("head", "action", "region"))
    seq = check_int("stroke seq", data["seq"], low=1, high=MAX_SEQ)
    op = check_choice("stroke op", data["op"], ("paint", "undo", "redo"))
    if op != "paint":
        check_keys(f"{op} stroke", data, ("seq", "op"))
        return seq, Step(back=op == "undo")
    check_keys("paint stroke", data, ("seq", "op", "head", "action", "region"))
    head = check_int("stroke head", data["head"], low=0, high=n_heads - 1)
    action = check_choice("stroke action", data["action"], ACTIONS)
    region = data["region"]
    if not isinstance(region, dict):
        raise TypeError(f"stroke region must be a dict, got {type(region).__name__}")
    kind = check_choice("stroke region kind", region.get("kind"), PAINT_KINDS)
    made = _read_mask(region, n_rows, n_cols) if kind == "mask" else region_from_dict(region)
    made.check_fits(n_rows, n_cols)
    return seq, Paint(head, action, made)


def _has_bits(stroke: Any) -> bool:
    return (
        isinstance(stroke, dict)
        and isinstance(stroke.get("region"), dict)
        and isinstance(stroke["region"].get("bits"), str)
    )


def _bits_chars(n_cells: int) -> int:
    """Base64 characters of ``n_cells`` bit-packed cells."""
    n_bytes = (n_cells + 7) // 8
    return 4 * ((n_bytes + 2) // 3)


def _read_mask(region: dict[str, Any], n_rows: int, n_cols: int) -> Region:
    """A ``mask`` region: the cells of a ``rows × cols`` box at ``(row0, col0)``, bit-packed
    row-major and base64 encoded (not deflated: the canvas sends it as it draws)."""
    check_keys("mask region", region, ("kind", "row0", "col0", "rows", "cols", "bits"))
    row0 = check_int("mask row0", region["row0"], low=0, high=n_rows - 1)
    col0 = check_int("mask col0", region["col0"], low=0, high=n_cols - 1)
    rows = check_int("mask rows", region["rows"], low=1, high=n_rows - row0)
    cols = check_int("mask cols", region["cols"], low=1, high=n_cols - col0)
    bits = region["bits"]
    if not isinstance(bits, str):
        raise TypeError(f"mask bits must be a base64 string, got {type(bits).__name__}")
    expected = _bits_chars(rows * cols)
    if len(bits) != expected:
        raise ValueError(
            f"mask bits must be {expected} base64 characters for {rows} x {cols} cells, "
            f"got {len(bits)}"
        )
    try:
        packed = np.frombuffer(base64.b64decode(bits, validate=True), dtype=np.uint8)
    except (binascii.Error, ValueError) as error:
        raise ValueError(f"mask bits are not valid base64: {error}") from None
    mask = np.unpackbits(packed, count=rows * cols).astype(bool).reshape(rows, cols)
    region_made = mask_region(mask, row0, col0)
    if region_made is None:
        raise ValueError("mask selects no cells")
    return region_made


def mask_region(mask: np.ndarray, row0: int = 0, col0: int = 0) -> Region | None:
    """The smallest edit region for a bool mask placed at ``(row0, col0)``: a ``Rect`` when it
    is one, else ``Cells`` of a few blocks or a ``Bitmap`` of many (a lasso of any size); None
    when it selects nothing.

    >>> mask_region(np.eye(2, dtype=bool), 5, 0)
    Cells(cells=((5, 0), (6, 1)))
    """
    rows, cols = np.nonzero(mask)
    if len(rows) == 0:
        return None
    r0, r1, c0, c1 = rows.min(), rows.max(), cols.min(), cols.max()
    if len(rows) == (r1 - r0 + 1) * (c1 - c0 + 1):
        return Rect(int(r0 + row0), int(c0 + col0), int(r1 + row0), int(c1 + col0))
    if len(rows) > COMPACT_CELLS:
        return Bitmap.of(mask, row0, col0)
    return Cells(tuple(zip((rows + row0).tolist(), (cols + col0).tolist(), strict=True)))
