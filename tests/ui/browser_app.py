"""The app served by ``streamlit run`` and driven by headless Chromium, for browser tests and
the paint latency benchmark: a server on a free port with its own data directory."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
STARTUP_S = 90


def launch(driver):
    """Headless Chromium from the system's package (closed with ``driver``)."""
    return driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def served_for_tests(tmp_path_factory, name: str) -> Iterator[tuple[str, object, Path]]:
    """A module's app server for browser tests (use with ``yield from`` in a fixture): its URL,
    the ``DesignStore`` of its data and its log; skipped without Chromium."""
    import pytest

    from designer.storage import DesignStore

    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    home = tmp_path_factory.mktemp(name)
    try:
        with serve_app(home) as (url, log_path):
            yield url, DesignStore(home / "data"), log_path
    except RuntimeError as error:
        pytest.fail(str(error))


@contextlib.contextmanager
def serve_app(home: Path) -> Iterator[tuple[str, Path]]:
    """Run the app with its data under ``home``; yields its URL and the server's log file (its
    process id is in ``home / "server.pid"``, for tools that watch its memory).

    Raises ``RuntimeError`` (with the log) if it exits or does not answer within ``STARTUP_S``.
    """
    port = free_port()
    log_path = home / "server.log"
    command = [
        *(sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py")),
        *("--server.headless", "true", "--server.port", str(port)),
        *("--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"),
    ]
    env = {**os.environ, "BSD_DATA_DIR": str(home / "data")}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    (home / "server.pid").write_text(str(process.pid))
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process, log_path)
        yield url, log_path
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def _wait_healthy(url: str, process: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"streamlit exited early:\n{log_path.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"streamlit did not answer within {STARTUP_S} s:\n{log_path.read_text()}")


# --------------------------------------------------------------------------- the paint canvas
CANVAS = '[data-testid="paint-canvas"]'
#: The colour of an empty block on the canvas.
EMPTY = [244, 246, 250]


def canvas_point(page, row: float, col: float) -> tuple[float, float]:
    """Page coordinates of the centre of cell ``(row, col)`` at the canvas's initial zoom."""
    canvas = page.locator(CANVAS)
    canvas.scroll_into_view_if_needed()
    rows, cols = int(canvas.get_attribute("data-rows")), int(canvas.get_attribute("data-cols"))
    box = canvas.bounding_box()
    return box["x"] + box["width"] * (col + 0.5) / cols, box["y"] + box["height"] * (
        row + 0.5
    ) / rows


def wait_canvas(page, done: int = 0, timeout_s: float = 30) -> None:
    """Wait until the canvas shows Python's head with stroke ``done`` and those before it done."""
    canvas = page.locator(CANVAS)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if canvas.count() and canvas.evaluate(
            "(c, n) => c.dataset.ready === 'true' && Number(c.dataset.done) >= n", done
        ):
            return
        time.sleep(0.05)
    raise TimeoutError(f"the canvas did not show stroke {done} done within {timeout_s} s")


#: JavaScript: the RGB at the centre of cell (row, col) of canvas c, read back from the canvas.
PIXEL_JS = """{
    const [scale, x, y] = c.dataset.view.split(' ').map(Number);
    const dpr = c.width / parseFloat(c.style.width);
    const px = (x + (col + 0.5) * scale) * dpr, py = (y + (row + 0.5) * scale) * dpr;
    return Array.from(c.getContext('2d').getImageData(px, py, 1, 1).data.slice(0, 3));
}"""


def canvas_pixel(page, row: float, col: float) -> list[int]:
    """The RGB the canvas shows at the centre of cell ``(row, col)`` (at any zoom)."""
    return page.locator(CANVAS).evaluate(f"(c, [row, col]) => {PIXEL_JS}", [row, col])


def drag(page, cells: list[tuple[float, float]], steps: int = 4) -> None:
    """Press on the centre of the first cell, move through the others, release on the last."""
    trace(page, [(row + 0.5, col + 0.5) for row, col in cells], steps)


def trace(page, points: list[tuple[float, float]], steps: int = 4) -> None:
    """Press on the first grid point ``(row, col)``, move through the others, release on the
    last (``steps`` pointer moves between two points)."""
    page.mouse.move(*grid_point(page, *points[0]))
    page.mouse.down()
    for point in points[1:]:
        page.mouse.move(*grid_point(page, *point), steps=steps)
    page.mouse.up()


def pick(page, name: str) -> None:
    """Press a button of the canvas's toolbar (a tool, a brush size, Fit, Undo, Redo)."""
    page.locator(f'[data-paint="{name}"]').click()


def zoomed_point(page, row: float, col: float) -> tuple[float, float]:
    """Page coordinates of the centre of cell ``(row, col)`` at the canvas's current zoom."""
    canvas = page.locator(CANVAS)
    canvas.scroll_into_view_if_needed()
    scale, x, y = map(float, canvas.get_attribute("data-view").split())
    box = canvas.bounding_box()
    return box["x"] + x + (col + 0.5) * scale, box["y"] + y + (row + 0.5) * scale


#: The canvas's largest zoom, CSS pixels a block (``MAX_CELL_PX`` in paint_canvas.js).
MAX_CELL_PX = 64


def zoom_at(page, row: float, col: float, notches: int, timeout_s: float = 10) -> None:
    """Turn the wheel ``notches`` times (towards the user: zoom in) over cell ``(row, col)``,
    each notch once the canvas has taken the one before: a loaded machine can deliver a wheel
    event before the canvas is under the pointer, and the page scrolls instead of zooming."""
    canvas = page.locator(CANVAS)
    for _ in range(notches):
        before = canvas.get_attribute("data-view")
        if float(before.split()[0]) >= MAX_CELL_PX:
            return
        deadline = time.monotonic() + timeout_s
        while canvas.get_attribute("data-view") == before:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the canvas did not zoom from {before} in {timeout_s} s")
            page.mouse.move(*zoomed_point(page, row, col))
            page.mouse.wheel(0, -240)
            page.wait_for_timeout(50)


def grid_point(page, row: float, col: float) -> tuple[float, float]:
    """Page coordinates of the grid point ``(row, col)`` in blocks (``(0, 0)``: the top-left
    corner of block 0) at the canvas's current zoom."""
    return zoomed_point(page, row - 0.5, col - 0.5)


# --------------------------------------------------------------------------- the whole app
def settle(page, quiet_s: float = 1.0, timeout_s: float = 300) -> None:
    """Wait until the app has finished its reruns: no status widget for ``quiet_s`` seconds."""
    status = page.locator('[data-testid="stStatusWidget"]')
    quiet_since = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if status.count():
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > quiet_s:
            return
        page.wait_for_timeout(100)
    raise TimeoutError(f"the app did not settle within {timeout_s} s")
