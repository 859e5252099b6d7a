"""Server time of the app at the size cap: ``python tools/size_cap.py [--out results.json]``.

Drives ``app.py`` headless with ``AppTest`` (which adds its own overhead, so these are upper
bounds). Every rerun is followed, as in the served app, by the full garbage collection Streamlit
runs after each run before the browser hears the run end (``runner.postScriptGC``), which
``AppTest`` leaves out: it was a second of every click on a busy machine. The interaction
targets: every click, parameter change and tab switch within 1 s of server time at 4 × 4096²
blocks and 300 ms at 16 × 256²; the first page within 3 s warm (a new session on a running
server) and 8 s cold (a new server process, imports included). Measured:

- a click (a paint edit, as the canvas's callback does it, and the rerun), a parameter change
  (a pattern parameter through its widget) and a switch to every tab, at both sizes;
- the first page of a new session, warm, and cold in a fresh Python process;

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
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from streamlit import config
from streamlit.testing.v1 import AppTest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled
sys.path.insert(0, str(Path(__file__).resolve().parent))

from canvas_cost import load_average, run_meta

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
GOALS_S = {"cap": 1.0, "16x256": 0.300, "warm": 3.0, "cold": 8.0}
#: The tabs of ``app.py`` (read from it, so the script measures an older checkout's tabs too).
TABS = tuple(
    re.findall(r'"([^"]+)"', re.search(r"TABS = \(([^)]*)\)", Path(APP).read_text()).group(1))
)
#: A new process's first page: imports, the app's first run, its caches cold.
COLD_SCRIPT = """
import gc, os, sys, time
start = time.perf_counter()
sys.path.insert(0, {root!r})
os.environ["{env}"] = {data_dir!r}
from streamlit.testing.v1 import AppTest
at = AppTest.from_file({app!r}, default_timeout=600)
at.run()
gc.collect(2)
assert not at.exception, [e.value for e in at.exception]
print(time.perf_counter() - start)
"""


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


def served(target) -> None:
    """``target.run()`` (an ``AppTest`` or one of its widgets), then what the served app does
    after every run and ``AppTest`` does not: a full garbage collection, when
    ``runner.postScriptGC`` is on (Streamlit's default)."""
    target.run()
    if config.get_option("runner.postScriptGC"):
        gc.collect(2)


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
        served(at)

    seconds = timed(edit_and_rerun)
    check(at)
    return seconds


def undo(at: AppTest) -> float:
    seconds = timed(lambda: served(at.button(key="undo").click()))
    check(at)
    return seconds


def new_seed(at: AppTest, seed: int) -> float:
    seed_key = keys.step_key(2, "seed")
    seconds = timed(lambda: served(at.number_input(key=seed_key).set_value(seed)))
    check(at)
    return seconds


def autosave(store: DesignStore, at: AppTest) -> float:
    """The part of every change that writes the session's autosave, timed alone."""
    session = at.session_state
    return timed(lambda: store.autosave(state.session_id(session), state.design(session)))


def parameter(at: AppTest, key: str, value) -> float:
    """A pattern parameter changed through its widget, and the rerun."""
    seconds = timed(lambda: served(at.number_input(key=key).set_value(value)))
    check(at)
    return seconds


def switch_tabs(at: AppTest) -> dict[str, float]:
    """Every tab opened in turn (from the one before it), and back to Patterns."""
    seconds = {}
    for tab in (*TABS[1:], TABS[0]):
        at.session_state["tab"] = tab
        seconds[tab] = timed(lambda: served(at))
        check(at)
    return seconds


def first_page_warm(data_dir: Path) -> float:
    """A new session's first page on the default design, in this (warm) process."""
    at = AppTest.from_file(APP, default_timeout=600)
    seconds = timed(lambda: served(at))
    check(at)
    return seconds


def first_page_cold(data_dir: Path) -> float:
    """A new process's first page, from its start (imports included)."""
    script = COLD_SCRIPT.format(root=str(Path(APP).parent), env=DATA_DIR_ENV,
                                data_dir=str(data_dir), app=APP)  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)  # fmt: skip
    return float(done.stdout.strip().splitlines()[-1])


RESULTS: dict[str, dict] = {}


def report(name: str, goal: float, samples: list[float]) -> None:
    median = statistics.median(samples)
    verdict = "ok" if median <= goal else "OVER"
    shown = ", ".join(f"{s:.3f}" for s in samples)
    print(f"{name:<44} median {median:7.3f} s  (goal {goal:.3f} s, {verdict})  [{shown}]")
    RESULTS[name] = {"median_s": median, "goal_s": goal, "samples_s": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="samples per action")
    parser.add_argument("--out", type=Path, help="write the results as JSON here too")
    args = parser.parse_args()
    meta = {**run_meta(), "repeats": args.repeats}
    with tempfile.TemporaryDirectory() as data_dir:
        os.environ[DATA_DIR_ENV] = data_dir
        report("first page, cold (a new process)", GOALS_S["cold"],
               [first_page_cold(Path(data_dir)) for _ in range(2)])  # fmt: skip
        first_page_warm(Path(data_dir))  # this process's imports and caches
        report("first page, warm (a new session)", GOALS_S["warm"],
               [first_page_warm(Path(data_dir)) for _ in range(args.repeats)])  # fmt: skip

        at, store = open_app(cap_design(), Path(data_dir))
        edits, undos, seeds, params = [], [], [], []
        for i in range(args.repeats):
            edits.append(paint(at, store, head=i % 4, row=256 * (i + 1)))
            undos.append(undo(at))
            seeds.append(new_seed(at, 100 + i))
            params.append(parameter(at, keys.step_key(0, "window_blocks"), 9 + i % 2))
        report("4 x 4096^2: click (paint edit of one head)", GOALS_S["cap"], edits)
        report("4 x 4096^2: undo", GOALS_S["cap"], undos)
        report("4 x 4096^2: new seed (head 0)", GOALS_S["cap"], seeds)
        report("4 x 4096^2: parameter change (window)", GOALS_S["cap"], params)
        tabs = [switch_tabs(at) for _ in range(2)]
        for tab in tabs[0]:
            report(f"4 x 4096^2: open the {tab} tab", GOALS_S["cap"], [t[tab] for t in tabs])
        saves = [autosave(store, at) for _ in range(3)]
        report("4 x 4096^2: of which the autosave", GOALS_S["cap"], saves)

        for tab in ("Patterns", "Paint"):
            at, store = open_app(medium_design(), Path(data_dir), tab)
            edits = [paint(at, store, head=i % 16, row=i * 16) for i in range(args.repeats * 2)]
            report(f"16 x 256^2: click (paint edit), {tab} tab", GOALS_S["16x256"], edits)
        at, store = open_app(medium_design(), Path(data_dir))
        params = [parameter(at, keys.step_key(0, "seed"), 8 + i) for i in range(args.repeats)]
        report("16 x 256^2: parameter change (seed)", GOALS_S["16x256"], params)
        tabs = [switch_tabs(at) for _ in range(2)]
        for tab in tabs[0]:
            report(f"16 x 256^2: open the {tab} tab", GOALS_S["16x256"], [t[tab] for t in tabs])
        saves = [autosave(store, at) for _ in range(3)]
        report("16 x 256^2: of which the autosave", GOALS_S["16x256"], saves)
    if args.out:
        meta["load_average_after"] = load_average()
        args.out.write_text(json.dumps({"meta": meta, "results": RESULTS}, indent=2) + "\n")


if __name__ == "__main__":
    main()
