"""Compare: the design on screen beside another, from the library or a file.

Side by side: the figures at one model shape (``designer.compare``), the tiles of each width,
the speed of each design's latest stored benchmark run (if it was measured), one head of each
as a picture, and a diff of that head's blocks. The other design is kept in the session
(``keys.COMPARE_OTHER``) until another is picked; it is never made the working design.
"""

from __future__ import annotations

import streamlit as st

from designer.analysis import analysed, cached_analysis, design_digest, runs_with_the_page
from designer.compare import compare_figures, diff_heads, diff_refusal, head_diff
from designer.design import Design
from designer.storage import DesignStore
from ui import keys, state
from ui.figures import legend_html, png_bytes
from ui.files_ui import MAX_UPLOAD_MIB, read_upload, shown_name
from ui.overview_ui import thumbnail_scale
from ui.pictures import (
    DIFF_RGB,
    diff_pictures,
    enlarge,
    frame,
    hex_colour,
    max_pool,
    plain_pictures,
)
from ui.text import plain

#: The diff picture is drawn larger than a thumbnail: it is what one looks at here.
DIFF_PX = 384


def compare_ui(store: DesignStore) -> None:
    """Pick the other design, then show both side by side."""
    session = st.session_state
    current = state.design(session)
    _pick_ui(store, current)
    other = session.get(keys.COMPARE_OTHER)
    if other is None:
        st.info(
            "Pick a library design or load a file to compare with the design on screen.",
            icon=":material/compare:",
        )
        return
    label, design = other
    st.subheader(f"“{plain(current.name)}” against {plain(label)}", anchor=False)
    st.dataframe(
        [
            {"": name, "this design": mine, "the other": theirs}
            for name, mine, theirs in compare_figures(current, design)
        ],
        hide_index=True,
        key="compare_figures",
    )
    tiles, speed = st.columns(2)
    with tiles:
        st.markdown("**Tiles per width**")
        st.dataframe(_tile_rows(current, design), hide_index=True, key="compare_tiles")
    with speed:
        st.markdown("**Measured speed** (latest stored run)")
        from gpu.bench.store import RunStore  # here: the gpu package costs a cold page 2 s

        runs = RunStore(store.root)
        st.dataframe(
            [{"design": "this design", **_speed(runs, current)},
             {"design": "the other", **_speed(runs, design)}],
            hide_index=True, key="compare_speed",
        )  # fmt: skip
    _heads_ui(current, design)


def _pick_ui(store: DesignStore, current: Design) -> None:
    library, upload = st.columns(2)
    names = store.names()
    library.selectbox(
        "A library design", names, index=None, key=keys.COMPARE_PICK,
        placeholder="none yet" if not names else "pick a design",
        on_change=_on_pick, args=(store,),
    )  # fmt: skip
    upload.file_uploader(
        "Or a file (any the Files tab loads)", key=keys.COMPARE_UPLOAD, on_change=_on_upload,
        args=(current.layout.block_size,), max_upload_size=MAX_UPLOAD_MIB,
        help="A bare layout tensor is read at this design's block size.",
    )  # fmt: skip
    if text := state.message(st.session_state, keys.COMPARE_PLACE):
        st.error(plain(text), icon=":material/error:")


def _on_pick(store: DesignStore) -> None:
    session = st.session_state
    name = session[keys.COMPARE_PICK]
    if name is None:
        return
    try:
        design = store.load(name)
    except ValueError as error:
        state.say(session, keys.COMPARE_PLACE, f"Could not open {name}: {error}")
        return
    state.say(session, keys.COMPARE_PLACE, None)
    session[keys.COMPARE_OTHER] = (f"library design “{name}”", design)


def _on_upload(block_size: int) -> None:
    session = st.session_state
    upload = session[keys.COMPARE_UPLOAD]
    if upload is None:
        return
    name = shown_name(upload.name)
    try:
        loaded = read_upload(name, upload.getvalue(), block_size)
    except (ValueError, TypeError) as error:
        state.say(session, keys.COMPARE_PLACE, f"Could not load {name}: {error}")
        return
    state.say(session, keys.COMPARE_PLACE, None)
    session[keys.COMPARE_OTHER] = (f"“{name}” ({loaded.describe()})", loaded.design)


def _tile_rows(first: Design, second: Design) -> list[dict]:
    """Tiles of each width in each design (segmented with the page when cheap enough)."""
    counts = []
    for design in (first, second):
        found = cached_analysis(design)[1] if runs_with_the_page(design) else analysed(design)
        counts.append(None if found is None else {r.width: r.tiles for r in found.stats.widths})
    widths = sorted({w for c in counts if c for w in c}, reverse=True)
    if not widths:
        return [{"width (blocks)": "—", "this design": "not segmented", "the other": "—"}]
    return [
        {
            "width (blocks)": width,
            **{
                column: ("not segmented" if c is None else f"{c.get(width, 0):,}")
                for column, c in zip(("this design", "the other"), counts, strict=True)
            },
        }
        for width in widths
    ]


def _speed(runs, design: Design) -> dict[str, str]:
    """Milliseconds of each contender in the design's newest one-case stored run."""
    stored, _ = runs.runs(design_digest(design))
    single = [s for s in stored if len(s.doc["cases"]) == 1]
    if not single:
        return {"run": "not measured"}
    newest = single[0]
    results = newest.doc["cases"][0]["results"]
    timed = {r["name"]: f"{r['ms']:.3f} ms" for r in results if r.get("ms") is not None}
    return {"run": str(newest.doc.get("date", "?")), **timed}


def _heads_ui(first: Design, second: Design) -> None:
    """One head of each as a picture, and the diff of its blocks."""
    session = st.session_state
    heads = diff_heads(first, second)
    if session.get(keys.COMPARE_HEAD, 0) >= heads:
        session[keys.COMPARE_HEAD] = 0
    head = st.selectbox("Head", range(heads), key=keys.COMPARE_HEAD)
    mine, theirs, diff = st.columns(3)
    for place, design, caption in ((mine, first, "this design"), (theirs, second, "the other")):
        blocks = design.layout.to_numpy()[0 if design.layout.n_heads == 1 else head]
        shrink, grow = thumbnail_scale(max(blocks.shape))
        picture = frame(enlarge(plain_pictures(max_pool(blocks, shrink)), grow))
        place.image(png_bytes(picture), caption=f"{caption}, head {head}", output_format="PNG")
    with diff:
        if (why := diff_refusal(first, second)) is not None:
            st.info(f"No block-by-block diff: {why}.", icon=":material/info:")
            return
        found = head_diff(first, second, head)
        side = max(found.codes.shape)
        shrink = -(-side // DIFF_PX)
        grow = max(1, DIFF_PX // side)
        picture = frame(enlarge(diff_pictures(max_pool(found.codes, shrink)), grow))
        st.image(png_bytes(picture), caption=f"diff, head {head}", output_format="PNG")
        st.html(
            legend_html(
                [
                    (hex_colour(DIFF_RGB[1]), f"in both: {found.both:,}"),
                    (hex_colour(DIFF_RGB[2]), f"only in this design: {found.only_first:,}"),
                    (hex_colour(DIFF_RGB[3]), f"only in the other: {found.only_second:,}"),
                ],
                f"{found.differing:,} blocks differ",
            )
        )
