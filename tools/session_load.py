"""Memory and fairness across the sessions of one real server: ``streamlit run``, headless Chromium.

    python tools/session_load.py [--json benchmarks/results/<date>-session-load-cpu.json]

1. **Memory given back.** The start-up memory is the server's RSS once it is idle after a first
   session has shown the default design and closed. Then ``--sessions`` sessions each open a
   16 x 2048 x 2048-block design (the largest grid) and paint ``--strokes`` strokes on it (each a
   new 64 MiB layout kept for undo); their pages close, and the server's RSS is read every 5 s for
   ``--idle-s`` seconds. Target: back within 512 MB of the start-up memory.
2. **A victim beside two heavy sessions.** While one session paints bursts of strokes on that
   design and another uploads the largest design file (4 x 4096 x 4096 blocks) again and again,
   new sessions open the default page: each one's first run, from its request to the message
   that it finished, timed by a bare websocket client (so no browser's work is counted).
   Target: <= 1 s.

Every wait is for a condition (the app idle, a run finished), never a fixed sleep.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import torch  # noqa: E402
from canvas_cost import run_meta  # noqa: E402

from designer.design import Design  # noqa: E402
from designer.formats import save_design  # noqa: E402
from designer.layout import Layout  # noqa: E402
from designer.storage import DesignStore  # noqa: E402
from tests.ui.browser_app import CANVAS, grid_point, launch, serve_app, settle  # noqa: E402

TARGET_MEMORY_MB = 512
TARGET_VICTIM_S = 1.0
WAIT_S = 300


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def random_design(shape: tuple[int, int, int], block_size: int, seed: int) -> Design:
    generator = torch.Generator().manual_seed(seed)
    blocks = torch.rand(shape, generator=generator) < 0.05
    return Design(Layout(blocks, block_size), name=f"random {seed}")


def open_page(browser, url: str, session: str | None = None, tab: str | None = None):
    page = browser.new_page(viewport={"width": 1480, "height": 1000})
    page.set_default_timeout(WAIT_S * 1000)
    page.goto(url if session is None else f"{url}/?session={session}")
    page.locator('[data-testid="stMetricValue"]').first.wait_for()
    if tab:
        page.get_by_role("tab", name=tab).click()
        if tab == "Paint":
            page.locator(f"{CANVAS}[data-ready='true']").wait_for()
    settle(page)
    return page


def draw_strokes(page, count: int, offset: int = 0) -> None:
    """Draw ``count`` toggled rectangles from the top-left corner, each of another size (each a
    new layout), without waiting for the app."""
    for k in range(count):
        size = 64 + 97 * ((k + offset) % 20)
        page.mouse.move(*grid_point(page, 0.2, 0.2))
        page.mouse.down()
        page.mouse.move(*grid_point(page, size, size), steps=2)
        page.mouse.up()


def pick_toggle_rect(page) -> None:
    page.locator('[data-paint="rect"]').click()
    page.get_by_text("toggle", exact=True).click()
    settle(page)


def memory(url: str, pid: int, store: DesignStore, browser, args) -> dict:
    first = open_page(browser, url)
    first.close()
    idle = wait_idle_memory(pid, 30)
    start_mb = min(idle)
    big = random_design((16, 2048, 2048), 16, seed=1)
    peaks = []
    pages = []
    for k in range(args.sessions):
        session = secrets.token_urlsafe(12)
        store.autosave(session, big)
        page = open_page(browser, url, session, tab="Paint")
        pick_toggle_rect(page)
        draw_strokes(page, args.strokes, offset=k)
        settle(page, quiet_s=2.0)
        peaks.append(rss_mb(pid))
        pages.append(page)
    loaded_mb = rss_mb(pid)
    for page in pages:
        page.close()
    after = wait_idle_memory(pid, args.idle_s)
    return {
        "start_up_rss_mb": start_mb,
        "loaded_rss_mb": loaded_mb,
        "rss_after_each_session_mb": peaks,
        "idle_rss_every_5_s_mb": after,
        "idle_rss_final_mb": after[-1],
        "above_start_up_mb": after[-1] - start_mb,
        "target_mb": TARGET_MEMORY_MB,
        "sessions": args.sessions,
        "strokes_per_session": args.strokes,
    }


def wait_idle_memory(pid: int, seconds: float) -> list[float]:
    samples = []
    deadline = time.monotonic() + seconds
    while True:
        samples.append(rss_mb(pid))
        if time.monotonic() >= deadline:
            return samples
        time.sleep(5)


def largest_file(home: Path) -> Path:
    buffer = io.BytesIO()
    save_design(random_design((4, 4096, 4096), 16, seed=2), buffer)
    path = home / "largest.pt"
    path.write_bytes(buffer.getvalue())
    return path


def victim(url: str, store: DesignStore, home: Path, driver, args) -> dict:
    """New sessions render the default page while two pages, each in its own browser, work hard.

    Playwright drives both pages from this thread, so each round starts the heavy work (a burst
    of strokes, an upload), times a victim's render while the server is busy with it, then lets
    the work finish.
    """
    upload = largest_file(home)
    painter_session = secrets.token_urlsafe(12)
    store.autosave(painter_session, random_design((16, 2048, 2048), 16, seed=3))
    render(url)  # the default page's caches warm, as on a running server
    alone = [render(url) for _ in range(3)]
    browsers = [launch(driver) for _ in range(2)]
    try:
        painter = open_page(browsers[0], url, painter_session, tab="Paint")
        pick_toggle_rect(painter)
        uploader = open_page(browsers[1], url, tab="Files")
        renders = []
        for k in range(args.renders):
            draw_strokes(painter, args.strokes, offset=k * args.strokes)
            uploader.locator('input[type="file"]').set_input_files(str(upload))
            renders.append(render(url))
            settle(painter)
            settle(uploader)
    finally:
        for browser in browsers:
            browser.close()
    return {
        "victim_alone_s": alone,
        "victim_renders_s": renders,
        "victim_slowest_s": max(renders),
        "target_s": TARGET_VICTIM_S,
        "strokes_per_burst": args.strokes,
    }


def render(url: str) -> float:
    """Seconds a new session's first run of the default page takes, seen from a bare websocket
    client speaking Streamlit's protocol (no browser: its own work is not counted)."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from websockets.sync.client import connect

    stream = url.replace("http", "ws", 1) + "/_stcore/stream"
    with connect(stream, subprotocols=["streamlit"], max_size=None) as socket:
        ask = BackMsg()
        ask.rerun_script.query_string = ""
        start = time.monotonic()
        socket.send(ask.SerializeToString())
        while True:
            message = ForwardMsg()
            message.ParseFromString(socket.recv(timeout=WAIT_S))
            if message.WhichOneof("type") == "script_finished":
                return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--strokes", type=int, default=8)
    parser.add_argument("--idle-s", type=float, default=150)
    parser.add_argument("--renders", type=int, default=8)
    parser.add_argument("--skip", choices=["memory", "victim"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict = {}
    meta = run_meta()  # the load average as the run starts
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as driver:
        home = Path(tmp)
        with serve_app(home) as (url, _log):
            pid = int((home / "server.pid").read_text())
            store = DesignStore(home / "data")
            if args.skip != "memory":
                browser = launch(driver)
                results["memory"] = memory(url, pid, store, browser, args)
                browser.close()
                m = results["memory"]
                print(
                    f"memory: start-up {m['start_up_rss_mb']:.0f} MB, loaded "
                    f"{m['loaded_rss_mb']:.0f} MB, idle after {args.idle_s:.0f} s "
                    f"{m['idle_rss_final_mb']:.0f} MB: {m['above_start_up_mb']:+.0f} MB "
                    f"(target <= {TARGET_MEMORY_MB} MB)"
                )
            if args.skip != "victim":
                results["victim"] = victim(url, store, home, driver, args)
                v = results["victim"]
                print(
                    f"victim: slowest render {v['victim_slowest_s']:.2f} s over "
                    f"{len(v['victim_renders_s'])} (alone at most {max(v['victim_alone_s']):.2f} s;"
                    f" target <= {TARGET_VICTIM_S} s)"
                )
    if args.json:
        meta["load_average_at_end"] = [round(load, 2) for load in os.getloadavg()]
        args.json.write_text(json.dumps({"meta": meta, **results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
