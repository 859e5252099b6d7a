"""The GPU panel in the real app, driven with ``AppTest``.

Without a GPU: the reason, what to install, the CPU correctness check and the stored results.
With a stand-in GPU (``fake_gpu``: the real harness on the CPU with fake contenders and a fake
timer, a fixed amount of "free" memory): a run, refusal, out of memory, the wait for another
session, and a sweep, all through the panel's widgets. The H200 run is
``tools/app_check.py``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from designer.analysis import design_digest
from designer.design import Design
from designer.recipe import Recipe, RecipeStep
from designer.storage import DATA_DIR_ENV, DesignStore
from gpu import block_sparse_attention, runtime
from gpu.bench import (
    BACKWARD_CONTENDERS,
    CONTENDERS,
    DEFAULT_CONTENDERS,
    BenchSession,
    details,
    peers,
    runner,
)
from gpu.bench import store as store_module
from gpu.bench.results import document_bytes
from gpu.bench.runner import GpuCoordinator
from gpu.bench.store import RunStore
from tests.gpu.bench.test_results import fake_harness, make_doc
from ui import keys
from ui.bench import panel, settings
from ui.text import plain

APP = str(Path(__file__).resolve().parents[3] / "app.py")
SESSION = "gpupaneltest01"
GiB = 1 << 30
#: 2 heads, 512 tokens, blocks of 64, a bidirectional window: small enough for CPU references.
RECIPE = Recipe(2, 8, 8, 64, steps=(RecipeStep("sliding_window", {"window_blocks": 2}),))
DESIGN = Design(RECIPE.build(), name="small band", recipe=RECIPE)


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(store_module, "RESULTS_DIR", tmp_path / "committed")
    DesignStore(tmp_path).autosave(SESSION, DESIGN)
    return tmp_path


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(panel, "unavailable_reason", lambda: "CuPy is not installed (test)")


@pytest.fixture
def fake_gpu(monkeypatch):
    """The panel believes in a GPU with 4 GiB free; the harness runs on the CPU."""
    timer = fake_harness(monkeypatch)
    coordinator = GpuCoordinator(lambda flush: BenchSession(torch.device("cpu"), timer=timer))
    real_config = panel.bench_config
    monkeypatch.setattr(panel, "unavailable_reason", lambda: None)
    monkeypatch.setattr(panel, "shared_coordinator", lambda: coordinator)
    monkeypatch.setattr(
        panel, "bench_config",
        lambda design, values: replace(real_config(design, values), device="cpu"),
    )  # fmt: skip
    for module in (panel, runner):
        monkeypatch.setattr(module, "free_gpu_bytes", lambda: 4 * GiB)

    def reference_for_every_impl(*args, impl, **kwargs):
        return block_sparse_attention(*args, **{**kwargs, "impl": "reference"})

    monkeypatch.setattr(details, "block_sparse_attention", reference_for_every_impl)
    return coordinator


def open_panel():
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params[keys.SESSION_QUERY_PARAM] = SESSION
    at.session_state["tab"] = "GPU benchmark"
    at.run()
    assert_clean(at)
    return at


def assert_clean(at):
    assert not at.exception, [e.value for e in at.exception]


def chart_titles(at):
    titles = []
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        titles.append(spec["layout"].get("title", {}).get("text", ""))
    return titles


def test_an_installed_package_says_it_carries_no_committed_results(data_dir, no_gpu, monkeypatch):
    monkeypatch.setattr(store_module, "RESULTS_DIR", None)
    at = open_panel()
    assert any("This installed package carries no committed results" in c.value for c in at.caption)


def test_without_a_gpu_the_panel_says_why_checks_on_the_cpu_and_shows_stored_results(
    data_dir, no_gpu, monkeypatch
):
    committed = data_dir / "committed"
    committed.mkdir()
    (committed / "2026-11-29-h200.json").write_bytes(document_bytes(make_doc(monkeypatch)))
    runs = RunStore(data_dir)
    first = runs.save(design_digest(DESIGN), make_doc(monkeypatch))
    second = runs.save(design_digest(DESIGN), make_doc(monkeypatch, times={"fused": 0.5}))
    at = open_panel()
    assert at.warning[0].value == (
        "The GPU benchmark cannot run on this machine: CuPy is not installed (test)"
    )
    assert any('pip install -e ".[cuda13]"' in m.value for m in at.markdown)
    assert [s.value for s in at.subheader][-2:] == ["Runs of this design", "Committed results"]
    assert len(at.get("download_button")) == 2  # the stored run and the committed file
    assert chart_titles(at).count("Speedup over dense attention") == 2
    at.multiselect(key=keys.GPU_OVERLAY_PICK).set_value([first.name, second.name]).run()
    specs = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    overlay = next(s for s in specs if s["layout"]["title"]["text"] == "Two runs overlaid")
    assert [bar["y"][0] for bar in overlay["data"]] == [1.0, 0.5]  # fused, first then second

    at.button(key=keys.GPU_CPU_BUTTON).click().run()
    assert_clean(at)
    check = at.session_state[keys.GPU_LAST_CPU_CHECK]["doc"]["cases"][0]
    assert check["layout"]["shape"] == [2, 8, 8] and check["results"][0]["status"] == "ok"
    assert check["results"][0]["rel_error"] < 1e-2
    assert "Error against the fp64 reference, per head" in chart_titles(at)
    assert "reference: largest error per query-block row" in chart_titles(at)
    at.session_state["tab"] = "Analysis"  # the rest of the app is unaffected
    at.run()
    assert_clean(at)


def test_a_broken_stored_run_is_reported_not_fatal(data_dir, no_gpu):
    folder = data_dir / "runs" / design_digest(DESIGN)
    folder.mkdir(parents=True)
    (folder / "bad.json").write_text('{"format": "blocksparse-bench", "version": 1}')
    at = open_panel()
    assert any("Skipped a stored run: bad.json is not a benchmark document" in w.value
               for w in at.warning)  # fmt: skip


def test_a_run_shows_its_numbers_and_charts_and_is_stored(data_dir, fake_gpu):
    at = open_panel()
    # start width 2 at blocks of 64: SDD at width 1 is added to show what the tiles buy
    defaults = settings.default_contenders(DESIGN)
    assert defaults == [c for c in DEFAULT_CONTENDERS if c not in settings.SLOW_TO_COMPILE
                        and peers.installed(c)] + ["sdd_w1"]  # fmt: skip
    assert at.multiselect(key=keys.GPU_CONTENDER_PICK).value == defaults
    at.multiselect(key=keys.GPU_CONTENDER_PICK).select("reference").run()
    at.button(key=keys.GPU_RUN_BUTTON).click().run()
    assert_clean(at)
    assert not at.error
    doc = at.session_state[keys.GPU_LAST_RUN]["doc"]
    case = doc["cases"][0]
    assert case["config"]["contenders"] == [c for c in CONTENDERS if c in {*defaults, "reference"}]
    assert {r["name"]: r["ms"] for r in case["results"]}["fused"] == 1.0
    assert set(case["details"]) == {"fused", "sdd", "reference"}
    titles = chart_titles(at)
    for title in (
        "Speedup over dense attention",
        "Effective TFLOP/s",
        "Error against the fp64 reference, per head",
        "Effect of the segmentation",
    ):
        assert title in titles  # fmt: skip
    (stored,), _ = RunStore(data_dir).runs(design_digest(DESIGN))
    assert stored.doc == doc
    assert fake_gpu.status is None


def test_forward_backward_mode_times_a_step_and_shows_gradient_errors(data_dir, fake_gpu):
    at = open_panel()
    at.multiselect(key=keys.GPU_CONTENDER_PICK).set_value(["sdd", "sdpa"]).run()
    at.toggle(key=keys.GPU_BACKWARD).set_value(True).run()
    assert_clean(at)
    picker = at.multiselect(key=keys.GPU_BACKWARD_CONTENDER_PICK)
    assert list(picker.options) == list(BACKWARD_CONTENDERS)  # only those with a backward
    assert picker.value == settings.default_backward_contenders()
    picker.set_value(["fused", "flex", "sdpa_cudnn", "reference"]).run()
    at.button(key=keys.GPU_RUN_BUTTON).click().run()
    assert_clean(at)
    assert not at.error
    doc = at.session_state[keys.GPU_LAST_RUN]["doc"]
    case = doc["cases"][0]
    assert doc["mode"] == case["mode"] == "forward+backward" and case["config"]["backward"]
    assert case["config"]["contenders"] == ["fused", "flex", "sdpa_cudnn", "reference"]
    fused = next(r for r in case["results"] if r["name"] == "fused")
    assert fused["bwd_ms"] == 1.0 and 0 < fused["dq_rel_error"] < 1e-2
    grads = case["details"]["fused"]["grads"]
    assert [len(grads[g]["head_rel"]) for g in ("dq", "dk", "dv")] == [2, 2, 2]
    titles = chart_titles(at)
    assert "Gradient error against the fp64 reference, per head" in titles
    assert any(t.startswith("Effective TFLOP/s, forward + backward") for t in titles)
    table = at.dataframe[0].value
    assert {"fwd+bwd ms", "fwd ms", "bwd ms", "bwd TFLOP/s", "dq rel err"} <= set(table.columns)
    assert any("Forward + backward: one training step" in c.value for c in at.caption)
    (stored,), _ = RunStore(data_dir).runs(design_digest(DESIGN))
    assert stored.doc == doc
    at.toggle(key=keys.GPU_BACKWARD).set_value(False).run()  # each mode keeps its own pick
    assert at.multiselect(key=keys.GPU_CONTENDER_PICK).value == ["sdd", "sdpa"]
    at.toggle(key=keys.GPU_BACKWARD).set_value(True).run()
    assert at.multiselect(key=keys.GPU_BACKWARD_CONTENDER_PICK).value == [
        "fused", "flex", "sdpa_cudnn", "reference"
    ]  # fmt: skip


def test_refused_then_out_of_memory_then_the_next_run_works(data_dir, fake_gpu, monkeypatch):
    at = open_panel()
    at.number_input(key=keys.GPU_BATCH).set_value(1024).run()
    at.button(key=keys.GPU_RUN_BUTTON).click().run()
    assert_clean(at)
    assert at.error[0].value.startswith("Refused before launch: this case needs about")
    assert "but only 4.0 GiB are free" in at.error[0].value

    real = runner.run_benchmark

    def huge_fails(config, layout, **kwargs):
        if config.batch > 64:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 96.00 GiB")
        return real(config, layout, **kwargs)

    monkeypatch.setattr(runner, "run_benchmark", huge_fails)
    at.number_input(key=keys.GPU_MARGIN).set_value(0.0).run()
    at.button(key=keys.GPU_RUN_BUTTON).click().run()
    assert_clean(at)
    assert at.error[0].value == "Out of memory: CUDA out of memory. Tried to allocate 96.00 GiB"
    assert at.session_state[keys.HISTORY].present.layout == DESIGN.layout
    assert RunStore(data_dir).runs(design_digest(DESIGN)) == ([], [])

    at.number_input(key=keys.GPU_BATCH).set_value(1).run()
    at.button(key=keys.GPU_RUN_BUTTON).click().run()
    assert_clean(at)
    assert not at.error and at.session_state[keys.GPU_LAST_RUN]["doc"] is not None


def test_a_run_waits_for_another_session_and_says_so(data_dir, fake_gpu):
    holding, release = threading.Event(), threading.Event()

    def other_session():
        with fake_gpu.turn("someone's design", on_wait=print) as progress:
            progress("timing flex", 0.4)
            holding.set()
            release.wait(30)

    thread = threading.Thread(target=other_session)
    thread.start()
    try:
        holding.wait(5)
        at = open_panel()
        assert at.info[0].value.startswith(  # the other session's names are shown as text
            "Another session is running a benchmark: "
            + plain("someone's design: timing flex (40%)")
        )
        at.number_input(key=keys.GPU_WAIT_S).set_value(1).run()
        at.button(key=keys.GPU_RUN_BUTTON).click().run()
        assert_clean(at)
        assert at.error[0].value.startswith(
            "The GPU is still busy after 1 s (someone's design: timing flex (40%)"
        )
    finally:
        release.set()
        thread.join(5)
    at.button(key=keys.GPU_RUN_BUTTON).click().run()
    assert not at.error and at.session_state[keys.GPU_LAST_RUN]["doc"] is not None


def test_sweeps_over_length_and_density(data_dir, fake_gpu):
    at = open_panel()
    at.multiselect(key=keys.GPU_CONTENDER_PICK).set_value(["fused", "sdpa_cudnn"]).run()
    at.multiselect(key=keys.GPU_SWEEP_LENGTH_PICK).set_value([1024, 2048]).run()
    at.button(key=keys.GPU_SWEEP_BUTTON).click().run()
    assert_clean(at)
    doc = at.session_state[keys.GPU_LAST_SWEEP]["doc"]
    assert [c["config"]["seq_q"] for c in doc["cases"]] == [512, 1024, 2048]
    assert [c["sweep"]["kind"] for c in doc["cases"]] == ["current", "length", "length"]
    titles = chart_titles(at)
    assert "Speedup against sparsity" in titles and "Time against sequence length" in titles

    at.segmented_control(key=keys.GPU_SWEEP_KIND).set_value("density").run()
    at.multiselect(key=keys.GPU_SWEEP_FACTOR_PICK).set_value([2.0]).run()
    at.button(key=keys.GPU_SWEEP_BUTTON).click().run()
    assert_clean(at)
    doc = at.session_state[keys.GPU_LAST_SWEEP]["doc"]
    kinds = sorted(c["sweep"]["kind"] for c in doc["cases"])
    assert kinds == ["current", "random", "random", "scaled"]
    runs, _ = RunStore(data_dir).runs(design_digest(DESIGN))
    assert [r.doc["kind"] for r in runs] == ["sweep", "sweep"]


def test_the_h200_check_script_passes_against_a_stand_in_gpu(data_dir, fake_gpu, monkeypatch):
    """``tools/app_check.py`` end to end: the standard case shrunk to 16 heads x 512 tokens,
    a 1 GiB "GPU", the command line's numbers made by the same fake harness."""
    import tools.app_check as app_check
    from gpu.bench import cases, document, run_benchmark
    from ui import common

    monkeypatch.setattr(cases, "QUICK_SEQ_LEN", 512)
    monkeypatch.setattr(common, "load_default_design", lambda: DESIGN)
    monkeypatch.setattr(app_check, "unavailable_reason", lambda: None)
    monkeypatch.setattr(peers, "missing", lambda name: None)  # the stand-in has every peer
    monkeypatch.setattr(app_check, "gpu_memory", lambda: (GiB, GiB))
    for module in (panel, runner):
        monkeypatch.setattr(module, "free_gpu_bytes", lambda: GiB)
    real = runner.run_benchmark

    def huge_fails(config, layout, **kwargs):
        if config.batch > 64:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.50 GiB")
        return real(config, layout, **kwargs)

    monkeypatch.setattr(runner, "run_benchmark", huge_fails)
    case = cases.find_case("banded_7pct-b128-d64")
    contenders = app_check.contenders_for(app_check.parser().parse_args(["--out", "-"]), case)
    config = replace(case.config(quick=True), device="cpu", contenders=contenders)
    session = BenchSession(torch.device("cpu"), timer=fake_gpu.bench_session(True).timer)
    cli = run_benchmark(config, case.layout(quick=True), name=case.name, session=session)
    cli_path = data_dir / "cli.json"
    cli_path.write_bytes(document_bytes(document([cli], env={"gpu": "stand-in"})))
    out = data_dir / "summary.json"
    status = app_check.main(["--out", str(out), "--quick", "--cli-json", str(cli_path)])
    summary = json.loads(out.read_text())
    failed = [c for c in summary["checks"] if not c["ok"]]
    assert status == 0 and not failed, failed
    names = [c["name"] for c in summary["checks"]]
    assert "too large: refused before launch with the estimate" in names
    assert "margin 0: really out of memory, message shown" in names
    assert "after out of memory: ms within ±15% of the command line" in names
    assert "two runs overlaid" in names and len(names) >= 20
    assert "panel run: every peer measured, checked against fp64 and in the speedup chart" in names
    assert {"flex_flash", "cudnn_bsa"} <= set(summary["config"]["contenders"])
    assert [row["ratio"] for row in summary["panel run table"]] == [1.0] * len(config.contenders)


def test_the_cpu_check_checks_gradients_in_forward_backward_mode(data_dir, no_gpu):
    at = open_panel()
    assert at.warning[0].value.startswith("The GPU benchmark cannot run on this machine")
    at.toggle(key=keys.GPU_BACKWARD).set_value(True).run()
    caption = next(c.value for c in at.caption if "impl=" in c.value)
    assert "forward then backward: dq, dk and dv against fp64 gradients" in caption
    at.button(key=keys.GPU_CPU_BUTTON).click().run()
    assert_clean(at)
    case = at.session_state[keys.GPU_LAST_CPU_CHECK]["doc"]["cases"][0]
    assert case["mode"] == "forward+backward" and case["results"][0]["dq_rel_error"] < 1e-2
    assert "Gradient error against the fp64 reference, per head" in chart_titles(at)


def test_the_cpu_check_says_what_it_checks_and_shows_only_numbers_that_mean_something(
    data_dir, no_gpu
):
    at = open_panel()
    at.selectbox(key=keys.GPU_DTYPE).set_value("bf16").run()
    caption = next(c.value for c in at.caption if "impl=" in c.value)
    assert "on bf16 q, k and v" in caption and "returning bf16" in caption
    at.button(key=keys.GPU_CPU_BUTTON).click().run()
    assert_clean(at)
    said = " ".join(c.value for c in at.caption)
    assert "top-left 512 × 512 tokens of heads 0–1" in said and "the whole design:" in said
    labels = {m.label for m in at.metric}
    assert {"Relative error", "Max abs error", "Took"} <= labels
    assert not {"Token density", "Ideal speedup", "Best speedup"} & labels  # crop or no baseline
    assert at.success[-1].value == "Every error is within its limit."
    assert not any("TFLOP/s" in str(frame.value.columns) for frame in at.dataframe)
    charts = {
        json.loads(c.proto.spec)["layout"]["title"]["text"]: c.proto for c in at.get("plotly_chart")
    }
    assert charts["reference: largest error per query-block row"].theme == ""  # its own colours


@pytest.mark.skipif(torch.cuda.is_available(), reason="the reason is only given without a GPU")
def test_without_a_cuda_gpu_the_panel_says_so_before_anything_else(data_dir):
    runtime.unavailable_reason.cache_clear()
    at = open_panel()
    warning = at.warning[0].value
    assert warning.startswith("The GPU benchmark cannot run on this machine: no CUDA GPU")


def test_an_out_of_range_setting_is_named_not_ignored(data_dir, fake_gpu):
    at = open_panel()
    at.number_input(key=keys.GPU_BATCH).set_value(0).run()
    assert_clean(at)
    assert any("batch must be in [1, 1024], got 0" in e.value for e in at.error)
    assert at.button(key=keys.GPU_RUN_BUTTON).disabled
