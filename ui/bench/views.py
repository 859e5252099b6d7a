"""How the panel shows benchmark documents: one case, a sweep, the stored runs, an overlay.

Every view takes a plain document (``gpu.bench.results``), so a fresh run, a run stored with the
design and a committed ``benchmarks/results`` file look the same. ``prefix`` keeps the element
keys of two documents on one page apart.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from designer.analysis import design_digest
from designer.design import Design
from gpu.bench import store as bench_store
from gpu.bench.details import CPU_CHECK_ERRORS, summarize_cpu_check
from gpu.bench.results import (
    case_label,
    document_bytes,
    ideal_speedup,
    is_backward,
    measured,
    problems,
    short_label,
    speedup_vs_dense,
    table_rows,
)
from gpu.bench.store import RunStore, StoredDocument, committed_results
from ui import keys
from ui.bench.error_figures import (
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

_NUMBER_FORMATS = {
    "ms": "%.3f", "TFLOP/s": "%.4g", "x dense": "%.2f", "x cuDNN": "%.2f", "x Flex": "%.2f",
    "x BSA": "%.2f", "max abs err": "%.2e", "rel err": "%.2e", "fwd+bwd ms": "%.3f",
    "fwd ms": "%.3f", "bwd ms": "%.3f", "bwd TFLOP/s": "%.4g", "dq rel err": "%.2e",
    "dk rel err": "%.2e", "dv rel err": "%.2e", "grad max abs err": "%.2e",
}  # fmt: skip
_CONFIG = {"displaylogo": False}


def results_table(rows: list[dict[str, Any]], key: str) -> None:
    """A table of benchmark rows with numbers formatted as the CLI prints them; columns that
    no row has a value for (speedups without a baseline) are left out."""
    rows = filled_columns(rows)
    columns = {name: st.column_config.NumberColumn(format=f) for name, f in _NUMBER_FORMATS.items()}
    st.dataframe(rows, hide_index=True, column_config=columns, key=key)


def filled_columns(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` without the columns that are None in every row.

    >>> filled_columns([{"a": 1, "b": None}, {"a": None, "b": None}])
    [{'a': 1}, {'a': None}]
    """
    keep = [name for name in (rows[0] if rows else {}) if any(r[name] is not None for r in rows)]
    return [{name: row[name] for name in keep} for row in rows]


def case_ui(case: dict[str, Any], *, start_width: int, prefix: str) -> None:
    """One measured case: key figures, the table, and the speed, error and segmentation charts."""
    st.caption(case_label(case))
    speedups = [s for r in measured(case) if (s := speedup_vs_dense(case, r)) is not None]
    figures = st.columns(3)
    figures[0].metric("Token density", f"{100 * case['layout']['token_density']:.2f}%")
    ideal = ideal_speedup(case)
    figures[1].metric("Ideal speedup", "–" if ideal is None else f"{ideal:.1f}×",
                      help="Dense attention's FLOPs over the layout's")  # fmt: skip
    best = max(speedups, default=None)
    figures[2].metric("Best speedup", "–" if best is None else f"{best:.2f}×",
                      help="Fastest contender against dense SDPA")  # fmt: skip
    for line in problems(case):
        st.warning(line, icon="⚠️")
    if is_backward(case):
        st.caption(
            "Forward + backward: one training step's attention, the forward then the backward "
            "with a fixed random output gradient. fwd ms and bwd ms are each alone (the backward "
            "timed after an untimed forward); TFLOP/s count the backward as 2.5× the forward's "
            "FLOPs."
        )
    results_table(table_rows(case), key=f"{prefix}_table")
    if speedups:  # without a dense baseline (the CPU check) there is no speedup to draw
        left, right = st.columns(2)
        left.plotly_chart(speedup_figure(case), key=f"{prefix}_speedup", config=_CONFIG)
        right.plotly_chart(tflops_figure(case), key=f"{prefix}_tflops", config=_CONFIG)
    errors_ui(case, prefix)
    if (figure := segmentation_figure(case, start_width)) is not None:
        st.plotly_chart(figure, key=f"{prefix}_segmentation", config=_CONFIG)


def cpu_check_ui(doc: dict[str, Any], design_density: float, *, prefix: str) -> None:
    """A CPU check: what it compared, each error beside its limit, the verdict, and where the
    errors sit. No speed figures: the CPU has no dense baseline, so they would mean nothing."""
    summary = summarize_cpu_check(doc, design_density)
    st.caption(summary.checked)
    if summary.failure:
        st.error(f"The reference did not run: {summary.failure}", icon="🛑")
        return
    figures = st.columns(len(summary.errors) + 1)
    for place, (key, (value, limit)) in zip(figures, summary.errors.items(), strict=False):
        place.metric(CPU_CHECK_ERRORS[key].capitalize(), f"{value:.2e}",
                     help=f"Against fp64; the GPU benchmark's limit is {limit:.0e}")  # fmt: skip
    if summary.seconds is not None:
        figures[-1].metric("Took", f"{summary.seconds:.1f} s", help="On this CPU, with the checks")
    if summary.passed:
        st.success("Every error is within its limit.", icon=":material/check_circle:")
    else:
        st.error("An error is past its limit: the layout's attention is not what it should be.",
                 icon="🛑")  # fmt: skip
    errors_ui(doc["cases"][0], prefix)


def errors_ui(case: dict[str, Any], prefix: str) -> None:
    details = case.get("details", {})
    for name, detail in details.items():
        if "error" in detail:
            st.warning(f"Per-head errors of {name} could not be computed: {detail['error']}")
    if (grads := grad_head_error_figure(case)) is not None:
        st.plotly_chart(grads, key=f"{prefix}_grad_errors", config=_CONFIG)
    figure = head_error_figure(case)
    if figure is None:
        return
    st.plotly_chart(figure, key=f"{prefix}_head_errors", config=_CONFIG)
    mapped = [name for name, detail in details.items() if "block_max_abs" in detail]
    name = st.selectbox(
        "Error map of", mapped, key=_keep_choice(f"{prefix}_error_map_pick", mapped)
    )
    block_size = case["layout"]["block_size"]
    # theme=None: the figure's own colour scale, not Streamlit's theme colours
    st.plotly_chart(error_map_figure(details[name], block_size, name), theme=None,
                    key=f"{prefix}_error_map", config=_CONFIG)  # fmt: skip


def sweep_ui(doc: dict[str, Any], *, prefix: str) -> None:
    """A sweep: speedup against sparsity, time against length, and every number in a table."""
    cases = doc["cases"]
    st.plotly_chart(sweep_speedup_figure(cases), key=f"{prefix}_sweep_speedup", config=_CONFIG)
    if any(c.get("sweep", {}).get("kind") == "length" for c in cases):
        st.plotly_chart(sweep_length_figure(cases), key=f"{prefix}_sweep_length", config=_CONFIG)
    for line in doc.get("notes", []):
        st.caption(f"Skipped: {line}")
    results_table(sweep_rows(cases), key=f"{prefix}_sweep_table")


def sweep_rows(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per case and contender, the case's label first."""
    return [
        {"case": case.get("sweep", {}).get("label", case["case"]), **row}
        for case in cases
        for row in table_rows(case)
    ]


def document_ui(doc: dict[str, Any], *, start_width: int, prefix: str) -> None:
    """Any document: one case in full, several as a sweep or a table of cases."""
    if doc.get("kind") == "sweep":
        sweep_ui(doc, prefix=prefix)
    elif len(doc["cases"]) == 1:
        case_ui(doc["cases"][0], start_width=start_width, prefix=prefix)
    else:
        st.plotly_chart(cases_speedup_figure(doc["cases"]), key=f"{prefix}_cases", config=_CONFIG)
        rows = [{"case": c["case"], **row} for c in doc["cases"] for row in table_rows(c)]
        results_table(rows, key=f"{prefix}_cases_table")
    env = doc.get("environment", {})
    st.caption(
        f"{doc.get('date', '?')} · GPU {env.get('gpu', 'n/a')} · torch {env.get('torch', 'n/a')}"
        f" · CuPy {env.get('cupy', 'n/a')} · {doc.get('method', '')}"
    )


def download_ui(doc: dict[str, Any], file_name: str, key: str) -> None:
    """Download a document as the JSON ``python -m gpu.bench`` writes."""
    st.download_button(
        "Download JSON", data=document_bytes(doc), file_name=file_name, mime="application/json",
        icon=":material/download:", key=key, on_click="ignore",
    )  # fmt: skip


def stored_ui(run_store: RunStore, current: Design) -> None:
    """The design's stored runs (one shown, two overlaid) and the committed results."""
    st.subheader("Runs of this design", anchor=False)
    runs, unreadable = run_store.runs(design_digest(current))
    for line in unreadable:
        st.warning(f"Skipped a stored run: {line}", icon="⚠️")
    if not runs:
        st.caption("No runs stored for this exact layout yet: every benchmark run is kept here.")
    else:
        _pick_and_show(runs, keys.GPU_STORED_PICK, current.effective_start_width, "stored")
        _overlay_ui(runs)
    st.subheader("Committed results", anchor=False)
    committed, unreadable = committed_results()
    for line in unreadable:
        st.warning(f"Skipped a results file: {line}", icon="⚠️")
    if not committed:
        st.caption(
            "No results are committed under benchmarks/results yet."
            if bench_store.RESULTS_DIR is not None
            else "This installed package carries no committed results: they are the JSON files "
            "of benchmarks/results in the repository (run the app from a checkout to see them)."
        )
        return
    _pick_and_show(committed, keys.GPU_COMMITTED_PICK, current.effective_start_width, "committed")


def _keep_choice(key: str, options: list[str]) -> str:
    """``key``, its value reset to the first option when the options no longer hold it (another
    document was picked)."""
    if st.session_state.get(key) not in options:
        st.session_state[key] = options[0]
    return key


def _pick_and_show(stored: list[StoredDocument], key: str, start_width: int, prefix: str) -> None:
    by_name = {s.path.name: s for s in stored}
    picked = by_name[st.selectbox("Show", list(by_name), format_func=lambda n: by_name[n].label,
                                  key=_keep_choice(key, list(by_name)))]  # fmt: skip
    document_ui(picked.doc, start_width=start_width, prefix=prefix)
    download_ui(picked.doc, picked.path.name, key=f"{prefix}_download")


def _overlay_ui(runs: list[StoredDocument]) -> None:
    single = {s.path.name: s for s in runs if len(s.doc["cases"]) == 1}
    if len(single) < 2:
        return
    chosen = st.multiselect(
        "Overlay two runs", list(single), format_func=lambda n: single[n].label,
        max_selections=2, key=keys.GPU_OVERLAY_PICK,
    )  # fmt: skip
    if len(chosen) == 2:
        first, second = (single[name] for name in chosen)
        figure = overlay_figure(
            first.doc["cases"][0],
            second.doc["cases"][0],
            (short_label(first.doc), short_label(second.doc)),
        )
        st.plotly_chart(figure, key="overlay", config=_CONFIG)
