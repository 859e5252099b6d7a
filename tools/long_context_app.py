"""Server time and memory of the app on a 32-head x 128K-token design held as runs.

``python tools/long_context_app.py [--repeats 5] [--out results.json]``

The design: 32 heads of a causal sliding window of 4,096 tokens plus a one-block sink at
block 64 (2,048^2 blocks per head, as ``benchmarks/long_context.py``), restored from an autosave
as a returning visitor's would be. Drives ``app.py`` headless with ``AppTest`` (upper bounds:
AppTest adds its own overhead) and, as the served app does after every run, a full garbage
collection (``size_cap.served``). Measured, with the targets:

- the design file's bytes (<= 16 MiB);
- the first page of a new session on each of the Paint, Patterns and Analysis tabs: CPU and
  wall seconds and extra peak memory (<= 2 s, <= 512 MB), each sample a design no cache holds
  (windows of 64 to 64 + repeats - 1 blocks); the tiles and lints then run beside the page
  (``ui.background``): how long until they are ready;
- a paint click on the Paint tab: the canvas's trigger done (``canvas.apply``: the edit on
  the runs, the undo step, the autosave; <= 300 ms) and the rerun after it;
- a pan (another full-detail window of the head) and a zoom out (the whole head's density
  picture): the rerun that sends the window (<= 300 ms, pen speed).

Prints the median and every sample; ``--out`` writes JSON with the machine's load averages.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled
sys.path.insert(0, str(Path(__file__).resolve().parent))

from canvas_cost import load_average, run_meta
from size_cap import APP, check, first_page_warm, served, timed
from streamlit.testing.v1 import AppTest
from whole_path import measure

from designer.analysis import analysed
from designer.design import Design
from designer.formats.pt_file import design_file_bytes
from designer.layout import Layout
from designer.patterns.attention_sinks import attention_sinks_runs
from designer.storage import DATA_DIR_ENV, DesignStore, new_session_id
from ui import keys, state
from ui.canvas.apply import apply_trigger
from ui.canvas.viewport import View

GOALS = {"file_mib": 16, "first_page_s": 2.0, "first_page_mb": 512, "click_s": 0.3}
HEADS, BLOCKS, BLOCK = 32, 2048, 64


def long_design(window_blocks: int = 64) -> Design:
    runs = attention_sinks_runs(HEADS, BLOCKS, BLOCKS, sink_blocks=1, window_blocks=window_blocks)
    return Design(Layout(runs, BLOCK), name="long context", causal=True)


def first_page(store: DesignStore, design: Design, tab: str) -> tuple[AppTest, dict]:
    session_id = new_session_id()
    store.autosave(session_id, design)
    at = AppTest.from_file(APP, default_timeout=600)
    at.query_params[keys.SESSION_QUERY_PARAM] = session_id
    at.session_state["tab"] = tab
    _, cost = measure(lambda: served(at))
    check(at)
    return at, cost


def analysis_ready(design: Design, timeout_s: float = 120) -> float:
    """Seconds until the background analysis of ``design`` is in the cache."""
    start = time.perf_counter()
    while analysed(design) is None:
        if time.perf_counter() - start > timeout_s:
            raise TimeoutError("the background analysis did not finish")
        time.sleep(0.01)
    return time.perf_counter() - start


def stroke(seq: int, row: int, col: int) -> dict:
    """A 3 x 3 brush square at ``(row, col)`` of head 0, as the canvas sends it."""
    bits = base64.b64encode(np.packbits(np.ones(9, dtype=bool)).tobytes()).decode()
    region = {"kind": "mask", "row0": row, "col0": col, "rows": 3, "cols": 3, "bits": bits}
    return {"seq": seq, "op": "paint", "head": 0, "action": "toggle", "heads": [0],
            "region": region}  # fmt: skip


def click(at: AppTest, store: DesignStore, seq: int) -> tuple[float, float, float]:
    """``(CPU and wall seconds of the trigger, wall seconds of the rerun after it)``."""
    value = {"client": "timing-canvas", "strokes": [stroke(seq, 100 + 20 * seq, 900)]}
    _, cost = measure(lambda: apply_trigger(at.session_state, value, store))
    rerun = timed(lambda: served(at))
    check(at)
    return cost["cpu_s"], cost["wall_s"], rerun


def show(at: AppTest, view: View) -> float:
    """The rerun that sends ``view`` of head 0 (the canvas asked for it)."""
    shape = state.design(at.session_state).layout.shape
    at.session_state[keys.PAINT_VIEW] = (shape, 0, view)
    seconds = timed(lambda: served(at))
    check(at)
    return seconds


RESULTS: dict[str, dict] = {}


def report(name: str, goal: float | None, samples: list[float], unit: str = "s") -> None:
    median = statistics.median(samples)
    verdict = "" if goal is None else f"(goal {goal}, {'ok' if median <= goal else 'OVER'})"
    shown = ", ".join(f"{s:.3f}" for s in samples)
    print(f"{name:<52} median {median:9.3f} {unit} {verdict} [{shown}]")
    RESULTS[name] = {"median": median, "unit": unit, "goal": goal, "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="samples per action")
    parser.add_argument("--out", type=Path, help="write the results as JSON here too")
    args = parser.parse_args()
    meta = {**run_meta(), "repeats": args.repeats}
    design = long_design()
    report("design file", GOALS["file_mib"], [len(design_file_bytes(design)) / 2**20], "MiB")
    with tempfile.TemporaryDirectory() as data_dir:
        os.environ[DATA_DIR_ENV] = data_dir
        store = DesignStore(data_dir)
        first_page_warm(Path(data_dir))  # this process's imports and caches
        for tab in ("Paint", "Patterns", "Analysis"):
            costs, ready = [], []
            for i in range(args.repeats):
                at, cost = first_page(store, long_design(64 + i), tab)  # new to every cache
                costs.append(cost)
                ready.append(analysis_ready(state.design(at.session_state)))
            report(f"first page, {tab} tab: CPU", GOALS["first_page_s"],
                   [c["cpu_s"] for c in costs])  # fmt: skip
            report(f"first page, {tab} tab: wall", GOALS["first_page_s"],
                   [c["wall_s"] for c in costs])  # fmt: skip
            report(f"first page, {tab} tab: extra peak memory", GOALS["first_page_mb"],
                   [c["extra_peak_mb"] for c in costs], "MB")  # fmt: skip
            report(f"first page, {tab} tab: tiles and lints ready after", None, ready)
        at, _ = first_page(store, design, "Paint")
        analysis_ready(state.design(at.session_state))
        served(at)
        clicks = [click(at, store, seq) for seq in range(1, args.repeats + 1)]
        report("paint click: the stroke done (edit, undo step, autosave): CPU",
               GOALS["click_s"], [c[0] for c in clicks])  # fmt: skip
        report("paint click: the stroke done: wall", GOALS["click_s"], [c[1] for c in clicks])
        report("paint click: the rerun after it", None, [c[2] for c in clicks])
        pans = [show(at, View(256 * i, 128 * i, 700, 1100, 1)) for i in range(args.repeats)]
        report("pan: the rerun sending a full-detail window", GOALS["click_s"], pans)
        outs = [show(at, View(0, 0, BLOCKS, BLOCKS, 2 << (i % 2))) for i in range(args.repeats)]
        report("zoom out: the rerun sending the density picture", GOALS["click_s"], outs)
    if args.out:
        meta["load_average_after"] = load_average()
        args.out.write_text(json.dumps({"meta": meta, "results": RESULTS}, indent=2) + "\n")


if __name__ == "__main__":
    main()
