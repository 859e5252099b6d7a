"""The GPU benchmark panel: our kernels on the design on screen, against dense attention.

A fragment, so a run reruns only this panel. The settings build a ``BenchConfig`` and the run
goes through the same harness as ``python -m gpu.bench`` (``gpu_panel_runner``), one run at a
time for the whole server: a session that has to wait says so. Every run and sweep is stored
with the design (``gpu_panel_store``) and shown by ``gpu_panel_views``. Without a GPU the panel
says why, runs the reference implementation against fp64 on the CPU at a small size, and still
shows the stored results.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import streamlit as st

from designer.design import Design
from designer.ui import state
from designer.ui.analysis import design_digest
from designer.ui.gpu_panel_errors import CPU_CHECK_TOKENS, cpu_check
from designer.ui.gpu_panel_estimate import DEFAULT_MARGIN, MAX_MARGIN, estimate_memory
from designer.ui.gpu_panel_runner import (
    DEFAULT_WAIT_S,
    GpuBusy,
    GpuCoordinator,
    Measurement,
    case_dict,
    free_gpu_bytes,
    measure,
    run_document,
)
from designer.ui.gpu_panel_store import RunStore
from designer.ui.gpu_panel_sweep import (
    DENSITY_FACTORS,
    SWEEP_LENGTHS,
    SweepPoint,
    density_points,
    length_points,
    random_points,
)
from designer.ui.gpu_panel_views import case_ui, download_ui, stored_ui, sweep_ui
from designer.ui.stats_ui import _bytes_text as bytes_text
from designer.ui.storage import DesignStore
from gpu import unavailable_reason
from gpu.api import CUDA_BLOCK_SIZES, CUDA_HEAD_DIMS
from gpu.bench import CONTENDERS, DEFAULT_CONTENDERS, BenchConfig

# ----------------------------------------------------------------- session-state keys
BATCH, HEAD_DIM, DTYPE, CAUSAL, CONTENDER_PICK = (
    "gpu_batch", "gpu_head_dim", "gpu_dtype", "gpu_causal", "gpu_contenders"
)  # fmt: skip
WARMUP, REPS, FLUSH, SEED, MARGIN, CHECK_ERROR, WAIT_S = (
    "gpu_warmup", "gpu_reps", "gpu_flush", "gpu_seed", "gpu_margin", "gpu_check_error",
    "gpu_wait_s",
)  # fmt: skip
#: The design's causal flag the causal toggle was last set from.
CAUSAL_FROM = "gpu_causal_from"
#: The widgets' values as last drawn: Streamlit forgets a widget's value while its tab is
#: hidden, and the panel restores them from here.
REMEMBERED = "gpu_remembered"
SWEEP_KIND, SWEEP_LENGTH_PICK, SWEEP_FACTOR_PICK, SWEEP_RANDOM, SWEEP_CHECK = (
    "gpu_sweep_kind", "gpu_sweep_lengths", "gpu_sweep_factors", "gpu_sweep_random",
    "gpu_sweep_check",
)  # fmt: skip
#: ``{"digest", "doc", "error"}`` of the last run / sweep / CPU check of this session.
LAST_RUN, LAST_SWEEP, LAST_CPU_CHECK = "gpu_last_run", "gpu_last_sweep", "gpu_last_cpu_check"
RUN_BUTTON, SWEEP_BUTTON, CPU_BUTTON = "gpu_run", "gpu_sweep_run", "gpu_cpu_check_run"
SWEEP_KINDS = ("sequence length", "density")
INSTALL_HELP = (
    "To run it you need an NVIDIA GPU of compute capability 8.0 or newer (Ampere, Ada, Hopper), "
    'a CUDA build of PyTorch, and CuPy for your CUDA version: `pip install -e ".[cuda13]"` '
    '(CUDA 13) or `pip install -e ".[cuda12]"` (CUDA 12). The rest of the app does not need it.'
)


@st.cache_resource(show_spinner=False)
def shared_coordinator() -> GpuCoordinator:
    """The one coordinator of this server: its lock serialises runs across browser sessions."""
    return GpuCoordinator()


def flex_installed() -> bool:
    """Whether the installed torch has FlexAttention."""
    return importlib.util.find_spec("torch.nn.attention.flex_attention") is not None


def offered_contenders() -> tuple[str, ...]:
    """Contenders a user can pick here, in the harness's order."""
    return tuple(c for c in CONTENDERS if not c.startswith("flex") or flex_installed())


def default_contenders(design: Design) -> list[str]:
    """The harness's defaults, plus SDD at start width 1 when the design's start width is
    larger (to show what the segmentation buys)."""
    chosen = [c for c in DEFAULT_CONTENDERS if c in offered_contenders()]
    return chosen + (["sdd_w1"] if design.effective_start_width > 1 else [])


def panel_defaults(design: Design) -> dict[str, Any]:
    """Every panel widget's starting value (the harness's standard method)."""
    return {
        BATCH: 1, HEAD_DIM: 64, DTYPE: "bf16", CAUSAL: design.causal, CAUSAL_FROM: design.causal,
        CONTENDER_PICK: default_contenders(design), WARMUP: 3, REPS: 10, FLUSH: True, SEED: 0,
        MARGIN: DEFAULT_MARGIN, CHECK_ERROR: True, WAIT_S: int(DEFAULT_WAIT_S),
        SWEEP_KIND: SWEEP_KINDS[0],
        SWEEP_LENGTH_PICK: [1024, 4096, 16384], SWEEP_FACTOR_PICK: list(DENSITY_FACTORS),
        SWEEP_RANDOM: True, SWEEP_CHECK: False,
    }  # fmt: skip


def bench_config(design: Design, values: Mapping[str, Any]) -> BenchConfig:
    """The ``BenchConfig`` the widget ``values`` describe for ``design``'s layout."""
    layout = design.layout
    picked = values[CONTENDER_PICK]
    return BenchConfig(
        batch=values[BATCH],
        heads=layout.n_heads,
        seq_q=layout.seq_len_q,
        seq_k=None if layout.seq_len_k == layout.seq_len_q else layout.seq_len_k,
        head_dim=values[HEAD_DIM],
        dtype=values[DTYPE],
        causal=values[CAUSAL],
        contenders=tuple(c for c in CONTENDERS if c in picked),
        warmup=values[WARMUP],
        reps=values[REPS],
        flush_l2=values[FLUSH],
        start_width=design.start_width,
        seed=values[SEED],
        check_error=values[CHECK_ERROR],
    )


@st.fragment
def gpu_panel_ui(store: DesignStore) -> None:
    """Draw the panel for the current design."""
    session = st.session_state
    current = state.design(session)
    state.fill_defaults(session, {**panel_defaults(current), **session.get(REMEMBERED, {})})
    if session[CAUSAL_FROM] != current.causal:  # the design's flag changed: follow it
        session[CAUSAL] = session[CAUSAL_FROM] = current.causal
    runs = RunStore(store.root)
    reason = unavailable_reason()
    if reason is not None:
        st.warning(f"The GPU benchmark cannot run on this machine: {reason}", icon="⚠️")
        st.markdown(INSTALL_HELP)
        check, stored = st.tabs(["Correctness check on the CPU", "Stored runs"])
        with check:
            _cpu_check_ui(current)
        with stored:
            stored_ui(runs, current)
        _remember(current)
        return
    coordinator = shared_coordinator()
    if coordinator.status is not None:
        st.info(f"Another session is running a benchmark: {coordinator.status.describe()}. "
                "A run started now waits for it.", icon="⏳")  # fmt: skip
    config = _settings_ui(current)
    run, sweep, stored = st.tabs(["Run", "Sweep", "Stored runs"])
    with run:
        _run_ui(coordinator, config, current, runs)
    with sweep:
        _sweep_ui(coordinator, config, current, runs)
    with stored:
        stored_ui(runs, current)
    _remember(current)


def _remember(current: Design) -> None:
    session = st.session_state
    session[REMEMBERED] = {key: session[key] for key in panel_defaults(current) if key in session}


def _settings_ui(current: Design) -> BenchConfig | None:
    """The benchmark settings; None (with the reason shown) when they do not make a config."""
    session = st.session_state
    top = st.columns([1, 1, 1, 1, 4], vertical_alignment="bottom")
    top[0].number_input("Batch", min_value=1, max_value=1024, key=BATCH)
    top[1].selectbox("Head dim", CUDA_HEAD_DIMS, key=HEAD_DIM)
    top[2].selectbox("dtype", ("bf16", "fp16"), key=DTYPE)
    top[3].toggle("Causal", key=CAUSAL, help="Mask q < k inside blocks (the design's flag).")
    top[4].multiselect("Contenders", offered_contenders(), key=CONTENDER_PICK,
                       help="fused / sdd: ours; sdd_w1: SDD at start width 1; flex: "
                       "FlexAttention; sdpa*: dense PyTorch attention")  # fmt: skip
    with st.expander("Method and safety"):
        cols = st.columns(7, vertical_alignment="bottom")
        cols[0].number_input("Warm-up runs", min_value=0, max_value=1000, key=WARMUP)
        cols[1].number_input("Timed runs", min_value=1, max_value=10000, key=REPS)
        cols[2].number_input("Seed", min_value=0, max_value=2**31, key=SEED)
        cols[3].number_input("Memory margin", min_value=0.0, max_value=MAX_MARGIN, step=0.05,
                             key=MARGIN, help="Refuse a run when margin × estimate exceeds "
                             "the free GPU memory; 0 skips the check.")  # fmt: skip
        cols[4].toggle("Flush L2", key=FLUSH, help="Write 256 MiB before each timed run.")
        cols[5].toggle("Check errors", key=CHECK_ERROR, help="Compare with the fp64 reference.")
        cols[6].number_input("Wait for the GPU (s)", min_value=1, max_value=3600, key=WAIT_S,
                             help="How long a run waits while another session's run holds "
                             "the GPU.")  # fmt: skip
    if not session[CONTENDER_PICK]:
        st.info("Pick at least one contender.")
        return None
    try:
        config = bench_config(current, session)
    except (ValueError, TypeError) as error:
        st.error(f"These settings cannot be benchmarked: {error}", icon="⚠️")
        return None
    estimate = estimate_memory(config, _broadcast_nnz(current, config), current.layout.block_size)
    st.caption(
        f"Needs about {bytes_text(estimate.total)} of GPU memory; "
        f"{bytes_text(free_gpu_bytes())} free. " + _kernel_note(current)
    )
    return config


def _broadcast_nnz(design: Design, config: BenchConfig) -> int:
    layout = design.layout
    return layout.nnz * (config.heads if layout.n_heads == 1 else 1)


def _kernel_note(design: Design) -> str:
    if design.layout.block_size in CUDA_BLOCK_SIZES:
        return ""
    return (
        f"Our kernels take blocks of {', '.join(map(str, CUDA_BLOCK_SIZES))} tokens; this design's "
        f"{design.layout.block_size} will be reported as failed for fused and sdd."
    )


def _hold_gpu(coordinator: GpuCoordinator, what: str, work) -> Any:
    """Run ``work(progress)`` holding the GPU, with a progress bar and a visible wait (up to
    the wait setting; then ``GpuBusy``)."""
    bar = st.progress(0.0, text="Waiting for the GPU…")
    waiting = st.empty()

    def on_wait(status) -> None:
        waiting.info(f"Waiting for another run to finish: {status.describe()}", icon="⏳")

    try:
        wait_s = st.session_state[WAIT_S]
        with coordinator.turn(what, on_wait=on_wait, wait_s=wait_s) as report:
            waiting.empty()

            def progress(stage: str, fraction: float) -> None:
                report(stage, fraction)
                bar.progress(min(max(fraction, 0.0), 1.0), text=f"{what}: {stage}")

            return work(progress)
    finally:
        bar.empty()
        waiting.empty()


def _run_ui(coordinator, config: BenchConfig | None, current: Design, runs: RunStore) -> None:
    session = st.session_state
    clicked = st.button("Run benchmark", key=RUN_BUTTON, type="primary", disabled=config is None,
                        icon=":material/play_arrow:")  # fmt: skip
    if clicked and config is not None:
        session[LAST_RUN] = _run_case(coordinator, config, current, runs)
    last = session.get(LAST_RUN)
    if last is None:
        return
    if last["digest"] != design_digest(current):
        st.caption("The last run measured an earlier version of the design.")
    if last["error"]:
        st.error(last["error"], icon="🛑")
    if last["doc"] is not None:
        case_ui(last["doc"]["cases"][0], start_width=current.effective_start_width, prefix="run")
        download_ui(last["doc"], f"{current.name}-run.json", key="run_download")


def _run_case(coordinator, config: BenchConfig, current: Design, runs: RunStore) -> dict:
    digest = design_digest(current)
    record: dict[str, Any] = {"digest": digest, "doc": None, "error": None}
    try:
        measurement: Measurement = _hold_gpu(
            coordinator, current.name,
            lambda progress: measure(coordinator, config, current,
                                     margin=st.session_state[MARGIN], progress=progress),
        )  # fmt: skip
    except GpuBusy as error:
        record["error"] = str(error)
        return record
    record["error"] = measurement.error
    if measurement.result is not None:
        record["doc"] = run_document([case_dict(measurement)], current, "run")
        record["error"] = _store(runs, digest, record["doc"], measurement.error)
    return record


def _store(runs: RunStore, digest: str, doc: dict, error: str | None) -> str | None:
    try:
        runs.save(digest, doc)
    except OSError as failure:
        return "\n\n".join(filter(None, [error, f"The run could not be stored: {failure}"]))
    return error


def _sweep_ui(coordinator, config: BenchConfig | None, current: Design, runs: RunStore) -> None:
    session = st.session_state
    kind = st.segmented_control("Sweep over", SWEEP_KINDS, key=SWEEP_KIND) or SWEEP_KINDS[0]
    if kind == SWEEP_KINDS[0]:
        st.multiselect("Sequence lengths (tokens)", SWEEP_LENGTHS, key=SWEEP_LENGTH_PICK)
        points, notes = length_points(current, tuple(session[SWEEP_LENGTH_PICK]) or (1024,))
    else:
        st.multiselect("Density factors (the pattern's size parameters × factor)",
                       DENSITY_FACTORS, key=SWEEP_FACTOR_PICK)  # fmt: skip
        st.toggle("Also random layouts of the same density", key=SWEEP_RANDOM)
        points, notes = density_points(current, tuple(session[SWEEP_FACTOR_PICK]))
        if session[SWEEP_RANDOM]:
            points = points + random_points(points)
    st.toggle("Check errors at every point (one fp64 reference each)", key=SWEEP_CHECK)
    for note in notes:
        st.caption(f"Not in the sweep: {note}")
    st.caption(f"{len(points)} cases. FlexAttention compiles once per sequence length.")
    clicked = st.button("Run sweep", key=SWEEP_BUTTON, type="primary", disabled=config is None,
                        icon=":material/play_arrow:")  # fmt: skip
    if clicked and config is not None:
        config = replace(config, check_error=session[SWEEP_CHECK])
        session[LAST_SWEEP] = _run_sweep(coordinator, config, current, points, notes, runs)
    last = session.get(LAST_SWEEP)
    if last is not None:
        if last["error"]:
            st.error(last["error"], icon="🛑")
        if last["doc"] is not None:
            sweep_ui(last["doc"], prefix="sweep")
            download_ui(last["doc"], f"{current.name}-sweep.json", key="sweep_download")


def _run_sweep(coordinator, config, current, points: list[SweepPoint], notes, runs) -> dict:
    digest = design_digest(current)

    def work(progress) -> tuple[list[dict], list[str]]:
        cases, skipped = [], list(notes)
        for i, point in enumerate(points):
            layout = point.design.layout
            point_config = replace(config, heads=layout.n_heads, seq_q=layout.seq_len_q,
                                   seq_k=layout.seq_len_k)  # fmt: skip

            def step(stage: str, fraction: float, i: int = i, label: str = point.label) -> None:
                progress(f"{label} ({i + 1}/{len(points)}) {stage}", (i + fraction) / len(points))

            measurement = measure(coordinator, point_config, point.design,
                                  margin=st.session_state[MARGIN], progress=step,
                                  with_details=False)  # fmt: skip
            if measurement.result is None:
                skipped.append(f"{point.label}: {measurement.error}")
                continue
            sweep = {"kind": point.kind, "label": point.label, "value": point.value}
            cases.append(case_dict(measurement, sweep=sweep))
        return cases, skipped

    record: dict[str, Any] = {"digest": digest, "doc": None, "error": None}
    try:
        cases, skipped = _hold_gpu(coordinator, f"{current.name} sweep", work)
    except GpuBusy as error:
        record["error"] = str(error)
        return record
    if not cases:
        record["error"] = "Nothing was measured:\n\n" + "\n\n".join(skipped)
        return record
    doc = run_document(cases, current, "sweep")
    doc["notes"] = skipped
    record["doc"] = doc
    record["error"] = _store(runs, digest, doc, None)
    return record


def _cpu_check_ui(current: Design) -> None:
    session = st.session_state
    st.caption(
        'Runs our reference implementation (`impl="reference"`, fp32) against the fp64 '
        f"reference on the CPU, on the first {CPU_CHECK_TOKENS} tokens of each side of the "
        "design (up to 16 heads)."
    )
    left, right, button = st.columns([1, 1, 2], vertical_alignment="bottom")
    left.selectbox("Head dim", CUDA_HEAD_DIMS, key=HEAD_DIM)
    right.selectbox("dtype", ("bf16", "fp16"), key=DTYPE)
    if button.button("Run the CPU check", key=CPU_BUTTON, icon=":material/play_arrow:"):
        with st.spinner("Computing on the CPU…"):
            doc = cpu_check(current, head_dim=session[HEAD_DIM], dtype=session[DTYPE])
        session[LAST_CPU_CHECK] = {"digest": design_digest(current), "doc": doc, "error": None}
    last = session.get(LAST_CPU_CHECK)
    if last is not None:
        if last["digest"] != design_digest(current):
            st.caption("This check ran on an earlier version of the design.")
        case_ui(last["doc"]["cases"][0], start_width=current.effective_start_width, prefix="cpu")
