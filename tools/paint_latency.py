"""How fast the paint canvas answers, in headless Chromium against ``streamlit run app.py``.

For each size (16 heads × 256² blocks of the default BigBird recipe, and 4 heads × 4096² blocks
of ``assets/examples/size_cap_window_globals.json``, restored from an autosave), on the Paint tab:

- click to pixel: from the pointer event to the painted cell read back from the canvas in the
  page (target ≤ 50 ms);
- click to committed: from the pointer event to the statistics showing the change (targets
  ≤ 300 ms at 16 × 256², ≤ 1.5 s at 4 × 4096²);
- a drag stroke across 40 empty cells: all 40 painted, and one Ctrl+Z takes back all of them;
- two clicks in a row with the same tool, without waiting: both paint;
- and the page around it: the first page (cold: the server's first; warm: a second page on it)
  until its statistics show (targets ≤ 8 s and ≤ 3 s), a switch to every tab and a pattern
  parameter change until the rerun is done (targets ≤ 300 ms at 16 × 256², ≤ 1 s at 4 × 4096²).

Times are in-page (``performance.now`` against the event's time stamp), medians of
``--clicks`` clicks. Prints a table and writes ``--out`` JSON (with the machine, its load
averages before and after, the versions and the commit).

    python tools/paint_latency.py [--sizes 16x256 4x4096] [--clicks 7] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from canvas_cost import load_average, run_meta  # noqa: E402

from designer.formats import load_design  # noqa: E402
from designer.storage import DesignStore, load_default_design  # noqa: E402
from tests.ui.browser_app import (  # noqa: E402
    CANVAS,
    PIXEL_JS,
    canvas_pixel,
    launch,
    pick,
    serve_app,
    settle,
    wait_canvas,
    zoom_at,
    zoomed_point,
)

SIZES = {"16x256": (16, 256, 64), "4x4096": (4, 4096, 16)}
CAP_DESIGN = (
    Path(__file__).resolve().parents[1] / "assets" / "examples" / "size_cap_window_globals.json"
)
TARGETS_S = {"pixel": 0.050, "16x256": 0.300, "4x4096": 1.5}
SESSION = "paintlatencybench"
EMPTY = [244, 246, 250]
WAIT_S = 120

#: In the page: arm a timer on the next pointerdown on canvas ``c``, until the pixel of cell
#: (row, col) changes and until the "Active blocks" statistic changes; the result is the promise
#: ``window.__paintResult``, resolving to {pixel_ms, committed_ms}.
ARM_JS = (
    "(c, [row, col]) => { const pixel = () => "
    + PIXEL_JS
    + """;
    const metric = () => [...document.querySelectorAll('[data-testid="stMetric"]')]
        .find((m) => m.innerText.includes('Active blocks'))
        .querySelector('[data-testid="stMetricValue"]').innerText;
    const before = metric(), pixelBefore = pixel().join();
    window.__paintResult = new Promise((resolve) => {
        c.addEventListener('pointerdown', (event) => {
            const start = event.timeStamp, result = {};
            const poll = () => {
                const now = performance.now();
                if (result.pixel_ms === undefined && pixel().join() !== pixelBefore)
                    result.pixel_ms = now - start;
                if (metric() !== before && result.pixel_ms !== undefined) {
                    result.committed_ms = now - start;
                    resolve(result);
                } else requestAnimationFrame(poll);
            };
            queueMicrotask(poll);
        }, { once: true });
    });
    return true;
}"""
)


def metric(page, label: str) -> int:
    box = page.locator('[data-testid="stMetric"]').filter(has_text=label)
    return int(box.locator('[data-testid="stMetricValue"]').inner_text().replace(",", ""))


def settled_metric(page, label: str) -> int:
    """The statistic once the app has finished its reruns (the status widget gone for 1 s)."""
    settle(page, timeout_s=WAIT_S)
    return metric(page, label)


def empty_cells(page, row: int, cols: range) -> list[int]:
    return [c for c in cols if canvas_pixel(page, row, c) == EMPTY]


def prepare(home: Path, size: str) -> None:
    n_heads, n_blocks, block_size = SIZES[size]
    if size == "4x4096":  # random blocks in every head would pass the build budget at this size
        design = load_design(CAP_DESIGN)
    else:
        default = load_default_design()
        recipe = replace(default.recipe, n_heads=n_heads, n_q_blocks=n_blocks,
                         n_k_blocks=n_blocks, block_size=block_size)  # fmt: skip
        design = default.with_layout(recipe.build(), recipe=recipe)
    DesignStore(home / "data").autosave(SESSION, design)


def open_paint(page, url: str, zoom: int) -> None:
    page.goto(f"{url}/?session={SESSION}")
    page.get_by_role("tab", name="Paint").click(timeout=WAIT_S * 1000)
    wait_canvas(page, timeout_s=WAIT_S)
    if zoom:
        zoom_at(page, 0, 0, zoom)  # cells big enough to click one at a time


def measure(page, size: str, clicks: int) -> dict:
    applied = 0
    row = 30
    free = empty_cells(page, row, range(12, 56))
    if len(free) < clicks + 2:
        raise RuntimeError(f"row {row} has only {len(free)} empty cells to click")
    pixel, committed = [], []
    for col in free[:clicks]:
        page.locator(CANVAS).evaluate(ARM_JS, [row, col])
        page.mouse.click(*zoomed_point(page, row, col))
        result = page.evaluate("() => window.__paintResult")
        applied += 1
        wait_canvas(page, applied, timeout_s=WAIT_S)
        pixel.append(result["pixel_ms"])
        committed.append(result["committed_ms"])

    # Two clicks in a row, same tool, no waiting between them.
    a, b = free[clicks : clicks + 2]
    before = settled_metric(page, "Active blocks")
    page.mouse.click(*zoomed_point(page, row, a))
    page.mouse.click(*zoomed_point(page, row, b))
    applied += 2
    wait_canvas(page, applied, timeout_s=WAIT_S)
    two = settled_metric(page, "Active blocks") - before
    both = two == 2 and EMPTY not in (canvas_pixel(page, row, a), canvas_pixel(page, row, b))

    # A drag across 40 cells of a row below the diagonal, then one undo.
    stroke_row = 50
    cols = range(5, 45)
    empty = empty_cells(page, stroke_row, cols)
    before = settled_metric(page, "Active blocks")
    page.mouse.move(*zoomed_point(page, stroke_row, cols[0]))
    page.mouse.down()
    page.mouse.move(*zoomed_point(page, stroke_row, cols[-1]), steps=40)
    page.mouse.up()
    applied += 1
    wait_canvas(page, applied, timeout_s=WAIT_S)
    stroke_added = settled_metric(page, "Active blocks") - before
    painted = sum(canvas_pixel(page, stroke_row, c) != EMPTY for c in cols)
    page.keyboard.press("Control+z")
    applied += 1
    wait_canvas(page, applied, timeout_s=WAIT_S)
    undone = settled_metric(page, "Active blocks") == before
    undone = undone and stroke_added == len(empty) and empty_cells(page, stroke_row, cols) == empty
    return {
        "size": size,
        "click_to_pixel_ms": statistics.median(pixel),
        "click_to_committed_ms": statistics.median(committed),
        "pixel_ms_all": pixel,
        "committed_ms_all": committed,
        "drag_40_cells_painted": painted,
        "drag_one_undo_step": undone,
        "two_clicks_both_paint": both,
        "two_clicks_added": two,
    }


#: The app's tabs (read from ``app.py``, so an older checkout's are measured too), and the
#: pattern parameter each size changes.
_TABS_LINE = re.search(r"TABS = \(([^)]*)\)", (ROOT / "app.py").read_text()).group(1)
TABS = tuple(re.findall(r'"([^"]+)"', _TABS_LINE))
PARAMETER = {"16x256": ("num_sliding_window_blocks", (7, 5)), "4x4096": ("window_blocks", (9, 8))}
#: In the page: from now, the milliseconds until Streamlit's script has run and stopped (its
#: state attribute going to "running" and back), as the promise ``window.__rerun``.
ARM_RERUN_JS = """() => {
    const app = document.querySelector('[data-testid="stApp"]'), start = performance.now();
    window.__rerun = new Promise((resolve) => {
        let ran = false;
        const watch = new MutationObserver(() => {
            if (app.dataset.testScriptState === "running") ran = true;
            else if (ran) { watch.disconnect(); resolve(performance.now() - start); }
        });
        watch.observe(app, { attributes: true, attributeFilter: ["data-test-script-state"] });
    });
    return true;
}"""


def first_page(page, url: str) -> float:
    """Seconds from opening the design's address to its statistics on screen."""
    start = time.perf_counter()
    page.goto(f"{url}/?session={SESSION}")
    page.locator('[data-testid="stMetricValue"]').first.wait_for(timeout=WAIT_S * 1000)
    seconds = time.perf_counter() - start
    settle(page, timeout_s=WAIT_S)
    return seconds


def rerun_seconds(page, action) -> float:
    """Seconds from ``action`` to the end of the rerun it starts (the script running, then
    not), timed in the page."""
    page.evaluate(ARM_RERUN_JS)
    action()
    seconds = page.evaluate("() => window.__rerun") / 1000
    settle(page, quiet_s=0.5, timeout_s=WAIT_S)
    return seconds


def page_timings(browser, url: str, size: str) -> dict:
    """The first page cold and warm, a switch to every tab, a parameter change."""
    page = browser.new_page(viewport={"width": 1480, "height": 1000})
    page.set_default_timeout(WAIT_S * 1000)
    cold = first_page(page, url)
    warm = first_page(browser.new_page(viewport={"width": 1480, "height": 1000}), url)
    tabs = {}
    for tab in (*TABS[1:], TABS[0]):
        tabs[tab] = rerun_seconds(page, lambda tab=tab: page.get_by_role(
            "tab", name=tab, exact=True).click())  # fmt: skip
    name, values = PARAMETER[size]
    changes = []
    for value in values:
        box = page.get_by_role("spinbutton", name=name).first

        def change(box=box, value=value) -> None:
            box.fill(str(value))
            box.press("Enter")

        changes.append(rerun_seconds(page, change))
    page.close()
    return {"first_page_cold_s": cold, "first_page_warm_s": warm, "tab_switch_s": tabs,
            "parameter_change_s": changes}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--clicks", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    meta = {**run_meta(), "clicks": args.clicks}
    rows = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            prepare(home, size)
            with serve_app(home) as (url, _), sync_playwright() as driver:
                browser = launch(driver)
                timings = page_timings(browser, url, size)
                page = browser.new_page(viewport={"width": 1480, "height": 1000})
                page.set_default_timeout(WAIT_S * 1000)
                open_paint(page, url, zoom=0 if size == "16x256" else 12)
                pick(page, "brush")
                pick(page, "1")
                rows.append({**measure(page, size, args.clicks), **timings,
                             "load_average": load_average()})  # fmt: skip
                browser.close()
        row = rows[-1]
        print(
            f"{size:>7}: click→pixel {row['click_to_pixel_ms']:6.1f} ms "
            f"(target ≤ {TARGETS_S['pixel'] * 1000:.0f}), click→committed "
            f"{row['click_to_committed_ms']:7.1f} ms (target ≤ {TARGETS_S[size] * 1000:.0f}), "
            f"drag: {row['drag_40_cells_painted']}/40 painted, one undo step: "
            f"{row['drag_one_undo_step']}, two clicks both paint: {row['two_clicks_both_paint']}",
            flush=True,
        )
        tabs = ", ".join(f"{tab} {s:.2f}" for tab, s in row["tab_switch_s"].items())
        print(
            f"{'':>7}  first page cold {row['first_page_cold_s']:.2f} s (target ≤ 8), warm "
            f"{row['first_page_warm_s']:.2f} s (target ≤ 3); tabs (s): {tabs}; parameter "
            f"change (s): {', '.join(f'{s:.2f}' for s in row['parameter_change_s'])}",
            flush=True,
        )
    if args.out:
        meta["load_average_after"] = load_average()
        args.out.write_text(json.dumps({"meta": meta, "results": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
