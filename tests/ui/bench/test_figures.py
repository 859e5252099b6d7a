"""The panel's figures and table helpers: benchmark documents (plain dicts) in, figures out."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.gpu.bench.test_results import make_doc
from ui.bench.error_figures import (
    ERROR_COLOURS,
    error_map_figure,
    grad_head_error_figure,
    head_error_figure,
)
from ui.bench.figures import (
    cases_speedup_figure,
    overlay_figure,
    segmentation_figure,
    speedup_figure,
    sweep_length_figure,
    sweep_speedup_figure,
    tflops_figure,
)
from ui.bench.views import _NUMBER_FORMATS, filled_columns


def case_with_details(n_heads: int) -> dict:
    detail = {
        "head_max_abs": [1e-3 * (h + 1) for h in range(n_heads)],
        "head_rel": [1e-4 * (h + 1) for h in range(n_heads)],
        "block_max_abs": [[0.0, 1e-5, 2e-3]] * n_heads,
        "rows_per_cell": 1,
    }
    return {"details": {"fused": detail}}


def test_head_errors_are_markers_on_whole_head_ticks():
    figure = head_error_figure(case_with_details(3))
    assert all(trace.mode == "markers" for trace in figure.data)
    for axis in (figure.layout.xaxis, figure.layout.xaxis2):
        assert axis.tick0 == 0 and axis.dtick == 1
        assert list(axis.range) == [-0.5, 2.5]
    wide = head_error_figure(case_with_details(64))
    assert wide.layout.xaxis.dtick == 2  # whole numbers still, fewer labels


def test_error_map_runs_from_light_small_to_dark_large_errors():
    figure = error_map_figure(case_with_details(2)["details"]["fused"], 64, "fused")
    heatmap = figure.data[0]
    z = np.array(heatmap.z, dtype=np.float64)
    assert np.isnan(z[:, 0]).all()  # no error (no active block) is left blank
    assert np.allclose(z[:, 1:], np.log10([1e-5, 2e-3]))
    assert (heatmap.zmin, heatmap.zmax) == (-5, -2)
    first, last = ERROR_COLOURS[0], ERROR_COLOURS[-1]
    assert heatmap.colorscale[0][1] == first and heatmap.colorscale[-1][1] == last
    assert _brightness(first) > 200 > 100 > _brightness(last)


def test_tables_drop_columns_nothing_filled_and_keep_small_rates_readable():
    rows = [{"contender": "reference", "TFLOP/s": 0.00587, "x dense": None}]
    assert filled_columns(rows) == [{"contender": "reference", "TFLOP/s": 0.00587}]
    assert _NUMBER_FORMATS["TFLOP/s"] % 0.00587 == "0.00587"
    assert _NUMBER_FORMATS["TFLOP/s"] % 491.23 == "491.2"


def _brightness(colour: str) -> float:
    if colour.startswith("#"):
        channels = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    else:
        channels = [int(float(c)) for c in colour[colour.index("(") + 1 : -1].split(",")]
    return math.fsum(channels) / 3


def test_speedup_and_tflops_figures(monkeypatch):
    case = make_doc(monkeypatch)["cases"][0]
    figure = speedup_figure(case)
    bars = figure.data[0]
    assert list(bars.x) == ["fused", "sdd", "sdd_w1", "flex", "sdpa_cudnn"]
    assert list(bars.y) == pytest.approx([4.0, 2.0, 4 / 3, 4 / 1.5, 1.0])
    lines = [shape.y0 for shape in figure.layout.shapes]
    assert lines == pytest.approx([1.0, 1.6])  # dense and the ideal 1/density
    assert "ideal 1/density = 1.6×" in [a.text for a in figure.layout.annotations]
    tflops = tflops_figure(case).data[0]
    assert tflops.y[0] == pytest.approx(case["flops"] / 1e-3 / 1e12)


def test_segmentation_figure_needs_a_pair(monkeypatch):
    case = make_doc(monkeypatch, contenders=("sdd", "sdd_w1", "sdd_qk", "sdd_qk_w1"))["cases"][0]
    figure = segmentation_figure(case, 8)
    assert [(t.name, list(t.y)) for t in figure.data] == [
        ("start width 8", [2.0]), ("start width 1", [3.0]),
        ("start width 8", [1.0]), ("start width 1", [1.5]),
    ]  # fmt: skip
    assert figure.data[1].text[0] == "1.50× slower"
    alone = make_doc(monkeypatch, contenders=("sdd",))["cases"][0]
    assert segmentation_figure(alone, 8) is None


def test_error_figures():
    case = {"details": {
        "fused": {"head_max_abs": [1e-3, 2e-3], "head_rel": [1e-4, 3e-4],
                  "block_max_abs": [[0, 1e-3], [2e-3, 0]], "rows_per_cell": 2},
        "sdd": {"error": "GpuUnavailableError: no GPU"},
    }}  # fmt: skip
    figure = head_error_figure(case)
    assert [(t.name, list(t.y)) for t in figure.data] == [
        ("fused", [1e-3, 2e-3]), ("fused", [1e-4, 3e-4])
    ]  # fmt: skip
    heat = error_map_figure(case["details"]["fused"], 64, "fused").data[0]
    assert np.array_equal(heat.customdata, [[0, 1e-3], [2e-3, 0]]) and list(heat.x) == [0, 2]
    assert head_error_figure({"details": {"sdd": {"error": "x"}}}) is None


def test_gradient_errors_per_head_one_row_per_gradient():
    grads = {g: {"head_max_abs": [1e-2, 2e-2], "head_rel": [r, 2 * r]}
             for g, r in (("dq", 1e-3), ("dk", 2e-3), ("dv", 3e-3))}  # fmt: skip
    case = {"details": {"fused": {"head_rel": [1e-4, 1e-4], "grads": grads},
                        "sdd": {"error": "no backward"}}}  # fmt: skip
    figure = grad_head_error_figure(case)
    assert [(t.name, list(t.y)) for t in figure.data] == [
        ("fused", [1e-3, 2e-3]), ("fused", [2e-3, 4e-3]), ("fused", [3e-3, 6e-3])
    ]  # fmt: skip
    assert [a.text for a in figure.layout.annotations][:3] == [
        "dq: ‖g − ref‖ / ‖ref‖", "dk: ‖g − ref‖ / ‖ref‖", "dv: ‖g − ref‖ / ‖ref‖"
    ]  # fmt: skip
    assert figure.layout.xaxis3.title.text == "head" and figure.layout.yaxis2.type == "log"
    assert grad_head_error_figure(case_with_details(2)) is None  # a forward run has none


def test_tflops_of_a_training_step_show_the_backward_alone(monkeypatch):
    case = make_doc(monkeypatch, backward=True, contenders=("fused", "flex"),
                    times={"fused": 2.0})["cases"][0]  # fmt: skip
    figure = tflops_figure(case)
    step, backward = figure.data
    assert (step.name, backward.name) == ("forward + backward", "backward alone")
    assert step.y[0] == pytest.approx(3.5 * case["flops"] / 2e-3 / 1e12)
    assert backward.y[0] == pytest.approx(2.5 * case["flops"] / 2e-3 / 1e12)
    assert "backward = 2.5× forward FLOPs" in figure.layout.title.text


def test_sweep_figures_mark_the_current_design(monkeypatch):
    cases = []
    for kind, value, time in (("length", 1024, 1.0), ("current", 2048, 2.0), ("length", 4096, 5.0)):
        case = make_doc(monkeypatch, times={"fused": time})["cases"][0]
        case["config"]["seq_q"] = value
        case["sweep"] = {"kind": kind, "label": str(value), "value": value}
        cases.append(case)
    length = sweep_length_figure(cases)
    names = [t.name for t in length.data]
    assert "fused (length)" in names and "fused (current design)" in names
    current = next(t for t in length.data if t.name == "fused (current design)")
    assert list(current.x) == [2048] and current.marker.symbol == "star"
    lengths = next(t for t in length.data if t.name == "fused (length)")
    assert list(lengths.x) == [1024, 4096] and list(lengths.y) == [1.0, 5.0]
    speed = sweep_speedup_figure(cases)
    assert any(t.name == "ideal 1/density" for t in speed.data)
    assert any(t.name == "fused (current design)" for t in speed.data)


def test_overlay_and_cases_figures(monkeypatch):
    first = make_doc(monkeypatch)["cases"][0]
    second = make_doc(monkeypatch, times={"fused": 0.5})["cases"][0]
    figure = overlay_figure(first, second, ("a", "b"))
    assert [t.name for t in figure.data] == ["a", "b"]
    assert figure.data[1].y[0] == 0.5 and figure.data[0].customdata[0] == 2.0
    cases = cases_speedup_figure([first, second])
    heat = cases.data[0]
    assert list(heat.x) == ["fused", "sdd", "sdd_w1", "flex", "sdpa_cudnn"]
    assert heat.text[0][0] == "4.00×" and heat.text[1][0] == "8.00×"
    assert heat.z[1][0] == pytest.approx(3.0)  # log2 of 8
