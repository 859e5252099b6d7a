"""Bounded cost: the worst allowed upload or parameter change, and a victim session beside it.

    python tools/bounded_cost.py            # every case, then the two-session check
    python tools/bounded_cost.py --json out.json

Each case runs in its own Python process, so its peak memory is its own: the script reports the
CPU seconds (user + system, all threads) and the growth of peak RSS over the process after its
imports. Cases:

- **allowed at the limits**: the largest design file (4 x 4096 x 4096 blocks, bit-packed), and
  recipes whose estimated build time is just under ``MAX_BUILD_SECONDS``: the costliest pattern
  step at each largest shape, BigBird with as many random blocks as the budget allows, as many
  full-grid band edits as it allows;
- **refused**: the payloads that once stalled the server (a 506-byte BigBird recipe, 256 steps,
  an expanded tensor, nesting, a 5M-item list, a zip bomb), which must fail fast.

Then two real sessions share one server (``AppTest``, two threads, one process): one uploads the
largest design while the other, a fresh session, renders again and again; the script prints the
slowest victim render. Targets: <= 2 s CPU and <= 512 MB extra peak per case, victim <= 1 s.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LARGEST = (4, 4096, 4096)


def _recipe_text(n_heads, n_q, n_k, steps, edits=()) -> bytes:
    recipe = {
        "n_heads": n_heads, "n_q_blocks": n_q, "n_k_blocks": n_k, "block_size": 16,
        "steps": [{"pattern": p, "params": params, "heads": None, "combine": "union"}
                  for p, params in steps],
        "edits": list(edits),
    }  # fmt: skip
    content = {
        "format": "blocksparse-design-recipe", "version": 1, "name": "limit", "causal": False,
        "start_width": None, "created": "2026-11-30T00:00:00+00:00",
        "modified": "2026-11-30T00:00:00+00:00", "recipe": recipe,
    }  # fmt: skip
    return json.dumps(content).encode()


def _fits(text: bytes) -> bool:
    from designer.edit import edit_from_dict
    from designer.formats.json_recipe import parse_json
    from designer.recipe import Recipe, RecipeStep

    recipe = parse_json(text, "recipe")["recipe"]
    try:
        Recipe(
            recipe["n_heads"], recipe["n_q_blocks"], recipe["n_k_blocks"], recipe["block_size"],
            tuple(RecipeStep(**step) for step in recipe["steps"]),
            tuple(edit_from_dict(edit) for edit in recipe["edits"]),
        )  # fmt: skip
    except ValueError:
        return False
    return True


def _most(make, high: int) -> bytes:
    """``make(n)`` for the largest ``n <= high`` that the budget allows (a binary search)."""
    low = 0
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if _fits(make(middle)) else (low, middle - 1)
    return make(low)


def allowed_cases() -> dict[str, bytes]:
    """The costliest files the loaders accept."""
    import torch

    from designer.design import Design
    from designer.formats import save_design
    from designer.layout import Layout
    from designer.recipe_cost import NS_PER_CELL

    generator = torch.Generator().manual_seed(0)
    largest = Design(Layout(torch.rand(LARGEST, generator=generator) < 0.05, 16), name="largest")
    buffer = io.BytesIO()
    save_design(largest, buffer)
    cases = {"largest design file (4 x 4096^2, 8 MiB)": buffer.getvalue()}
    costliest = sorted(NS_PER_CELL, key=NS_PER_CELL.get)[-4:]
    per_head = {"different_layout_per_head": True}
    for name, params in [*((name, {}) for name in costliest), ("deepspeed_fixed", per_head)]:
        cases[f"{name}, most heads allowed at 2048^2"] = _most(
            lambda h, name=name, params=params: _recipe_text(h, 2048, 2048, [(name, params)]), 16
        )
    cases["BigBird, most random blocks allowed, 16 x 2048^2"] = _most(
        lambda r: _recipe_text(16, 2048, 2048, [("deepspeed_bigbird", {"num_random_blocks": r})]),
        2047,
    )
    band = {"op": "edit", "action": "toggle", "region": {"kind": "band", "lo": -4, "hi": 4},
            "heads": None}  # fmt: skip
    cases["most full-grid band edits allowed, 16 x 2048^2"] = _most(
        lambda n: _recipe_text(16, 2048, 2048, [("causal", {})], [band] * n), 200
    )
    transpose = {"op": "transpose"}
    cases["one transpose, then a copy of the largest grid"] = _recipe_text(
        *LARGEST, [("causal", {})], [transpose]
    )
    return cases


def refused_cases() -> dict[str, bytes]:
    """Payloads that once stalled the server or escaped as tracebacks."""
    import torch

    bigbird = {"num_random_blocks": 2047, "different_layout_per_head": True}
    step = ("sliding_window", {"window_blocks": 3})

    def saved(content) -> bytes:
        buffer = io.BytesIO()
        torch.save(content, buffer)
        return buffer.getvalue()

    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data/0", bytes(512 << 20))
    return {
        "506-byte BigBird recipe": _recipe_text(16, 2048, 2048, [("deepspeed_bigbird", bigbird)]),
        "256 steps at 16 x 2048^2": _recipe_text(16, 2048, 2048, [step] * 256),
        "200 band edits at 16 x 2048^2": _recipe_text(
            16,
            2048,
            2048,
            [],
            [
                {
                    "op": "edit",
                    "action": "set",
                    "heads": None,
                    "region": {"kind": "band", "lo": 0, "hi": 0},
                }
            ]
            * 200,
        ),
        "stride-0 tensor, 2 KB": saved(torch.ones(1, dtype=torch.int64).expand(16, 2048, 2048)),
        "5M-item block_size list": saved(
            {"format": "blocksparse-design", "block_size": list(range(5_000_000))}
        ),
        "512 MiB deflated zip of zeros": bomb.getvalue(),
    }


def _memory_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_case(path: str) -> dict:
    """Read one file as an upload, in this process; what it cost.

    Peak memory: the kernel's high-water mark is reset (``/proc/self/clear_refs``) after the
    imports and the file's bytes are in memory, so the figure is what reading it added.
    """
    from designer.formats import read_design_file

    data = Path(path).read_bytes()
    Path("/proc/self/clear_refs").write_text("5")
    rss0, cpu0, wall = _memory_kib("VmRSS"), _cpu_s(), time.perf_counter()
    try:
        loaded = read_design_file(data)
        outcome = "loaded " + loaded.describe()
    except ValueError as error:
        outcome = f"refused: {str(error)[:100]}"
    return {
        "cpu_s": _cpu_s() - cpu0,
        "wall_s": time.perf_counter() - wall,
        "extra_peak_mb": (_memory_kib("VmHWM") - rss0) / 1024,
        "outcome": outcome,
    }


def calibrate() -> None:
    """CPU nanoseconds per cell of generating each pattern, worst over four large shapes."""
    from designer.patterns.registry import PATTERNS, make_pattern
    from designer.recipe_cost import NS_PER_CELL

    for name in PATTERNS:
        if name.startswith("deepspeed_"):
            continue
        worst = 0.0
        for shape in (LARGEST, (16, 2048, 2048), (64, 1024, 1024), (1024, 256, 256)):
            start = _cpu_s()
            make_pattern(name, *shape, 16, {})
            worst = max(worst, (_cpu_s() - start) * 1e9 / (shape[0] * shape[1] * shape[2]))
        print(f"{name:22} measured {worst:5.1f} ns/cell, estimated {NS_PER_CELL[name]}")


def victim_renders() -> dict:
    """A fresh session renders while another uploads the largest design, on one server."""
    os.environ["BSD_DATA_DIR"] = tempfile.mkdtemp()
    from streamlit.testing.v1 import AppTest

    from ui import keys

    app = str(ROOT / "app.py")

    def fresh() -> float:
        start = time.perf_counter()
        AppTest.from_file(app, default_timeout=120).run()
        return time.perf_counter() - start

    fresh()  # imports and caches warm, as on a running server
    alone = min(fresh() for _ in range(3))
    data = allowed_cases()["largest design file (4 x 4096^2, 8 MiB)"]
    attacker = AppTest.from_file(app, default_timeout=600)
    attacker.session_state["tab"] = "Files"
    attacker.run()
    spent = {}

    def upload() -> None:
        start = time.perf_counter()
        attacker.file_uploader(key=keys.UPLOAD).upload("largest.pt", data).run()
        spent["attacker_s"] = time.perf_counter() - start

    thread = threading.Thread(target=upload)
    thread.start()
    renders = []
    while thread.is_alive():
        renders.append(fresh())
    thread.join()
    return {"victim_alone_s": alone, "victim_renders_s": renders, **spent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--calibrate", action="store_true", help="measure the per-cell rates")
    args = parser.parse_args()
    if args.calibrate:
        calibrate()
        return
    if args.case:
        print(json.dumps(run_case(args.case)))
        return
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for group, cases in (("allowed", allowed_cases()), ("refused", refused_cases())):
            for name, data in cases.items():
                path = Path(folder) / "case"
                path.write_bytes(data)
                done = subprocess.run(
                    [sys.executable, __file__, "--case", str(path)],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                result = json.loads(done.stdout.strip().splitlines()[-1])
                results[name] = {"group": group, "bytes": len(data), **result}
                print(
                    f"{group:8} {name:52} {len(data):>11,} B  cpu {result['cpu_s']:5.2f} s  "
                    f"wall {result['wall_s']:5.2f} s  "
                    f"peak +{result['extra_peak_mb']:6.0f} MB  {result['outcome'][:60]}"
                )
    worst_cpu = max(results.values(), key=lambda r: r["cpu_s"])
    worst_mem = max(results.values(), key=lambda r: r["extra_peak_mb"])
    print(f"\nworst CPU time: {worst_cpu['cpu_s']:.2f} s (target <= 2 s)")
    print(f"worst extra peak memory: {worst_mem['extra_peak_mb']:.0f} MB (target <= 512 MB)")
    victim = victim_renders()
    slowest = max(victim["victim_renders_s"], default=float("nan"))
    print(
        f"victim render while the largest design uploads: slowest {slowest:.2f} s over "
        f"{len(victim['victim_renders_s'])} renders (alone {victim['victim_alone_s']:.2f} s; "
        f"the upload's whole rerun took {victim.get('attacker_s', float('nan')):.1f} s; "
        f"target <= 1 s)"
    )
    if args.json:
        meta = {"date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count()}
        payload = {"meta": meta, "cases": results, "victim": victim}
        Path(args.json).write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
