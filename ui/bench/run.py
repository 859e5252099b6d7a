"""The Run and Sweep tabs: the button, the wait for the GPU, the progress bar, the result.

A run holds the server's one GPU lock (``GpuCoordinator.turn``); while another session holds
it, the tab says whose run it waits for. Each measured run or sweep is stored with the design
and kept in the session (``keys.GPU_LAST_RUN``,
``keys.GPU_LAST_SWEEP``) to be shown until the next one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import streamlit as st

from designer.analysis import design_digest
from designer.design import Design
from designer.sweep import (
    DENSITY_FACTORS,
    SWEEP_LENGTHS,
    SweepPoint,
    density_points,
    length_points,
    random_points,
)
from gpu.bench import BenchConfig
from gpu.bench.runner import (
    GpuBusy,
    GpuCoordinator,
    Progress,
    RunStatus,
    case_dict,
    measure,
    run_document,
)
from gpu.bench.store import RunStore
from ui import keys
from ui.bench.settings import (
    SWEEP_KINDS,
    config_for,
)
from ui.bench.views import (
    case_ui,
    download_ui,
    sweep_ui,
)


def hold_gpu(coordinator: GpuCoordinator, what: str, work: Callable[[Progress], Any]) -> Any:
    """Run ``work(progress)`` holding the GPU, with a progress bar and a visible wait (up to
    the wait setting; then ``GpuBusy``)."""
    bar = st.progress(0.0, text="Waiting for the GPU…")
    waiting = st.empty()

    def on_wait(status: RunStatus) -> None:
        waiting.info(f"Waiting for another run to finish: {status.describe()}", icon="⏳")

    try:
        wait_s = st.session_state[keys.GPU_WAIT_S]
        with coordinator.turn(what, on_wait=on_wait, wait_s=wait_s) as report:
            waiting.empty()

            def progress(stage: str, fraction: float) -> None:
                report(stage, fraction)
                bar.progress(min(max(fraction, 0.0), 1.0), text=f"{what}: {stage}")

            return work(progress)
    finally:
        bar.empty()
        waiting.empty()


def run_tab_ui(
    coordinator: GpuCoordinator, config: BenchConfig | None, current: Design, runs: RunStore
) -> None:
    """The run button and the last run's result."""
    session = st.session_state
    clicked = st.button(
        "Run benchmark",
        key=keys.GPU_RUN_BUTTON,
        type="primary",
        disabled=config is None,
        icon=":material/play_arrow:",
    )
    if clicked and config is not None:
        session[keys.GPU_LAST_RUN] = _run_case(coordinator, config, current, runs)
    last = session.get(keys.GPU_LAST_RUN)
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
    margin = st.session_state[keys.GPU_MARGIN]
    try:
        measurement = hold_gpu(
            coordinator,
            current.name,
            lambda progress: measure(
                coordinator, config, current, margin=margin, progress=progress
            ),
        )
    except GpuBusy as error:
        record["error"] = str(error)
        return record
    record["error"] = measurement.error
    if measurement.result is not None:
        record["doc"] = run_document([case_dict(measurement)], current.name, digest, "run")
        record["error"] = _store(runs, digest, record["doc"], measurement.error)
    return record


def _store(runs: RunStore, digest: str, doc: dict, error: str | None) -> str | None:
    """Store ``doc``; the message to show (``error``, plus why storing failed if it did)."""
    try:
        runs.save(digest, doc)
    except OSError as failure:
        return "\n\n".join(filter(None, [error, f"The run could not be stored: {failure}"]))
    return error


def sweep_tab_ui(
    coordinator: GpuCoordinator, config: BenchConfig | None, current: Design, runs: RunStore
) -> None:
    """What to sweep, the button, and the last sweep's charts."""
    session = st.session_state
    kind = (
        st.segmented_control("Sweep over", SWEEP_KINDS, key=keys.GPU_SWEEP_KIND) or SWEEP_KINDS[0]
    )
    if kind == SWEEP_KINDS[0]:
        st.multiselect("Sequence lengths (tokens)", SWEEP_LENGTHS, key=keys.GPU_SWEEP_LENGTH_PICK)
        points, notes = length_points(
            current, tuple(session[keys.GPU_SWEEP_LENGTH_PICK]) or (1024,)
        )
    else:
        st.multiselect(
            "Density factors (the pattern's size parameters × factor)",
            DENSITY_FACTORS,
            key=keys.GPU_SWEEP_FACTOR_PICK,
        )
        st.toggle("Also random layouts of the same density", key=keys.GPU_SWEEP_RANDOM)
        points, notes = density_points(current, tuple(session[keys.GPU_SWEEP_FACTOR_PICK]))
        if session[keys.GPU_SWEEP_RANDOM]:
            points = points + random_points(points)
    st.toggle("Check errors at every point (one fp64 reference each)", key=keys.GPU_SWEEP_CHECK)
    for note in notes:
        st.caption(f"Not in the sweep: {note}")
    st.caption(f"{len(points)} cases. FlexAttention compiles once per sequence length.")
    clicked = st.button(
        "Run sweep",
        key=keys.GPU_SWEEP_BUTTON,
        type="primary",
        disabled=config is None,
        icon=":material/play_arrow:",
    )
    if clicked and config is not None:
        config = replace(config, check_error=session[keys.GPU_SWEEP_CHECK])
        session[keys.GPU_LAST_SWEEP] = _run_sweep(coordinator, config, current, points, notes, runs)
    last = session.get(keys.GPU_LAST_SWEEP)
    if last is not None:
        if last["error"]:
            st.error(last["error"], icon="🛑")
        if last["doc"] is not None:
            sweep_ui(last["doc"], prefix="sweep")
            download_ui(last["doc"], f"{current.name}-sweep.json", key="sweep_download")


def _run_sweep(coordinator, config, current, points: list[SweepPoint], notes, runs) -> dict:
    digest = design_digest(current)
    margin = st.session_state[keys.GPU_MARGIN]

    def work(progress: Progress) -> tuple[list[dict], list[str]]:
        cases, skipped = [], list(notes)
        for i, point in enumerate(points):

            def step(stage: str, fraction: float, i: int = i, label: str = point.label) -> None:
                progress(f"{label} ({i + 1}/{len(points)}) {stage}", (i + fraction) / len(points))

            measurement = measure(
                coordinator,
                config_for(config, point.design),
                point.design,
                margin=margin,
                progress=step,
                with_details=False,
            )
            if measurement.result is None:
                skipped.append(f"{point.label}: {measurement.error}")
                continue
            sweep = {"kind": point.kind, "label": point.label, "value": point.value}
            cases.append(case_dict(measurement, sweep=sweep))
        return cases, skipped

    record: dict[str, Any] = {"digest": digest, "doc": None, "error": None}
    try:
        cases, skipped = hold_gpu(coordinator, f"{current.name} sweep", work)
    except GpuBusy as error:
        record["error"] = str(error)
        return record
    if not cases:
        record["error"] = "Nothing was measured:\n\n" + "\n\n".join(skipped)
        return record
    doc = run_document(cases, current.name, digest, "sweep")
    doc["notes"] = skipped
    record["doc"] = doc
    record["error"] = _store(runs, digest, doc, None)
    return record
