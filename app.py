"""Block-Sparse Attention Designer: ``streamlit run app.py``.

Page setup, the session's state, then the views of ``ui``, one tab each. Tabs run
lazily: only the open one is computed.
"""

from __future__ import annotations

import streamlit as st
import torch

from designer.storage import DesignStore
from ui import keys
from ui.common import start_run, warm_up_server
from ui.compare_ui import compare_ui
from ui.editor_ui import editor_ui
from ui.files_ui import files_ui
from ui.model_ui import model_ui
from ui.overview_ui import overview_ui
from ui.page_keys import page_keys_ui
from ui.recipe_ui import recipe_ui
from ui.sessions import map_large_blocks_on_their_own
from ui.setup_ui import setup_ui
from ui.stats_ui import analysis_ui, header_ui

TABS = ("Patterns", "Paint", "Analysis", "Compare", "Model", "Files", "GPU benchmark")
#: The app's torch work is small tensor edits between numba's segmentation runs; torch's own
#: worker threads would spin against numba's and make a one-block edit take 50 ms instead of 1.
torch.set_num_threads(1)
map_large_blocks_on_their_own()


def main() -> None:
    st.set_page_config(page_title="Block-Sparse Attention Designer", page_icon="▦", layout="wide")
    store = DesignStore()
    start_run(store)
    with st.sidebar:
        st.header("Block-Sparse Attention Designer", anchor=False)
        setup_ui(store)
    header_ui(store)
    patterns, paint, analysis, compare, model, files, gpu = st.tabs(
        TABS, key=keys.TAB, on_change="rerun"
    )
    if patterns.open:
        with patterns:
            steps, pictures = st.columns([1, 1], gap="large")
            with steps:
                recipe_ui(store)
            with pictures:
                overview_ui()
    if paint.open:
        with paint:
            editor_ui(store)
    if analysis.open:
        with analysis:
            analysis_ui()
    if compare.open:
        with compare:
            compare_ui(store)
    if model.open:
        with model:
            model_ui(store)
    if files.open:
        with files:
            files_ui(store)
    if gpu.open:
        # Imported when the tab opens: the gpu package brings torch's compiler stack (2 s of a
        # cold first page) that no other tab needs; warm_up_server loads it after a first page.
        from ui.bench.panel import gpu_panel_ui

        with gpu:
            gpu_panel_ui(store)
    page_keys_ui(store, canvas_open=paint.open)
    warm_up_server()


main()
