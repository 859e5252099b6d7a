"""Server time of the app at the size cap: ``python tools/size_cap.py``.

Drives ``app.py`` headless with ``AppTest`` (which adds its own overhead, so these are upper
bounds) on the Patterns tab, where every head is drawn:

- 4 heads × 4096 × 4096 blocks (65,536 tokens at block 16, the largest design allowed), a
  BigBird-like design (window, globals, random blocks): a paint edit of one head, its undo, and
  a new seed for the random step (head 0 changes);
- 16 heads × 256 × 256 blocks at 50 % random density: a paint edit of one head, with the
  Patterns tab open (every head's picture) and with the Paint tab open.

A paint edit is timed as the Paint tab's callback does it (``changes.edit`` and the commit with
its autosave) plus the rerun after it; undo and seed changes go through their widgets, so their
callbacks are inside the timed rerun. Every change also rewrites the session's autosave, timed
alone below each size. Prints the median and every sample, in seconds. The machine should be
otherwise idle: the numbers are wall-clock.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from streamlit.testing.v1 import AppTest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

from designer import changes
from designer.design import Design
from designer.edit import EditOp
from designer.formats import load_design
from designer.recipe import Recipe, RecipeStep
from designer.regions import Rect
from designer.storage import DATA_DIR_ENV, DesignStore, new_session_id
from ui import keys, state

APP = str(Path(__file__).resolve().parents[1] / "app.py")
CAP_DESIGN = (
    Path(__file__).resolve().parents[1] / "assets" / "examples" / "size_cap_window_globals.json"
)
GOALS_S = {"cap": 1.5, "16x256": 0.100}


def cap_design() -> Design:
    """4 × 4096² blocks of 16 tokens: a causal window, global blocks, random blocks in head 0
    (``assets/examples/size_cap_window_globals.json``; random blocks in every head would pass
    the recipe build-time budget at this size)."""
    return load_design(CAP_DESIGN)


def medium_design() -> Design:
    """16 × 256² blocks, 50 % random: the costliest of its size to segment."""
    step = RecipeStep("random_probability", {"probability": 0.5, "seed": 7})
    recipe = Recipe(16, 256, 256, 64, steps=(step,))
    return Design(recipe.build(), name="medium", recipe=recipe)


def open_app(design: Design, data_dir: Path, tab: str = "Patterns") -> tuple[AppTest, DesignStore]:
    """The app on ``design`` with ``tab`` open, restored from an autosave as a returning
    visitor's would be."""
    store = DesignStore(data_dir)
    session_id = new_session_id()
    store.autosave(session_id, design)
    at = AppTest.from_file(APP, default_timeout=600)
    at.query_params[keys.SESSION_QUERY_PARAM] = session_id
    at.session_state["tab"] = tab
    at.run()
    check(at)
    return at, store


def check(at: AppTest) -> None:
    if at.exception or at.error:
        raise RuntimeError([e.value for e in (*at.exception, *at.error)])


def timed(action: Callable[[], None]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def paint(at: AppTest, store: DesignStore, head: int, row: int) -> float:
    """Toggle a 64 × 64-block square of one head as the Paint tab does, then rerun."""
    op = EditOp("toggle", Rect(row, row, row + 63, row + 63), heads=(head,))

    def edit_and_rerun() -> None:
        session = at.session_state
        state.commit(session, changes.edit(state.design(session), op), store)
        at.run()

    seconds = timed(edit_and_rerun)
    check(at)
    return seconds


def undo(at: AppTest) -> float:
    seconds = timed(lambda: at.button(key="undo").click().run())
    check(at)
    return seconds


def new_seed(at: AppTest, seed: int) -> float:
    seed_key = keys.step_key(2, "seed")
    seconds = timed(lambda: at.number_input(key=seed_key).set_value(seed).run())
    check(at)
    return seconds


def autosave(store: DesignStore, at: AppTest) -> float:
    """The part of every change that writes the session's autosave, timed alone."""
    session = at.session_state
    return timed(lambda: store.autosave(session[keys.SESSION_ID], state.design(session)))


def report(name: str, goal: float, samples: list[float]) -> None:
    median = statistics.median(samples)
    verdict = "ok" if median <= goal else "OVER"
    shown = ", ".join(f"{s:.3f}" for s in samples)
    print(f"{name:<36} median {median:7.3f} s  (goal {goal:.3f} s, {verdict})  [{shown}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="samples per action")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        os.environ[DATA_DIR_ENV] = data_dir
        at, store = open_app(cap_design(), Path(data_dir))
        edits, undos, seeds = [], [], []
        for i in range(args.repeats):
            edits.append(paint(at, store, head=i % 4, row=256 * (i + 1)))
            undos.append(undo(at))
            seeds.append(new_seed(at, 100 + i))
        report("4 x 4096^2: paint edit of one head", GOALS_S["cap"], edits)
        report("4 x 4096^2: undo", GOALS_S["cap"], undos)
        report("4 x 4096^2: new seed (head 0)", GOALS_S["cap"], seeds)
        saves = [autosave(store, at) for _ in range(3)]
        report("4 x 4096^2: of which the autosave", GOALS_S["cap"], saves)

        for tab in ("Patterns", "Paint"):
            at, store = open_app(medium_design(), Path(data_dir), tab)
            edits = [paint(at, store, head=i % 16, row=i * 16) for i in range(args.repeats * 2)]
            report(f"16 x 256^2: paint edit, {tab} tab", GOALS_S["16x256"], edits)
        saves = [autosave(store, at) for _ in range(3)]
        report("16 x 256^2: of which the autosave", GOALS_S["16x256"], saves)


if __name__ == "__main__":
    main()
