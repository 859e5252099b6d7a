"""Every session-state key the app uses, in one place (widgets included).

Widgets mirror the current design: their initial values come from it (``state.sync_widgets``),
never from literals scattered through the views.
"""

from __future__ import annotations

# ----------------------------------------------------------------- session
#: The session's ``HistoryBox``: its history (whose present is the current design), its session
#: id (it names the autosave and sits in the URL as ``?session=``), the autosave's version, the
#: strokes done and the model design.
HISTORY = "history"
SESSION_QUERY_PARAM = "session"
#: A read-only shared copy: ``?snapshot=<id>`` opens it (``DesignStore.load_snapshot``), and
#: ``SNAPSHOT`` holds its id while this session shows it unchanged (its first change forks it
#: into the session's own design at ``?session=``). ``SNAPSHOT_LINK``: the id this session
#: last shared.
SNAPSHOT_QUERY_PARAM = "snapshot"
SNAPSHOT = "snapshot"
SNAPSHOT_LINK = "snapshot_link"
#: ``{place: text}``: messages shown next to the widgets that caused them.
MESSAGES = "messages"
#: One-shot notices ``(icon, text)`` shown as toasts on the next run.
NOTICES = "notices"
#: The paint canvas, and the name under which the box keeps ``(client, seq)``: the canvas last
#: heard from and its last stroke done (the canvas keeps every later stroke, drawn on top,
#: until it sees it done).
PAINT_CANVAS = "paint_canvas"
PAINT_DONE = "paint_done"
#: The window of the painted head the canvas last asked for (a design held as runs).
PAINT_VIEW = "paint_view"
#: The page's undo and redo keys on the other tabs (``ui.page_keys``), and ``(client, seq)`` as
#: ``PAINT_DONE``: the page last heard from and its last step done.
PAGE_KEYS = "page_keys"
PAGE_KEYS_DONE = "page_keys_done"
#: The session's lock: every change of the design holds it (see ``state.session_lock``).
SESSION_LOCK = "session_lock"

#: The analysis key of the design whose costly analysis the user asked for.
ANALYSIS_ASKED = "analysis_asked"

#: The open tab (``st.tabs``).
TAB = "tab"
UNDO, REDO = "undo", "redo"
CLIP_CAUSAL = "clip_causal"

# ----------------------------------------------------------------- recipe widgets
ADD_STEP = "add_step"
DROP_EDITS = "drop_edits"

# ----------------------------------------------------------------- setup widgets
NAME = "design_name"
SEQ_LEN_Q = "seq_len_q"
SEQ_LEN_K = "seq_len_k"
BLOCK_SIZE = "block_size"
N_HEADS = "n_heads"
CAUSAL = "causal"
AUTO_START_WIDTH = "auto_start_width"
#: The model the design is costed in (``Design.model_shape``).
MODEL_BATCH, MODEL_HEADS, MODEL_KV_HEADS, MODEL_HEAD_DIM = (
    "model_batch", "model_heads", "model_kv_heads", "model_head_dim"
)  # fmt: skip
START_WIDTH = "start_width"

# ----------------------------------------------------------------- editor widgets
EDIT_HEAD = "edit_head"
EDIT_ACTION = "edit_action"
EDIT_SCOPE = "edit_scope"
EDIT_HEADS = "edit_heads"
BAND_LOW = "band_low"
BAND_HIGH = "band_high"
COPY_TARGETS = "copy_targets"
SHOW_TILES = "show_tiles"
#: The block the zoom shows: its query and key block.
ZOOM_ROW, ZOOM_COL = "zoom_row", "zoom_col"

# ----------------------------------------------------------------- files widgets
LIBRARY_NAME = "library_name"
LIBRARY_PICK = "library_pick"
LIBRARY_RENAME = "library_rename_to"
UPLOAD = "upload"
UPLOAD_BLOCK_SIZE = "upload_block_size"
#: ``(file name, bytes)`` of an uploaded bare tensor waiting for its block size.
UPLOAD_PENDING = "upload_pending"
#: What the last upload was recognised as (shown under the uploader).
UPLOAD_RECOGNISED = "upload_recognised"
#: The design name the "Save as" box was last filled from, and the picker's remembered choice
#: (widget values are forgotten while the Files tab is closed).
LIBRARY_NAME_OF = "library_name_of"
LIBRARY_PICKED = "library_picked"
#: ``("replace" | "delete", name)``: a library action waiting for confirmation.
LIBRARY_CONFIRM = "library_pending_action"

# ----------------------------------------------------------------- compare widgets
#: ``(label, Design)``: the design the Compare tab sets beside the current one.
COMPARE_OTHER = "compare_other"
COMPARE_PICK, COMPARE_UPLOAD, COMPARE_HEAD = "compare_pick", "compare_upload", "compare_head"

# ----------------------------------------------------------------- model design widgets
#: The model design (one design per layer group) the session is making is in its box.
LAYERS_NAME, LAYERS_COUNT, LAYERS_GROUP = "layers_name", "layers_count", "layers_group"
LAYERS_FIRST, LAYERS_LAST, LAYERS_SOURCE = "layers_first", "layers_last", "layers_source"
LAYERS_UPLOAD = "layers_upload"

# ----------------------------------------------------------------- GPU panel widgets
GPU_BATCH, GPU_HEAD_DIM, GPU_DTYPE, GPU_CAUSAL, GPU_CONTENDER_PICK = (
    "gpu_batch", "gpu_head_dim", "gpu_dtype", "gpu_causal", "gpu_contenders"
)  # fmt: skip
GPU_WARMUP, GPU_REPS, GPU_FLUSH, GPU_SEED, GPU_MARGIN, GPU_CHECK_ERROR, GPU_WAIT_S = (
    "gpu_warmup", "gpu_reps", "gpu_flush", "gpu_seed", "gpu_margin", "gpu_check_error",
    "gpu_wait_s",
)  # fmt: skip
GPU_SWEEP_KIND, GPU_SWEEP_LENGTH_PICK, GPU_SWEEP_FACTOR_PICK, GPU_SWEEP_RANDOM = (
    "gpu_sweep_kind", "gpu_sweep_lengths", "gpu_sweep_factors", "gpu_sweep_random",
)  # fmt: skip
GPU_SWEEP_CHECK = "gpu_sweep_check"
#: Forward + backward mode, and its own contender pick (only contenders with a backward pass).
GPU_BACKWARD, GPU_BACKWARD_CONTENDER_PICK = "gpu_backward", "gpu_backward_contenders"
GPU_RUN_BUTTON, GPU_SWEEP_BUTTON, GPU_CPU_BUTTON = "gpu_run", "gpu_sweep_run", "gpu_cpu_check_run"
GPU_STORED_PICK, GPU_OVERLAY_PICK, GPU_COMMITTED_PICK = (
    "gpu_stored_pick", "gpu_overlay_pick", "gpu_committed_pick"
)  # fmt: skip
# ----------------------------------------------------------------- the GPU panel's own state
#: The design's causal flag the causal toggle was last set from.
GPU_CAUSAL_FROM = "gpu_causal_from"
#: The panel widgets' values as last drawn: Streamlit forgets a widget's value while its tab
#: is hidden, and the panel restores them from here.
GPU_REMEMBERED = "gpu_remembered"
#: ``{"digest", "doc", "error"}`` of the last run / sweep / CPU check of this session.
GPU_LAST_RUN, GPU_LAST_SWEEP, GPU_LAST_CPU_CHECK = (
    "gpu_last_run", "gpu_last_sweep", "gpu_last_cpu_check"
)  # fmt: skip

# ----------------------------------------------------------------- message places
SETUP_PLACE = "setup"
MODEL_PLACE = "model"
COMPARE_PLACE = "compare"
LAYERS_PLACE = "layers"
SHARE_PLACE = "share"
EDITOR_PLACE = "editor"
BAND_PLACE = "band"
COPY_PLACE = "copy"
FILES_PLACE = "files"
LIBRARY_PLACE = "library"
UNDO_PLACE = "undo"
LINTS_PLACE = "lints"
EDITS_PLACE = "edits"


def step_key(step: int, field: str) -> str:
    """A widget of recipe step ``step``: ``pattern``, ``combine``, ``heads`` or a parameter."""
    return f"step{step}_{field}"


def per_head_key(step: int, param: str) -> str:
    """The "per head" toggle of a parameter that may vary by head."""
    return step_key(step, f"{param}__per_head")


def values_key(step: int, param: str) -> str:
    """The one-value-per-head text field of such a parameter."""
    return step_key(step, f"{param}__values")


def step_place(step: int) -> str:
    """Where messages about recipe step ``step`` are shown."""
    return f"step{step}"
