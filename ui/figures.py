"""Plotly figures and picture encodings for the views: arrays in, figures out, no Streamlit."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from PIL import Image

_FONT = "Inter, system-ui, sans-serif"


def png_bytes(image: np.ndarray) -> bytes:
    """Encode an ``[rows, cols, 3]`` uint8 picture as PNG."""
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8), mode="RGB").save(
        buffer, format="PNG", optimize=False, compress_level=1
    )
    return buffer.getvalue()


def png_data_uri(image: np.ndarray) -> str:
    """The picture as a ``data:image/png`` URI, for ``go.Image(source=...)``."""
    return "data:image/png;base64," + base64.b64encode(png_bytes(image)).decode("ascii")


def head_density_figure(densities: Sequence[float], *, height_px: int = 180) -> go.Figure:
    """A small bar chart of each head's density, to spot the head that is not like the others."""
    heads = np.arange(len(densities))
    figure = go.Figure(
        go.Bar(
            x=heads,
            y=np.asarray(densities) * 100,
            marker_color="#4e79a7",
            hovertemplate="head %{x}: %{y:.2f}%<extra></extra>",
        )
    )
    figure.update_layout(
        height=height_px,
        margin={"l": 40, "r": 8, "t": 8, "b": 32},
        font={"family": _FONT, "size": 11},
        bargap=0.25,
    )
    figure.update_xaxes(title_text="head", dtick=1 if len(densities) <= 32 else None)
    figure.update_yaxes(title_text="density %", rangemode="tozero")
    return figure


def legend_html(entries: Sequence[tuple[str, str]], title: str | None = None) -> str:
    """A row of colour swatches with labels: ``entries`` are ``(hex colour, label)``, after
    ``title`` when given."""
    lead = "" if title is None else f'<b style="margin-right:14px;">{html.escape(title)}</b>'
    items = lead + "".join(
        f'<span style="display:inline-flex;align-items:center;margin:0 14px 4px 0;">'
        f'<span style="width:14px;height:14px;border-radius:3px;background:{html.escape(colour)};'
        f'display:inline-block;margin-right:6px;"></span>{html.escape(label)}</span>'
        for colour, label in entries
    )
    return f'<div style="display:flex;flex-wrap:wrap;font-size:0.9rem;">{items}</div>'
