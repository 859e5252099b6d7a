"""The GPU benchmark panel: our kernels on the design on screen, against dense attention.

A fragment, so a run reruns only this panel. The settings build a ``BenchConfig`` and the run
goes through the same harness as ``python -m gpu.bench`` (``gpu.bench.runner``), one run at a
time for the whole server: a session that has to wait says so. Every run and sweep is stored
with the design (``gpu.bench.store``) and shown by ``views``. Without a GPU the panel
says why, runs the reference implementation against fp64 on the CPU at a small size, and still
shows the stored results.
"""

from __future__ import annotations

import streamlit as st

from designer.analysis import design_digest
from designer.design import Design
from designer.storage import DesignStore
from designer.units import bytes_text
from gpu import unavailable_reason
from gpu.bench import BenchConfig
from gpu.bench.details import CPU_CHECK_HEADS, CPU_CHECK_TOKENS, cpu_check
from gpu.bench.runner import GpuCoordinator, case_estimate, free_gpu_bytes
from gpu.bench.store import RunStore
from gpu.support import BLOCK_SIZES, HEAD_DIMS
from ui import keys, state
from ui.bench.run import run_tab_ui, sweep_tab_ui
from ui.bench.settings import (
    bench_config,
    check_run_settings,
    contender_key,
    offered_contenders,
    panel_defaults,
)
from ui.bench.views import cpu_check_ui, stored_ui
from ui.text import plain

INSTALL_HELP = (
    "To run it you need an NVIDIA GPU of compute capability 8.0 or newer (Ampere, Ada, Hopper), "
    'a CUDA build of PyTorch, and CuPy for your CUDA version: `pip install -e ".[cuda13]"` '
    '(CUDA 13) or `pip install -e ".[cuda12]"` (CUDA 12). The rest of the app does not need it.'
)


@st.cache_resource(show_spinner=False)
def shared_coordinator() -> GpuCoordinator:
    """The one coordinator of this server: its lock serialises runs across browser sessions."""
    return GpuCoordinator()


@st.fragment
def gpu_panel_ui(store: DesignStore) -> None:
    """Draw the panel for the current design."""
    session = st.session_state
    current = state.design(session)
    state.fill_defaults(
        session, {**panel_defaults(current), **session.get(keys.GPU_REMEMBERED, {})}
    )
    if (
        session.get(keys.GPU_CAUSAL_FROM, current.causal) != current.causal
    ):  # the design's flag changed
        session[keys.GPU_CAUSAL] = current.causal
    session[keys.GPU_CAUSAL_FROM] = current.causal
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
        st.info(
            f"Another session is running a benchmark: {plain(coordinator.status.describe())}. "
            "A run started now waits for it.",
            icon="⏳",
        )
    config = _settings_ui(current)
    run, sweep, stored = st.tabs(["Run", "Sweep", "Stored runs"])
    with run:
        run_tab_ui(coordinator, config, current, runs)
    with sweep:
        sweep_tab_ui(coordinator, config, current, runs)
    with stored:
        stored_ui(runs, current)
    _remember(current)


def _remember(current: Design) -> None:
    session = st.session_state
    session[keys.GPU_REMEMBERED] = {
        key: session[key] for key in panel_defaults(current) if key in session
    }


def _settings_ui(current: Design) -> BenchConfig | None:
    """The benchmark settings; None (with the reason shown) when they do not make a config."""
    session = st.session_state
    top = st.columns([1, 1, 1, 1, 1.4, 4], vertical_alignment="bottom")
    top[0].number_input("Batch", step=1, key=keys.GPU_BATCH)
    top[1].selectbox("Head dim", HEAD_DIMS, key=keys.GPU_HEAD_DIM)
    top[2].selectbox("dtype", ("bf16", "fp16"), key=keys.GPU_DTYPE)
    top[3].toggle(
        "Causal", key=keys.GPU_CAUSAL, help="Mask q < k inside blocks (the design's flag)."
    )
    backward = _mode_toggle(top[4])
    top[5].multiselect(
        "Contenders",
        offered_contenders(backward),
        key=contender_key(backward),
        help="fused / sdd: ours; sdd_w1: SDD at start width 1; flex / flex_tuned: "
        "FlexAttention on Triton; flex_flash: FlexAttention on FlashAttention-4; cudnn_bsa: "
        "cuDNN's block-sparse attention; fa4: FlashAttention-4's own call; sdpa*: dense PyTorch "
        'attention. flex_flash, cudnn_bsa and fa4 need `pip install -e ".[peers]"` (Hopper). '
        "Each contender is checked against fp64 before it is timed"
        + ("; forward + backward offers those with a backward pass" if backward else ""),
    )
    with st.expander("Method and safety"):
        cols = st.columns(7, vertical_alignment="bottom")
        cols[0].number_input("Warm-up runs", step=1, key=keys.GPU_WARMUP)
        cols[1].number_input("Timed runs", step=1, key=keys.GPU_REPS)
        cols[2].number_input("Seed", step=1, key=keys.GPU_SEED)
        cols[3].number_input(
            "Memory margin",
            step=0.05,
            key=keys.GPU_MARGIN,
            help="Refuse a run when margin × estimate exceeds "
            "the free GPU memory; 0 skips the check.",
        )
        cols[4].toggle("Flush L2", key=keys.GPU_FLUSH, help="Write 256 MiB before each timed run.")
        cols[5].toggle(
            "Check errors", key=keys.GPU_CHECK_ERROR, help="Compare with the fp64 reference."
        )
        cols[6].number_input(
            "Wait for the GPU (s)",
            step=1,
            key=keys.GPU_WAIT_S,
            help="How long a run waits while another session's run holds the GPU.",
        )
    if not session[contender_key(backward)]:
        st.info("Pick at least one contender.")
        return None
    try:
        config = bench_config(current, session)
        check_run_settings(session)
    except (ValueError, TypeError) as error:
        st.error(f"These settings cannot be benchmarked: {error}", icon="⚠️")
        return None
    estimate = case_estimate(config, current)
    st.caption(
        f"Needs about {bytes_text(estimate.total)} of GPU memory; "
        f"{bytes_text(free_gpu_bytes())} free. " + _kernel_note(current)
    )
    return config


def _mode_toggle(place) -> bool:
    """The forward + backward switch; True when on."""
    return place.toggle(
        "Forward + backward",
        key=keys.GPU_BACKWARD,
        help="Time one training step's attention: the forward, then the backward with a fixed "
        "random output gradient. TFLOP/s count the backward as 2.5× the forward's FLOPs; dq, "
        "dk and dv are checked against fp64 per head.",
    )


def _kernel_note(design: Design) -> str:
    if design.layout.block_size in BLOCK_SIZES:
        return ""
    return (
        f"Our kernels take blocks of {', '.join(map(str, BLOCK_SIZES))} tokens; this design's "
        f"{design.layout.block_size} will be reported as failed for fused and sdd."
    )


def _cpu_check_ui(current: Design) -> None:
    session = st.session_state
    left, right, mode, button = st.columns([1, 1, 1.4, 2], vertical_alignment="bottom")
    left.selectbox("Head dim", HEAD_DIMS, key=keys.GPU_HEAD_DIM)
    dtype = right.selectbox("dtype", ("bf16", "fp16"), key=keys.GPU_DTYPE)
    backward = _mode_toggle(mode)
    st.caption(
        f'Checks that the layout masks what it should: our reference (`impl="reference"`, '
        f"dense masked torch on {dtype} q, k and v, accumulating in fp32 and returning {dtype}) "
        f"against fp64 attention under the same blocks, on the design's top-left "
        f"{CPU_CHECK_TOKENS} tokens (up to {CPU_CHECK_HEADS} heads)"
        + (", forward then backward: dq, dk and dv against fp64 gradients" if backward else "")
        + ". Our CUDA kernels and their speed need a GPU."
    )
    if button.button("Run the CPU check", key=keys.GPU_CPU_BUTTON, icon=":material/play_arrow:"):
        with st.spinner("Computing on the CPU…"):
            doc = cpu_check(
                current, head_dim=session[keys.GPU_HEAD_DIM], dtype=session[keys.GPU_DTYPE],
                backward=backward,
            )  # fmt: skip
        session[keys.GPU_LAST_CPU_CHECK] = {
            "digest": design_digest(current),
            "doc": doc,
            "error": None,
        }
    last = session.get(keys.GPU_LAST_CPU_CHECK)
    if last is not None:
        if last["digest"] != design_digest(current):
            st.caption("This check ran on an earlier version of the design.")
        cpu_check_ui(last["doc"], current.layout.density, prefix="cpu")
