"""What Python sends the paint canvas: one head as compact payloads (``strokes`` reads what
comes back).

Pure numpy, no Streamlit. Python sends the canvas one head (``head_payload``):

- ``cells``: the head's blocks, bit-packed row-major (``np.packbits``), deflated, base64;
- ``partial``: the head's partial blocks (a token mask inside), bit-packed and deflated as
  ``cells`` (``""`` when it has none): the canvas draws them lighter, hatched when zoomed in;
- ``codes``: each block's tile as one byte, run-length encoded (values then ``<u4`` lengths),
  deflated, base64. Code 0 is no tile; ``k`` is ``widths[k - 1]``; +128 marks an odd tile (drawn
  darker). When the runs would pass ``MAX_CODE_BYTES`` the codes are max-pooled ``codes_scale``
  times per side first (huge heads of scattered single blocks), and the readout says so.

>>> eye = np.eye(3, dtype=bool)
>>> read_head(head_payload(eye, eye.astype(np.uint16), ~eye))[0].astype(int).tolist()
[[1, 0, 0], [0, 1, 0], [0, 0, 1]]
"""

from __future__ import annotations

import base64
import zlib
from typing import Any

import numpy as np

from designer.segment_stats import UNTILED
from ui.pictures import ALTERNATE_SHADE, EMPTY_RGB, max_pool, width_colour

#: Most bytes of run-length tile codes sent for one head before they are downsampled.
MAX_CODE_BYTES = 1 << 20
#: The odd-tile flag in a tile code.
ODD_FLAG = 128


def head_payload(
    blocks: np.ndarray, widths: np.ndarray, odd: np.ndarray, partial: np.ndarray | None = None
) -> dict[str, Any]:
    """The canvas's data for one head: ``blocks`` ``[M, N]`` bool, its tiles' ``widths``
    (uint, 0 where inactive, ``UNTILED`` where active but in no tile), ``odd`` flags and
    ``partial`` blocks (bool ``[M, N]``, or None). Colours are the pictures' palette; blocks in
    no tile are drawn like active blocks."""
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
        "cells": deflated_base64(np.packbits(blocks.astype(bool, copy=False), axis=None).tobytes()),
        "partial": ""
        if partial is None or not partial.any()
        else deflated_base64(np.packbits(partial.astype(bool, copy=False), axis=None).tobytes()),
        "codes": deflated_base64(runs),
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


def deflated_base64(raw: bytes) -> str:
    return base64.b64encode(zlib.compress(raw, 1)).decode("ascii")


def _unpack(text: str) -> bytes:
    return zlib.decompress(base64.b64decode(text))


def _shade(hex_colour: str) -> str:
    value = int(hex_colour.lstrip("#"), 16)
    rgb = [int(((value >> s) & 255) * ALTERNATE_SHADE) for s in (16, 8, 0)]
    return "#{:02x}{:02x}{:02x}".format(*rgb)
