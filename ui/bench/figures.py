"""Plotly figures of benchmark documents: plain dicts in, figures out, no Streamlit.

Every chart reads the harness's JSON (``gpu.bench.results``), so a stored run, a committed result
and a fresh run are drawn by the same code. Speedups are against the dense SDPA baseline
(cuDNN when it ran), and the ideal is the dense baseline's own FLOPs over the layout's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from gpu.bench.results import (
    finite,
    ideal_speedup,
    is_backward,
    measured,
    results_by_name,
    speedup_vs_dense,
)

_FONT = {"family": "Inter, system-ui, sans-serif", "size": 12}
COLOURS = {
    "fused": "#e15759", "sdd": "#f28e2b", "sdd_w1": "#ffbe7d", "sdd_qk": "#b07aa1",
    "sdd_qk_w1": "#d4a6c8", "flex": "#4e79a7", "flex_tuned": "#76b7b2", "flex_flash": "#2f4b7c",
    "cudnn_bsa": "#edc948", "fa4": "#9d7660", "sdpa": "#9c9c9c", "sdpa_cudnn": "#59a14f",
    "sdpa_flash": "#8cd17d", "reference": "#bab0ac",
}  # fmt: skip
#: Marker of each sweep kind; the current design gets a large star.
SYMBOLS = {"scaled": "circle", "length": "circle", "random": "x", "current": "star"}


def styled(figure: go.Figure, height: int, **axes: Any) -> go.Figure:
    """``figure`` with the panel's height, margins, font and legend."""
    figure.update_layout(
        height=height, margin={"l": 56, "r": 16, "t": 36, "b": 48}, font=_FONT,
        legend={"orientation": "h", "y": -0.2}, **axes,
    )  # fmt: skip
    return figure


def speedup_figure(case: dict[str, Any]) -> go.Figure:
    """Each contender's speedup over dense SDPA, with the ideal (skip every inactive pair)."""
    results = [r for r in measured(case) if speedup_vs_dense(case, r) is not None]
    names = [r["name"] for r in results]
    figure = go.Figure(
        go.Bar(
            x=names,
            y=[speedup_vs_dense(case, r) for r in results],
            marker_color=[COLOURS.get(n, "#777") for n in names],
            text=[f"{speedup_vs_dense(case, r):.2f}×" for r in results],
            textposition="outside",
            hovertemplate="%{x}: %{y:.2f}× dense<extra></extra>",
            name="speedup",
        )
    )
    figure.add_hline(y=1, line_dash="dot", line_color="#777", annotation_text="dense")
    ideal = ideal_speedup(case)
    if ideal is not None and finite(ideal):
        figure.add_hline(
            y=ideal, line_dash="dash", line_color="#222",
            annotation_text=f"ideal 1/density = {ideal:.1f}×",
        )  # fmt: skip
    return styled(figure, 340, title="Speedup over dense attention", yaxis_title="× dense")


def tflops_figure(case: dict[str, Any]) -> go.Figure:
    """Effective TFLOP/s: the layout's FLOPs over each contender's time; for training steps,
    the whole step (3.5× the forward's FLOPs) beside the backward alone (2.5×)."""
    results = [r for r in measured(case) if finite(r.get("tflops"))]
    names = [r["name"] for r in results]
    backward = is_backward(case)
    figure = go.Figure(
        go.Bar(
            x=names,
            y=[r["tflops"] for r in results],
            marker_color=[COLOURS.get(n, "#777") for n in names],
            customdata=[[r["ms"], r.get("own_tflops") or float("nan")] for r in results],
            hovertemplate="%{x}: %{y:.1f} TFLOP/s effective, %{customdata[0]:.3f} ms"
            "<br>own FLOPs: %{customdata[1]:.1f} TFLOP/s<extra></extra>",
            name="forward + backward" if backward else "effective TFLOP/s",
        )
    )
    if not backward:
        return styled(figure, 340, title="Effective TFLOP/s", yaxis_title="TFLOP/s")
    figure.add_trace(
        go.Bar(
            x=names, y=[r.get("bwd_tflops") for r in results], name="backward alone",
            marker_color=[COLOURS.get(n, "#777") for n in names], marker_pattern_shape="/",
            customdata=[r.get("bwd_ms") for r in results],
            hovertemplate="%{x}: backward %{y:.1f} TFLOP/s, %{customdata:.3f} ms<extra></extra>",
        )
    )  # fmt: skip
    figure.update_layout(barmode="group")
    return styled(figure, 340, title="Effective TFLOP/s, forward + backward (backward = 2.5× "
                   "forward FLOPs)", yaxis_title="TFLOP/s")  # fmt: skip


def segmentation_figure(case: dict[str, Any], start_width: int) -> go.Figure | None:
    """SDD at the design's start width against start width 1 (one block per tile), for the
    whole pipeline and the SDD kernel alone; None without such a pair."""
    by_name = results_by_name(case)
    pairs = [("SDD → softmax → DSD", "sdd", "sdd_w1"), ("SDD kernel alone", "sdd_qk", "sdd_qk_w1")]
    figure = go.Figure()
    found = False
    for label, segmented, single in pairs:
        a, b = by_name.get(segmented, {}), by_name.get(single, {})
        if not (finite(a.get("ms")) and finite(b.get("ms"))):
            continue
        found = True
        figure.add_trace(go.Bar(x=[label], y=[a["ms"]], name=f"start width {start_width}",
                                marker_color=COLOURS["sdd"], legendgroup="w",
                                showlegend=label == pairs[0][0]))  # fmt: skip
        figure.add_trace(go.Bar(x=[label], y=[b["ms"]], name="start width 1",
                                marker_color=COLOURS["sdd_w1"], legendgroup="1",
                                showlegend=label == pairs[0][0],
                                text=[f"{b['ms'] / a['ms']:.2f}× slower"],
                                textposition="outside"))  # fmt: skip
    if not found:
        return None
    figure.update_layout(barmode="group")
    return styled(figure, 320, title="Effect of the segmentation", yaxis_title="ms")


def sweep_speedup_figure(cases: Sequence[dict[str, Any]]) -> go.Figure:
    """Speedup over dense against sparsity, one line per contender and sweep kind; the current
    design is a star, the ideal (1/density) a dashed line."""
    figure = go.Figure()
    for kind in ("scaled", "length", "random", "current"):
        group = [c for c in cases if c.get("sweep", {}).get("kind") == kind]
        for name in _contenders(group):
            points = [
                (100 * (1 - c["layout"]["token_density"]), s, c["case"])
                for c in group
                if (r := results_by_name(c).get(name)) and (s := speedup_vs_dense(c, r))
            ]
            if points:
                points.sort()
                figure.add_trace(_sweep_trace(points, name, kind))
    ideal = sorted(
        (100 * (1 - c["layout"]["token_density"]), v)
        for c in cases
        if (v := ideal_speedup(c)) is not None
    )
    if ideal:
        figure.add_trace(go.Scatter(x=[p[0] for p in ideal], y=[p[1] for p in ideal],
                                    mode="lines", name="ideal 1/density",
                                    line={"dash": "dash", "color": "#222"}))  # fmt: skip
    figure.update_yaxes(type="log", title_text="× dense")
    figure.update_xaxes(title_text="sparsity (% of token pairs skipped)")
    return styled(figure, 420, title="Speedup against sparsity")


def sweep_length_figure(cases: Sequence[dict[str, Any]]) -> go.Figure:
    """Time against sequence length, one line per contender; the current design is a star."""
    figure = go.Figure()
    for kind in ("length", "current"):
        group = [c for c in cases if c.get("sweep", {}).get("kind") == kind]
        for name in _contenders(group):
            points = [
                (c["config"]["seq_q"], r["ms"], c["case"])
                for c in group
                if (r := results_by_name(c).get(name)) and finite(r.get("ms"))
            ]
            if points:
                points.sort()
                figure.add_trace(_sweep_trace(points, name, kind))
    lengths = sorted({c["config"]["seq_q"] for c in cases})
    figure.update_xaxes(type="log", title_text="sequence length (tokens)", tickvals=lengths,
                        ticktext=[f"{n:,}" for n in lengths])  # fmt: skip
    figure.update_yaxes(type="log", title_text="ms")
    return styled(figure, 420, title="Time against sequence length")


def _contenders(cases: Sequence[dict[str, Any]]) -> list[str]:
    names: dict[str, None] = {}
    for case in cases:
        names.update((r["name"], None) for r in measured(case))
    return list(names)


def _sweep_trace(points: list[tuple[float, float, str]], name: str, kind: str) -> go.Scatter:
    current = kind == "current"
    return go.Scatter(
        x=[p[0] for p in points],
        y=[p[1] for p in points],
        text=[p[2] for p in points],
        mode="markers" if current else "lines+markers",
        name=f"{name} (current design)" if current else f"{name} ({kind})",
        legendgroup=name,
        marker={"symbol": SYMBOLS[kind], "size": 16 if current else 8,
                "color": COLOURS.get(name, "#777"), "line": {"width": 1, "color": "#222"}},
        line={"dash": "dot" if kind == "random" else "solid", "color": COLOURS.get(name, "#777")},
        hovertemplate="%{text}<br>%{x:.4g}: %{y:.3g}<extra>" + name + "</extra>",
    )  # fmt: skip


def overlay_figure(
    first: dict[str, Any], second: dict[str, Any], labels: Sequence[str]
) -> go.Figure:
    """Two runs side by side: each contender's time in both, and the second's speedup over the
    first in the hover."""
    a, b = results_by_name(first), results_by_name(second)
    names = [n for n in a if n in b and finite(a[n].get("ms")) and finite(b[n].get("ms"))]
    figure = go.Figure()
    for label, results, colour in ((labels[0], a, "#4e79a7"), (labels[1], b, "#f28e2b")):
        figure.add_trace(
            go.Bar(
                x=names, y=[results[n]["ms"] for n in names], name=label, marker_color=colour,
                customdata=[a[n]["ms"] / b[n]["ms"] for n in names],
                hovertemplate="%{x}: %{y:.3f} ms (second run %{customdata:.2f}× the first's "
                "speed)<extra></extra>",
            )
        )  # fmt: skip
    figure.update_layout(barmode="group")
    return styled(figure, 360, title="Two runs overlaid", yaxis_title="ms")


def cases_speedup_figure(cases: Sequence[dict[str, Any]]) -> go.Figure:
    """Every case of a document against every contender: speedup over dense, as a table of
    colours (log scale, 1× white) with the numbers written in."""
    names = _contenders(cases)
    speedups = np.full((len(cases), len(names)), np.nan)
    for row, case in enumerate(cases):
        by_name = results_by_name(case)
        for col, name in enumerate(names):
            result = by_name.get(name)
            if result and (s := speedup_vs_dense(case, result)) is not None and s > 0:
                speedups[row, col] = s
    text = [["" if np.isnan(v) else f"{v:.2f}×" for v in row] for row in speedups]
    limit = float(np.nanmax(np.abs(np.log2(speedups)))) if np.isfinite(speedups).any() else 1.0
    figure = go.Figure(
        go.Heatmap(
            z=np.log2(speedups), x=names, y=[case["case"] for case in cases], text=text,
            texttemplate="%{text}", colorscale="RdBu", zmid=0, zmin=-limit, zmax=limit,
            colorbar={"title": "log2 × dense"},
            hovertemplate="%{y} · %{x}: %{text}<extra></extra>",
        )
    )  # fmt: skip
    figure.update_yaxes(autorange="reversed")
    height = 120 + 24 * len(cases)
    return styled(figure, height, title="Speedup over dense attention, every case")
