"""What one canvas trigger does to the session: its new strokes, in order, exactly once, in budget.

The canvas sends every stroke it has not yet seen done (``strokes.read_trigger``). Holding the
session's lock, the strokes up to the last one done for that canvas are skipped and the rest are
done in order: a paint becomes one edit and one undo step, an undo or redo walks the history, a
stroke that cannot be applied is done with a message. Then the design is autosaved once.

Each stroke's cost is estimated before it runs: the strokes that fit in ``MAX_SECONDS`` of CPU
and ``MAX_EXTRA_BYTES`` of memory, with the autosave, are done and the rest wait (the canvas
sends them again when it sees these done, so a burst of strokes on a huge design is applied
over a few reruns, none lost); a stroke too large on its own is refused, saying its estimate.
"""

from __future__ import annotations

from typing import Any

from designer import changes
from designer.design import Design
from designer.edit import Cells, EditOp
from designer.edit_runs import paints_any_runs
from designer.history import History
from designer.layout import Layout
from designer.recipe_cost import MAX_BUILD_SECONDS
from designer.storage import DesignStore
from designer.validate import capped
from ui import keys, state
from ui.canvas.strokes import Mask, Paint, Step, Unreadable, read_trigger
from ui.sessions import HistoryReleased

#: CPU time and extra memory one trigger may ask for (the whole path's budget).
MAX_SECONDS = MAX_BUILD_SECONDS
MAX_EXTRA_BYTES = 512 << 20
#: A paint stroke copies the layout and masks its heads: 1.5 to 3.3 ns per layout cell at 64M
#: cells, 0.3 to 0.7 at 16M (one core of the CI machine, 2026-12-01), plus recording the edit.
STROKE_NS_PER_CELL = 4
STROKE_NS = 2_000_000
#: Building a scattered-cell region and recording it, per painted cell of a mask (0.75 µs).
MASK_NS_PER_CELL = 1_000
#: Layout-sized buffers alive at once while a stroke is applied: the copy, its painted heads,
#: the region's mask and the new layout (kept).
STROKE_COPIES = 4
#: The autosave: the bit-packed layout (0.2 to 0.4 ns per cell), each scattered cell the recipe
#: lists (1.7 µs), and the fsync of the file and its folder.
AUTOSAVE_NS_PER_CELL = 1
AUTOSAVE_NS_PER_LISTED_CELL = 2_000
AUTOSAVE_NS = 30_000_000
#: An undo or redo step (no copy: the history holds the designs).
STEP_NS = 100_000
#: A paint stroke on a layout held as runs: its painted heads' runs combined with the region's
#: and every run copied once (the 32 x 2048^2 window-and-sinks layout, 129K runs: 16-130 ms
#: on one core of a busy 2-core machine, 2026-12-01), and its autosave, per run (12 bytes).
RUN_STROKE_NS_PER_RUN = 1_500
RUN_AUTOSAVE_NS_PER_RUN = 100


def apply_trigger(
    session: state.State,
    value: Any,
    store: DesignStore,
    *,
    done_key: str = keys.PAINT_DONE,
    place: str = keys.EDITOR_PLACE,
) -> None:
    """Do the new strokes of the trigger ``value`` (see the module docstring).

    ``done_key`` names the sender (the page keys' undo and redo steps are numbered apart from
    the canvas's strokes): the box keeps ``(client, seq)`` under it, the page last heard from
    and its last stroke done, changed with the history in one step. Messages go to ``place``.
    """

    def say(text: str | None) -> None:
        state.say(session, place, None if text is None else capped(text))

    with state.session_lock(session):
        held = state.box(session)
        try:
            layout = held.present.layout
        except HistoryReleased:
            return  # the rerun brings the design back from its autosave; the canvas sends again
        try:
            trigger = read_trigger(value, *layout.shape)
        except (ValueError, TypeError) as error:
            say(f"The canvas sent strokes that could not be read, so none was applied: {error}")
            return
        client, done = held.last_done(done_key)
        if trigger.client != client:  # a new canvas (a new page, or a restarted server)
            done = trigger.strokes[0][0] - 1
        todo = [(seq, stroke) for seq, stroke in trigger.strokes if seq > done]
        if todo and todo[0][0] != done + 1:
            say(f"The canvas skipped strokes {done + 1} to {todo[0][0] - 1}, so none of the "
                "strokes after them was applied.")  # fmt: skip
            return
        batch = Batch(state.sized_history(held.history, held.present))
        for seq, stroke in todo:
            if not batch.do(stroke):
                break
            done = seq
        # No session state is touched from here to the autosave: a rerun cannot stop it half way.
        state.set_history(held, batch.history, moves_widgets=batch.stepped)
        held.done[done_key] = (trigger.client, done)
        if batch.changed:
            state.autosave(held, store)
        if batch.stepped:
            state.sync_widgets(session)
        refused = batch.refused
        if refused:
            many = f"{len(refused)} strokes were" if len(refused) > 1 else "A stroke was"
            say(f"{many} not applied: {refused[0]}")
        elif todo:
            say(None)


class Batch:
    """The strokes of one trigger, done one by one on a history within one budget."""

    def __init__(self, history: History) -> None:
        self.history = history
        self.refused: list[str] = []
        self.changed = self.stepped = False
        self.spent_ns = self.kept = 0

    def do(self, stroke: Paint | Step | Unreadable) -> bool:
        """Do ``stroke``, or return False to leave it (and those after it) for the next trigger."""
        if isinstance(stroke, Unreadable):
            self.refused.append(stroke.reason)
        elif isinstance(stroke, Step):
            moved = self.history.undo() if stroke.back else self.history.redo()
            self.changed |= moved is not self.history
            self.stepped |= moved is not self.history
            self.history, self.spent_ns = moved, self.spent_ns + STEP_NS
        else:
            return self._paint(stroke)
        return True

    def _paint(self, stroke: Paint) -> bool:
        current = self.history.present
        ns, transient = estimate_paint(current.layout, stroke)
        # The session holds the history as it was until the trigger ends, so every new layout
        # still in the batch's history is extra memory.
        kept = min(self.history.limit, self.kept + 1)
        extra = transient + kept * state.layout_bytes(current.layout)
        total_ns = self.spent_ns + ns + estimate_autosave(current)
        if total_ns > MAX_SECONDS * 1e9 or extra > MAX_EXTRA_BYTES:
            if self.spent_ns:
                return False
            self.refused.append(
                f"it would take about {total_ns / 1e9:.1f} s and {extra / 2**20:,.0f} MiB, more "
                f"than the limit of {MAX_SECONDS:.1f} s and {MAX_EXTRA_BYTES >> 20} MiB"
            )
            return True
        try:
            region = stroke.region.region() if isinstance(stroke.region, Mask) else stroke.region
            op = EditOp(stroke.action, region, stroke.heads)
            if not paints_any(current.layout, op):
                return True  # blocks painted already: no edit, no undo step
            new = changes.edit(current, op)
        except (ValueError, TypeError) as error:
            self.refused.append(str(error))
            return True
        self.history = self.history.record(new)
        self.changed, self.spent_ns, self.kept = True, self.spent_ns + ns, self.kept + 1
        return True


def estimate_paint(layout: Layout, stroke: Paint) -> tuple[int, int]:
    """``(CPU ns, transient bytes)`` of applying ``stroke`` to ``layout`` and recording it.

    >>> estimate_paint(Layout.zeros(1, 4, 4, 16), Paint(0, "set", Rect(0, 0, 0, 0)))
    (2000064, 64)
    """
    if layout.runs is not None:
        ns = STROKE_NS + layout.runs.n_runs * RUN_STROKE_NS_PER_RUN
    else:
        ns = STROKE_NS + layout.blocks.numel() * STROKE_NS_PER_CELL
    if isinstance(stroke.region, Mask):
        ns += stroke.region.count * MASK_NS_PER_CELL
    return ns, STROKE_COPIES * state.layout_bytes(layout)


def estimate_autosave(design: Design) -> int:
    """CPU nanoseconds of autosaving ``design``."""
    listed = sum(
        len(op.region.cells)
        for op in (design.recipe.edits if design.recipe else ())
        if isinstance(op, EditOp) and isinstance(op.region, Cells)
    )
    layout = design.layout
    if layout.runs is not None:
        held = layout.runs.n_runs * RUN_AUTOSAVE_NS_PER_RUN
    else:
        held = layout.blocks.numel() * AUTOSAVE_NS_PER_CELL
    return AUTOSAVE_NS + held + listed * AUTOSAVE_NS_PER_LISTED_CELL


def paints_any(layout: Layout, op: EditOp) -> bool:
    """Whether ``op`` changes a block of ``layout``, looking at its region only."""
    if op.action == "toggle":
        return True
    if layout.runs is not None:
        return paints_any_runs(layout, op)
    index = op.region.index(layout.n_q_blocks, layout.n_k_blocks)
    heads = range(layout.n_heads) if op.heads is None else op.heads
    want = op.action == "set"
    return any(bool((layout.blocks[head][index] != want).any()) for head in heads)
