"""Plotly figures and picture encodings for the views: arrays in, figures out, no Streamlit.

The editor figure is a picture of one head (a PNG in a ``go.Image``, one pixel per block or per
group of blocks) under a transparent ``Scattergl`` of square markers, because Streamlit's plotly
selection events fire on scatter traces, never on images or heatmaps.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from PIL import Image

from designer.ui.selection import MarkerGrid

#: Modebar buttons the editor does not need (selection, zoom and pan stay).
_REMOVED_BUTTONS = ("autoScale2d", "toImage", "hoverClosestCartesian", "hoverCompareCartesian")
EDITOR_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": list(_REMOVED_BUTTONS)}
_SELECTED_RGBA = "rgba(255, 255, 255, 0.45)"
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


def editor_figure(
    picture: np.ndarray,
    grid: MarkerGrid,
    head: int,
    *,
    blocks_per_pixel: int = 1,
    dragmode: str = "select",
    height_px: int = 620,
) -> go.Figure:
    """The paint canvas for one head.

    ``picture`` is the head's ``[rows, cols, 3]`` picture with ``blocks_per_pixel`` blocks on a
    pixel side (1 unless the head was shrunk to fit). Block ``(row, col)`` is centred at
    ``(x=col, y=row)``; query rows run top to bottom. Markers carry
    ``customdata = (head, row, col)`` of their group's first block (see ``MarkerGrid``). A dotted
    line marks the diagonal, the causal boundary.
    """
    x, y = grid.centres()
    rows, cols = grid.rows(), grid.cols()
    customdata = np.stack([np.full_like(rows, head), rows, cols], axis=1).astype(np.uint16)
    step = blocks_per_pixel
    image = go.Image(
        source=png_data_uri(picture),
        x0=(step - 1) / 2,
        y0=(step - 1) / 2,
        dx=step,
        dy=step,
        hoverinfo="skip",
        name="layout",
    )
    markers = go.Scattergl(
        x=x.astype(np.float32),
        y=y.astype(np.float32),
        customdata=customdata,
        mode="markers",
        marker={"symbol": "square", "color": "rgba(0, 0, 0, 0)", "size": _marker_px(grid)},
        selected={"marker": {"color": _SELECTED_RGBA}},
        unselected={"marker": {"opacity": 1}},
        hovertemplate=(
            "query block %{customdata[1]} · key block %{customdata[2]}"
            + ("" if grid.stride == 1 else f" (+{grid.stride}×{grid.stride})")
            + "<extra></extra>"
        ),
        name="blocks",
        showlegend=False,
    )
    figure = go.Figure([image, markers])
    diagonal = min(grid.n_rows, grid.n_cols) - 0.5
    figure.add_shape(
        type="line", x0=-0.5, y0=-0.5, x1=diagonal, y1=diagonal, layer="above",
        line={"color": "rgba(30, 40, 60, 0.35)", "width": 1, "dash": "dot"},
    )  # fmt: skip
    figure.update_layout(
        height=height_px,
        margin={"l": 56, "r": 12, "t": 12, "b": 48},
        dragmode=dragmode,
        clickmode="event+select",
        uirevision=f"{grid.n_rows}x{grid.n_cols}",
        font={"family": _FONT, "size": 12},
        plot_bgcolor="white",
        hoverlabel={"font": {"family": _FONT}},
    )
    figure.update_xaxes(
        title_text="key block →",
        range=[-0.5, grid.n_cols - 0.5],
        side="top",
        showgrid=False,
        zeroline=False,
        constrain="domain",
    )
    figure.update_yaxes(
        title_text="query block ↓",
        range=[grid.n_rows - 0.5, -0.5],
        showgrid=False,
        zeroline=False,
        scaleanchor="x",
        constrain="domain",
    )
    return figure


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


def legend_html(entries: Sequence[tuple[str, str]]) -> str:
    """A row of colour swatches with labels: ``entries`` are ``(hex colour, label)``."""
    items = "".join(
        f'<span style="display:inline-flex;align-items:center;margin:0 14px 4px 0;">'
        f'<span style="width:14px;height:14px;border-radius:3px;background:{html.escape(colour)};'
        f'display:inline-block;margin-right:6px;"></span>{html.escape(label)}</span>'
        for colour, label in entries
    )
    return f'<div style="display:flex;flex-wrap:wrap;font-size:0.9rem;">{items}</div>'


def _marker_px(grid: MarkerGrid) -> int:
    """Marker side in pixels: about one group's width on a ~560 px canvas."""
    per_side = max(grid.n_rows, grid.n_cols) / grid.stride
    return int(np.clip(560 / per_side, 3, 40))
