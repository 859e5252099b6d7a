"""Every session-state key the app uses, in one place (widgets included).

Widgets mirror the current design: their initial values come from it (``state.sync_widgets``),
never from literals scattered through the views.
"""

from __future__ import annotations

# ----------------------------------------------------------------- session
#: ``History[Design]``: its present is the current design.
HISTORY = "history"
#: This browser session's id: names its autosave file and sits in the URL as ``?session=``.
SESSION_ID = "session_id"
SESSION_QUERY_PARAM = "session"
#: ``{place: text}``: messages shown next to the widgets that caused them.
MESSAGES = "messages"
#: One-shot notices ``(icon, text)`` shown as toasts on the next run.
NOTICES = "notices"
#: The paint canvas, and the number of its last stroke applied (it redraws the rest on top).
PAINT_CANVAS = "paint_canvas"
PAINT_APPLIED = "paint_applied"

# ----------------------------------------------------------------- setup widgets
NAME = "design_name"
SEQ_LEN_Q = "seq_len_q"
SEQ_LEN_K = "seq_len_k"
BLOCK_SIZE = "block_size"
N_HEADS = "n_heads"
CAUSAL = "causal"
AUTO_START_WIDTH = "auto_start_width"
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

# ----------------------------------------------------------------- files widgets
LIBRARY_NAME = "library_name"
LIBRARY_PICK = "library_pick"
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

# ----------------------------------------------------------------- message places
SETUP_PLACE = "setup"
EDITOR_PLACE = "editor"
BAND_PLACE = "band"
COPY_PLACE = "copy"
FILES_PLACE = "files"
LIBRARY_PLACE = "library"
AUTOSAVE_PLACE = "autosave"
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
