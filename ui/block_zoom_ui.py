"""The block zoom: one block of the painted head at the token level, and the head's partial
blocks for the canvas."""

from __future__ import annotations

import hashlib

import numpy as np
import streamlit as st
import torch

from designer.design import Design
from designer.layout import Layout, causal_offset
from ui import keys
from ui.figures import png_bytes
from ui.pictures import enlarge, frame, scale_factors, token_picture

#: Pixels a side the zoomed block is drawn at (about).
ZOOM_PX = 256


def head_partials(layout: Layout, head: int) -> tuple[np.ndarray | None, str]:
    """Bool ``[M, N]`` partial blocks of ``head`` (None when it has none) and a key naming
    them, for the canvas's cache."""
    partials = layout.partials
    if partials is None:
        return None, ""
    rows = partials.head_range(head)
    if rows.start == rows.stop:
        return None, ""
    index = partials.index[rows].numpy()
    grid = np.zeros(layout.shape[1:], dtype=bool)
    grid[index[:, 1], index[:, 2]] = True
    return grid, hashlib.blake2b(index.tobytes(), digest_size=12).hexdigest()


def partials_key(layout: Layout, head: int) -> str:
    """A key naming the partial blocks of ``head`` and their token masks ("" when none)."""
    partials = layout.partials
    rows = slice(0, 0) if partials is None else partials.head_range(head)
    if rows.start == rows.stop:
        return ""
    digest = hashlib.blake2b(partials.index[rows].numpy().tobytes(), digest_size=12)
    digest.update(partials.bits[rows].numpy().tobytes())
    return digest.hexdigest()


def window_partials(
    layout: Layout, head: int, row0: int, col0: int, rows: int, cols: int, step: int = 1
) -> np.ndarray | None:
    """Bool ``[ceil(rows / step), ceil(cols / step)]``: the ``step x step`` buckets of a window
    of ``head`` holding a partial block (None when none does); reads that head's partial
    blocks alone, never a grid of the head."""
    partials = layout.partials
    if partials is None:
        return None
    index = partials.index[partials.head_range(head)].numpy()
    r, c = index[:, 1] - row0, index[:, 2] - col0
    keep = (r >= 0) & (r < rows) & (c >= 0) & (c < cols)
    if not keep.any():
        return None
    grid = np.zeros((-(-rows // step), -(-cols // step)), dtype=bool)
    grid[r[keep] // step, c[keep] // step] = True
    return grid


def block_zoom_ui(design: Design, head: int) -> None:
    """One block of ``head`` token by token, chosen by its query and key block."""
    layout = design.layout
    session = st.session_state
    for key, count in ((keys.ZOOM_ROW, layout.n_q_blocks), (keys.ZOOM_COL, layout.n_k_blocks)):
        if not 0 <= session.get(key, 0) < count:
            session[key] = 0
    expanded = layout.partials is not None
    with st.expander("Zoom into a block: its token mask", expanded=expanded, key="zoom"):
        left, right, picture = st.columns([1, 1, 3])
        row = left.number_input("query block", min_value=0, max_value=layout.n_q_blocks - 1,
                                step=1, key=keys.ZOOM_ROW)  # fmt: skip
        col = right.number_input("key block", min_value=0, max_value=layout.n_k_blocks - 1,
                                 step=1, key=keys.ZOOM_COL)  # fmt: skip
        if layout.partials is not None:
            left.caption(f"Partial blocks of this head: {_first_partials(layout, head)}")
        with picture:
            _block_picture(design, head, int(row), int(col))


def _first_partials(layout: Layout, head: int, count: int = 4) -> str:
    """The first few partial blocks of ``head`` as ``(row, col)`` text."""
    rows = layout.partials.head_range(head)
    found = layout.partials.index[rows][:count, 1:].tolist()
    if not found:
        return "none"
    more = " …" if rows.stop - rows.start > count else ""
    return ", ".join(f"({r}, {c})" for r, c in found) + more


def _block_picture(design: Design, head: int, row: int, col: int) -> None:
    layout = design.layout
    b = layout.block_size
    tokens = layout.block_tokens(head, row, col).numpy()
    q = row * b + np.arange(b)[:, None]
    k = col * b + np.arange(b)[None, :]
    inside = (q < layout.seq_len_q) & (k < layout.seq_len_k)
    masked = np.zeros_like(tokens)
    if design.causal:
        offset = causal_offset("top_left", layout.seq_len_q, layout.seq_len_k)
        masked = k > q + offset
    shrink, grow = scale_factors(b, ZOOM_PX)
    image = frame(enlarge(token_picture(tokens, inside, masked)[::shrink, ::shrink], grow))
    attended = int((tokens & ~masked).sum())
    kind = "full"
    if not _active(layout, head, row, col):
        kind = "empty"
    elif int(tokens.sum()) < int(inside.sum()):
        kind = "partial"
    caption = (
        f"Head {head}, block ({row}, {col}), {kind}: {attended:,} of {int(inside.sum()):,} token "
        f"pairs attended"
        + (" (causal masks the lighter ones)" if design.causal and masked.any() else "")
    )
    st.image(png_bytes(image), caption=caption, output_format="PNG")


def _active(layout: Layout, head: int, row: int, col: int) -> bool:
    """Whether one block is active, from the grid or the runs."""
    if layout.runs is not None:
        return bool(layout.runs.contains(torch.tensor([[head, row, col]]))[0])
    return bool(layout.blocks[head, row, col])
