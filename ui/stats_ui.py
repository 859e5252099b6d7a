"""Numbers about the design: the header's key figures and the analysis tab's tables and chart."""

from __future__ import annotations

from collections import Counter

import streamlit as st

from designer import changes
from designer.analysis import HEAD_DIM, Analysis
from designer.costs import attention_costs, tile_flops_scale
from designer.lints import SEVERITIES, Lint
from designer.storage import DesignStore
from designer.units import bytes_text, flops_text
from ui import keys, state
from ui.common import analysis_offer, change_design, current_analysis, show_message
from ui.figures import head_density_figure
from ui.text import plain

_BADGE = {"error": "red", "warning": "orange", "info": "blue"}


def header_ui(store: DesignStore) -> None:
    """Title, the key figures of the current design, and undo/redo."""
    session = st.session_state
    current = state.design(session)
    layout = current.layout
    key, analysis = current_analysis()
    title, buttons = st.columns([4, 1], vertical_alignment="bottom")
    title.title(plain(current.name), anchor=False)
    title.caption(
        f"{layout.n_heads} heads · {layout.seq_len_q:,} × {layout.seq_len_k:,} tokens · "
        f"blocks of {layout.block_size} · {layout.n_q_blocks} × {layout.n_k_blocks} blocks"
        + (f" · {layout.n_partial:,} partial" if layout.n_partial else "")
        + (" · causal" if current.causal else "")
    )
    if state.viewing_snapshot(session):
        st.info(
            "A shared snapshot, frozen as it was shared. Any change makes your own copy at a "
            "new address; this link keeps showing the original.",
            icon=":material/visibility:",
        )
    history = state.history(session)
    kept = (
        f"{len(history.past)} step{'s' if len(history.past) != 1 else ''} to undo; up to "
        f"{history.limit} are kept for a design this size. They survive a reload of this page, "
        "not a restart of the server. Keys on every tab (not in a text box): Ctrl+Z undo, "
        "Ctrl+Shift+Z or Ctrl+Y redo."
    )
    with buttons.container(horizontal=True, horizontal_alignment="right"):
        st.button(
            "Undo",
            icon=":material/undo:",
            key=keys.UNDO,
            disabled=not history.can_undo,
            on_click=state.undo,
            args=(session, store),
            help=kept,
        )
        st.button(
            "Redo",
            icon=":material/redo:",
            key=keys.REDO,
            disabled=not history.can_redo,
            on_click=state.redo,
            args=(session, store),
        )
    costs = attention_costs(current)
    shape = current.model_shape
    cells = layout.n_heads * layout.n_q_blocks * layout.n_k_blocks
    partial = layout.n_partial
    figures = st.columns(6)
    figures[0].metric("Density", f"{layout.density:.2%}", help="Active blocks over all blocks")
    figures[1].metric(
        "Active blocks",
        f"{layout.nnz:,}",
        help=f"of {cells:,} over all heads"
        + (f"; {partial:,} of them partial (a token mask inside)" if partial else ""),
    )
    if analysis is None:
        figures[2].metric("Tiles", "—", help="Not segmented yet: see below")
    elif current.effective_start_width == 0:
        figures[2].metric(
            "Tiles", "none", help="Segmentation start width 0 makes no tiles: the SDD path "
            '(impl="sdd") would compute nothing; the fused kernel needs no tiles.',
        )  # fmt: skip
    else:
        stats = analysis.stats
        figures[2].metric(
            "Tiles",
            f"{stats.tiles:,}",
            help=f"Square tiles the segmentation makes at start width "
            f"{current.effective_start_width} ({stats.mean_tile_blocks:.2f} blocks per tile on "
            "average)",
        )
    at_shape = (
        f"batch {shape.batch}, {costs.heads} heads ({costs.kv_heads} kv), head dim {shape.head_dim}"
    )
    figures[3].metric(
        "FLOPs vs dense",
        f"{costs.vs_dense:.2%}",
        help=f"The attention's FLOPs (4·D per computed token pair: QKᵀ and PV) against "
        f"{costs.dense_kind} attention's",
    )
    figures[4].metric(
        "Attention FLOPs",
        flops_text(costs.flops),
        help=f"One forward call at {at_shape} ({costs.dense_kind}: "
        f"{flops_text(costs.dense_flops)}); a training step adds about 2.5× for the backward",
    )
    figures[5].metric(
        "Memory",
        bytes_text(costs.input_bytes),
        help=f"q, k, v and the output at {at_shape}, bf16; the SDD path adds its packed "
        f"block-sparse scores, {bytes_text(costs.score_bytes)}",
    )
    if note := state.autosave_note(session):
        st.error(plain(note), icon=":material/error:")
    show_message(keys.UNDO_PLACE)
    if analysis is None:
        analysis_offer(key)
    else:
        lints_ui(store, analysis.lints)


def lints_ui(store: DesignStore, lints: tuple[Lint, ...]) -> None:
    """The lint findings, folded under one line that counts them by severity."""
    if not lints:
        st.caption(":material/check_circle: No lint findings.")
        return
    counts = Counter(lint.severity for lint in lints)
    summary = ", ".join(
        f"{counts[s]} {s}{'s' if counts[s] > 1 else ''}" for s in SEVERITIES if counts[s]
    )
    with st.expander(f"Lints: {summary}", icon=":material/rule:", expanded="error" in counts):
        for lint in lints:
            st.markdown(f":{_BADGE[lint.severity]}-badge[{lint.severity}] {lint.message}")
            if lint.code == "causal-violation":
                st.button(
                    "Clip to causal",
                    icon=":material/content_cut:",
                    key=keys.CLIP_CAUSAL,
                    on_click=change_design,
                    args=(store, keys.LINTS_PLACE, changes.clip_causal),
                    help="Clear every block above the diagonal (an edit: undo brings them back).",
                )
        show_message(keys.LINTS_PLACE)


def tokens_ui(analysis: Analysis) -> None:
    """Full, partial and empty blocks, and what the partial ones cost at the token level."""
    tokens = analysis.tokens
    numbers = st.columns(5)
    numbers[0].metric("Full blocks", f"{tokens.full_blocks:,}")
    numbers[1].metric(
        "Partial blocks",
        f"{tokens.partial_blocks:,}",
        help="Active blocks with a token mask inside: computed whole, masked inside",
    )
    numbers[2].metric("Empty blocks", f"{tokens.empty_blocks:,}")
    numbers[3].metric(
        "Masked away",
        f"{tokens.masked_fraction:.1%}",
        help="Share of the scores the tiles compute that partial blocks mask away",
    )
    numbers[4].metric(
        "Token density", f"{tokens.token_density:.2%}",
        help="Attended token pairs over all (before the causal rule)",
    )  # fmt: skip


def analysis_ui() -> None:
    """Per-width tile counts, per-head statistics and the per-head density chart."""
    current = state.design(st.session_state)
    layout = current.layout
    _, analysis = current_analysis()
    if analysis is not None:
        tokens_ui(analysis)
    left, right = st.columns([3, 2])
    with left:
        if analysis is not None:
            _tiles_ui(analysis, tile_flops_scale(current, current.model_shape, HEAD_DIM))
        else:
            st.subheader("Tiles per width", anchor=False)
            st.caption("Not segmented yet: the button under the figures above runs it.")
    head_stats = layout.head_stats()
    with right:
        st.subheader("Density per head", anchor=False)
        densities = [s.density for s in head_stats]
        st.plotly_chart(head_density_figure(densities), config={"displayModeBar": False})
    st.subheader("Per head", anchor=False)
    st.dataframe(
        [
            {
                "head": s.head,
                "active blocks": s.active_blocks,
                "density": f"{s.density:.2%}",
                "empty rows": s.empty_rows,
                "blocks per row (min / mean / max)": (
                    f"{s.min_row_blocks} / {s.mean_row_blocks:.1f} / {s.max_row_blocks}"
                ),
            }
            for s in head_stats
        ],
        hide_index=True,
    )


def _tiles_ui(analysis: Analysis, scale: float) -> None:
    """The tile table and totals of an analysed design; ``scale`` turns the analysis's FLOPs
    into FLOPs at the model shape (``costs.tile_flops_scale``)."""
    stats = analysis.stats
    st.subheader("Tiles per width", anchor=False)
    st.dataframe(
        [
            {
                "width (blocks)": row.width,
                "tile (tokens)": row.tile_tokens,
                "tiles": row.tiles,
                "blocks": row.blocks,
                "coverage": f"{row.coverage:.1%}",
                "QKᵀ GFLOP (model shape)": round(row.flops * scale / 1e9, 3),
            }
            for row in stats.widths
        ],
        hide_index=True,
    )
    numbers = st.columns(3)
    numbers[0].metric("Coverage", f"{stats.coverage:.1%}", help="Active blocks in a tile")
    numbers[1].metric(
        "Mean tile", f"{stats.mean_tile_blocks:.2f} blocks",
        help=f"{stats.mean_tile_tokens2:,.0f} token² per tile",
    )  # fmt: skip
    numbers[2].metric(
        "QKᵀ FLOPs",
        flops_text(stats.flops * scale),
        help="What the SDD's tiles compute for QKᵀ at the model shape (the sidebar's Model); "
        f"dense: {flops_text(stats.dense_flops * scale)}",
    )
