"""Where the errors sit, as plotly figures: per head (output and gradients) and per block row.

Plain dicts in (a case's ``details``, see ``gpu.bench.details``), figures out, no Streamlit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sequential
from plotly.subplots import make_subplots

from gpu.bench.training import GRAD_NAMES
from ui.bench.figures import COLOURS, styled

#: Most tick labels along the head axis (every head up to this many heads).
MAX_HEAD_TICKS = 32
#: Error magnitudes from small (light yellow) to large (dark red), like a heat scale.
ERROR_COLOURS = list(sequential.YlOrRd)


def head_error_figure(case: dict[str, Any]) -> go.Figure | None:
    """Max-abs and relative error per head of each implementation with details (None if none):
    one marker per head, on whole-number head ticks."""
    details = {k: v for k, v in case.get("details", {}).items() if "head_max_abs" in v}
    if not details:
        return None
    rows = [
        ("max |out − ref|", {name: d["head_max_abs"] for name, d in details.items()}),
        ("‖out − ref‖ / ‖ref‖", {name: d["head_rel"] for name, d in details.items()}),
    ]
    return _per_head_figure(rows, "Error against the fp64 reference, per head", 420)


def grad_head_error_figure(case: dict[str, Any]) -> go.Figure | None:
    """Relative error of dq, dk and dv per head of each implementation with gradient details
    (None if none), one row per gradient."""
    details = {k: v["grads"] for k, v in case.get("details", {}).items() if "grads" in v}
    if not details:
        return None
    rows = [
        (f"{grad}: ‖g − ref‖ / ‖ref‖", {name: g[grad]["head_rel"] for name, g in details.items()})
        for grad in GRAD_NAMES
    ]
    return _per_head_figure(rows, "Gradient error against the fp64 reference, per head", 520)


def _per_head_figure(
    rows: list[tuple[str, dict[str, list[float]]]], title: str, height: int
) -> go.Figure:
    """One subplot per ``(subtitle, {implementation: value per head})``, log scale, a marker
    per head on whole-number head ticks."""
    figure = make_subplots(rows=len(rows), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                           subplot_titles=[subtitle for subtitle, _ in rows])  # fmt: skip
    n_heads = 1
    for row, (_, series) in enumerate(rows, 1):
        for name, values in series.items():
            n_heads = max(n_heads, len(values))
            figure.add_trace(
                go.Scatter(
                    x=np.arange(len(values)), y=values, name=name, legendgroup=name,
                    showlegend=row == 1, mode="markers",
                    marker={"color": COLOURS.get(name, "#777"), "size": 9},
                    hovertemplate=f"{name} head %{{x}}: %{{y:.2e}}<extra></extra>",
                ),
                row=row, col=1,
            )  # fmt: skip
    figure.update_yaxes(type="log", exponentformat="e")
    figure.update_xaxes(tick0=0, dtick=-(-n_heads // MAX_HEAD_TICKS), range=[-0.5, n_heads - 0.5])
    figure.update_xaxes(title_text="head", row=len(rows), col=1)
    return styled(figure, height, title=title)


def error_map_figure(detail: dict[str, Any], block_size: int, name: str) -> go.Figure:
    """Where the largest errors sit: the max error of each (head, query block row), coloured
    by its order of magnitude from light (small) to dark red (large); rows without error (no
    active block) are left blank."""
    values = np.asarray(detail["block_max_abs"], dtype=np.float64)
    step = detail.get("rows_per_cell", 1)
    with np.errstate(divide="ignore"):
        magnitude = np.where(values > 0, np.log10(np.where(values > 0, values, 1.0)), np.nan)
    finite_range = magnitude[np.isfinite(magnitude)]
    low = float(np.floor(finite_range.min())) if finite_range.size else -8.0
    high = float(np.ceil(finite_range.max())) if finite_range.size else 0.0
    high = max(high, low + 1)
    ticks = np.arange(low, high + 1)
    figure = go.Figure(
        go.Heatmap(
            z=magnitude,
            x=np.arange(values.shape[1]) * step,
            customdata=values,
            colorscale=ERROR_COLOURS,
            zmin=low,
            zmax=high,
            colorbar={"title": "max |err|", "tickvals": ticks,
                      "ticktext": [f"1e{int(t)}" for t in ticks]},
            hovertemplate="head %{y}, query block %{x}"
            + (f"–+{step - 1}" if step > 1 else "")
            + ": %{customdata:.2e}<extra></extra>",
        )
    )  # fmt: skip
    figure.update_yaxes(title_text="head", autorange="reversed")
    figure.update_xaxes(title_text=f"query block ({block_size} tokens)")
    return styled(figure, 300, title=f"{name}: largest error per query-block row")
