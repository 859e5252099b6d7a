"""What one paint-canvas trigger costs at the limits: CPU time and extra peak memory per trigger.

    python tools/canvas_cost.py [--json benchmarks/results/<date>-canvas-cost-cpu.json]

Each case is a burst of strokes the canvas sends in one trigger (``ui.canvas.apply``), in its own
Python process so its peak memory is its own. The case's session is started as the app starts
one (``state.init_session``, autosaving to a temporary folder); the canvas's answer loop is
played out: the trigger goes again with the strokes not yet done until all are done. For every
trigger the script reports CPU seconds (user + system) and the growth of peak RSS over the RSS
before it; then the cost of the page's render that follows the last one (the changed heads'
segmentation, the statistics, the canvas's head payload). Targets: <= 2 s CPU and <= 512 MB
extra peak per trigger. Cases (the first three from the issue's probe):

- 64 full-grid toggles, all heads, on 16 x 2048 x 2048 blocks (an imported layout: no recipe);
- two whole-grid masks on 1 x 1024 x 65536 blocks;
- 64 full bands on 1 x 1024 x 65536 blocks;
- 64 one-block clicks on the default design.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from whole_path import measure  # noqa: E402  (one way to measure, shared)

CLIENT = "canvascost01"
CASES = (
    "64 full-grid toggles, all heads, 16 x 2048^2",
    "two whole-grid masks, 1 x 1024 x 65536",
    "64 full bands, 1 x 1024 x 65536",
    "64 one-block clicks, default design",
)


def design_for(case: str):
    import torch

    from designer.design import Design
    from designer.layout import Layout
    from designer.storage import load_default_design

    if "default" in case:
        return load_default_design()
    shape = (16, 2048, 2048) if "16 x" in case else (1, 1024, 65536)
    generator = torch.Generator().manual_seed(0)
    return Design(Layout(torch.rand(shape, generator=generator) < 0.05, 16), name=case)


def strokes_for(case: str, shape: tuple[int, int, int]) -> list[dict]:
    import numpy as np

    _, rows, cols = shape
    if "toggles" in case:
        region = {"kind": "rect", "row0": 0, "col0": 0, "row1": rows - 1, "col1": cols - 1}
        return [paint(seq, "toggle", None, region) for seq in range(1, 65)]
    if "masks" in case:
        bits = base64.b64encode(np.packbits(np.ones(rows * cols, bool)).tobytes()).decode()
        region = {"kind": "mask", "row0": 0, "col0": 0, "rows": rows, "cols": cols, "bits": bits}
        return [paint(seq, "toggle", [0], region) for seq in (1, 2)]
    if "bands" in case:
        region = {"kind": "band", "low": -cols, "high": cols}
        return [paint(seq, "toggle", [0], region) for seq in range(1, 65)]
    cells = [(r, (r * 7) % cols) for r in range(64)]
    return [
        paint(seq, "toggle", [0], {"kind": "rect", "row0": r, "col0": c, "row1": r, "col1": c})
        for seq, (r, c) in enumerate(cells, 1)
    ]


def paint(seq: int, action: str, heads, region: dict) -> dict:
    return {"seq": seq, "op": "paint", "head": 0, "action": action, "heads": heads,
            "region": region}  # fmt: skip


def run_case(case: str) -> dict:
    """Play one case out in this process."""
    import torch

    torch.set_num_threads(1)  # as the app does
    from designer.analysis import cached_analysis, head_tiles
    from designer.storage import DesignStore
    from ui import keys, state
    from ui.canvas.apply import apply_trigger
    from ui.canvas.payload import head_payload

    design = design_for(case)
    strokes = strokes_for(case, design.layout.shape)
    session: dict = {}
    with tempfile.TemporaryDirectory() as folder:
        store = DesignStore(folder)
        state.init_session(session, {}, store, lambda: design)
        cached_analysis(design)  # the page before the strokes
        triggers = []
        while True:
            done = state.box(session).last_done(keys.PAINT_DONE)[1]
            left = [s for s in strokes if s["seq"] > done]
            if not left:
                break
            value = {"client": CLIENT, "strokes": left}
            _, cost = measure(lambda value=value: apply_trigger(session, value, store))
            after = state.box(session).last_done(keys.PAINT_DONE)[1]
            triggers.append({**cost, "strokes_done": after - done})
            if after == done:
                raise RuntimeError(f"a trigger did nothing: {state.message(session, 'editor')}")

        def render() -> None:
            current = state.design(session)
            cached_analysis(current)
            blocks = current.layout.blocks[0].numpy()
            tiles = head_tiles(blocks, current.effective_start_width)
            head_payload(blocks, tiles.widths, tiles.odd)

        _, render_cost = measure(render)
        message = state.message(session, keys.EDITOR_PLACE)
    return {
        "strokes": len(strokes),
        "triggers": triggers,
        "worst_trigger_cpu_s": max(t["cpu_s"] for t in triggers),
        "worst_trigger_extra_peak_mb": max(t["extra_peak_mb"] for t in triggers),
        "render_after": render_cost,
        "message": message,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case)))
        return
    results = {}
    for case in CASES:
        done = subprocess.run(
            [sys.executable, __file__, "--case", case], capture_output=True, text=True, check=True
        )
        result = results[case] = json.loads(done.stdout.strip().splitlines()[-1])
        render = result["render_after"]
        worst_cpu, worst_mb = result["worst_trigger_cpu_s"], result["worst_trigger_extra_peak_mb"]
        print(
            f"{case:48} {len(result['triggers']):2} triggers, worst cpu {worst_cpu:5.2f} s, "
            f"peak +{worst_mb:5.0f} MB; render after: cpu {render['cpu_s']:5.2f} s, "
            f"+{render['extra_peak_mb']:5.0f} MB"
        )
    if args.json:
        meta = {**run_meta(), "targets": {"trigger_cpu_s": 2.0, "trigger_extra_peak_mb": 512}}
        args.json.write_text(json.dumps({"meta": meta, "cases": results}, indent=2) + "\n")


def load_average() -> list[float]:
    """The machine's 1, 5 and 15 minute load averages (timings on a busy machine are slower)."""
    return [round(load, 2) for load in os.getloadavg()]


def run_meta() -> dict:
    """What a result was measured on: the date, the machine, its load, the CPUs, the versions
    that matter and the commit measured ("-dirty": with changes not committed)."""
    import numba
    import numpy
    import streamlit
    import torch

    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()  # fmt: skip
    return {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {_cpu_model()}, {platform.platform(terse=True)}",
        "cpus": os.cpu_count(),
        "load_average": load_average(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "streamlit": streamlit.__version__,
        "commit": commit,
    }


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
