"""Check the app's GPU panel on a real GPU: ``AppTest`` drives the app, and the panel's numbers
are compared with ``python -m gpu.bench`` on the same case.

    PYTHONPATH=. python tools/app_check.py --out app_check.json

Run from the repository root. Needs a CUDA GPU with CuPy, and Streamlit. Each step is recorded
in the JSON summary, rewritten after every check so a run cut short keeps what it did; the exit
status is 0 when all passed.

1. ``python -m gpu.bench --case CASE`` in a subprocess (or ``--cli-json``): the reference numbers.
   Contenders: the case's, less those that autotune for minutes (``--contenders all`` keeps them).
   The case's peers (``flex_flash``, ``cudnn_bsa``) must be installed (``pip install -e
   ".[peers]"``); ``--allow-no-peers`` runs without those that are not, and says so.
2. The app, opened on the case's layout (restored from an autosave, as a reload does), GPU tab,
   the case's settings, Run: no error, the table, the charts and the per-head errors are there;
   the config equals the command line's; every contender's ms is within ``--tolerance`` of the
   command line's; each peer ran, was checked against fp64 and is in the speedup chart; the
   per-head errors agree with the harness's; the peak GPU memory is within the estimate times
   its margin.
3. Another browser session on the same design asks for a batch whose q, k, v cannot fit: refused
   before launch. With the memory margin at 0 the same run really runs out of memory: the
   message shows, the memory comes back, the design is untouched. Then the case's own settings
   run again in that session and match the command line.
4. The design's stored runs are listed, and two of them overlay.
5. A fresh session (the default design) sweeps lengths 1024 and 2048 with fused and cuDNN: the
   speedup-against-sparsity and time-against-length charts show.

Without a GPU it checks the no-GPU panel instead (reason, CPU check) and fails unless
``--allow-no-gpu``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path

import torch

from gpu import unavailable_reason
from gpu.bench import peers
from gpu.bench.cases import find_case
from gpu.bench.report import environment
from gpu.bench.variants import ACCURACY_LIMITS

try:  # the app needs Streamlit: without it the summary says so instead of a bare traceback
    from designer.analysis import design_digest
    from designer.design import Design
    from designer.storage import DATA_DIR_ENV, DesignStore
    from gpu.bench.memory import DEFAULT_MARGIN, estimate_memory
    from gpu.bench.results import problems as problems_of
    from gpu.bench.store import RunStore
    from ui import keys
    from ui.bench import settings
except ImportError as error:
    APP_IMPORT_ERROR: ImportError | None = error
else:
    APP_IMPORT_ERROR = None

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
SESSIONS = ("appcheckrun01", "appcheckoom01")


class Summary:
    """The checks so far, written to ``path`` after each one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict = {"ok": True, "checks": []}

    def put(self, key: str, value) -> None:
        self.data[key] = value
        self.write()

    def check(self, name: str, ok: bool, detail="") -> bool:
        self.data["checks"].append({"name": name, "ok": bool(ok), "detail": detail})
        self.data["ok"] = self.data["ok"] and bool(ok)
        print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""), flush=True)
        self.write()
        return bool(ok)

    def write(self) -> None:
        self.path.write_text(json.dumps(self.data, indent=1, default=str) + "\n")


def gpu_memory() -> tuple[int, int]:
    """``(free, total)`` bytes of the GPU."""
    return torch.cuda.mem_get_info()


def allocated_bytes() -> int:
    return torch.cuda.memory_allocated() if torch.cuda.is_available() else 0


def open_app(session_id: str | None, timeout: float):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=timeout)
    if session_id:
        at.query_params[keys.SESSION_QUERY_PARAM] = session_id
    at.session_state["tab"] = "GPU benchmark"
    return at.run()


def apply_settings(at, config) -> None:
    at.number_input(key=keys.GPU_BATCH).set_value(config.batch)
    at.selectbox(key=keys.GPU_HEAD_DIM).set_value(config.head_dim)
    at.selectbox(key=keys.GPU_DTYPE).set_value(config.dtype)
    at.toggle(key=keys.GPU_CAUSAL).set_value(config.causal)
    at.multiselect(key=keys.GPU_CONTENDER_PICK).set_value(list(config.contenders))
    at.number_input(key=keys.GPU_WARMUP).set_value(config.warmup)
    at.number_input(key=keys.GPU_REPS).set_value(config.reps)
    at.number_input(key=keys.GPU_SEED).set_value(config.seed)
    at.toggle(key=keys.GPU_FLUSH).set_value(config.flush_l2)
    at.toggle(key=keys.GPU_CHECK_ERROR).set_value(config.check_error)
    at.run()


def click(at, key: str, timeout: float):
    return at.button(key=key).click().run(timeout=timeout)


def problems(at) -> list[str]:
    return [str(e.value) for e in at.exception] + [e.value for e in at.error]


def chart_specs(at) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def chart_titles(at) -> list[str]:
    return [spec["layout"].get("title", {}).get("text", "") for spec in chart_specs(at)]


def charted(at, title: str) -> list[str]:
    """The bars (contenders) of the chart called ``title``."""
    for spec in chart_specs(at):
        if spec["layout"].get("title", {}).get("text") == title:
            return [x for trace in spec["data"] for x in trace.get("x", ())]
    return []


def compare(panel_case: dict, cli_case: dict, tolerance: float) -> tuple[list[dict], bool]:
    """Side by side per contender; ok when every contender ran in both within tolerance."""
    panel_by_name = {r["name"]: r for r in panel_case["results"]}
    rows, ok = [], True
    for cli in cli_case["results"]:
        mine = panel_by_name.get(cli["name"], {})
        ratio = mine["ms"] / cli["ms"] if mine.get("ms") and cli.get("ms") else None
        good = (cli["status"] == mine.get("status")) and (
            cli["status"] != "ok" or (ratio is not None and abs(ratio - 1) <= tolerance)
        )
        ok = ok and good
        rows.append(
            {
                "contender": cli["name"],
                "status": f"{mine.get('status')}/{cli['status']}",
                "panel ms": mine.get("ms"),
                "cli ms": cli.get("ms"),
                "ratio": ratio,
                "panel TFLOP/s": mine.get("tflops"),
                "cli TFLOP/s": cli.get("tflops"),
                "panel rel err": mine.get("rel_error"),
                "cli rel err": cli.get("rel_error"),
                "ok": good,
            }
        )
    return rows, ok


def table_text(rows: list[dict]) -> str:
    def cell(value) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    names = list(rows[0]) if rows else []
    lines = [[cell(row[n]) for n in names] for row in rows]
    widths = [max(len(n), *(len(line[i]) for line in lines)) for i, n in enumerate(names)]
    text = ["  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True))]
    text += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    return "\n".join(text)


def cli_case(args, config, out_dir: Path) -> dict:
    """The case as ``python -m gpu.bench`` measures it (or as ``--cli-json`` holds it)."""
    if args.cli_json:
        return json.loads(Path(args.cli_json).read_text())["cases"][0]
    path = out_dir / "cli.json"
    command = [sys.executable, "-m", "gpu.bench", "--case", args.case, "--out", str(path)]
    command += ["--contenders", ",".join(config.contenders)] + (["--quick"] if args.quick else [])
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
    print(done.stdout[-4000:], done.stderr[-2000:], sep="\n", flush=True)
    print(f"python -m gpu.bench took {time.perf_counter() - started:.0f} s", flush=True)
    done.check_returncode()
    return json.loads(path.read_text())["cases"][0]


def run_case_in_panel(summary, at, config, cli, args, label: str) -> dict | None:
    """Run the case in a session and compare it with the command line."""
    apply_settings(at, config)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    before = allocated_bytes()
    started = time.perf_counter()
    click(at, keys.GPU_RUN_BUTTON, args.timeout)
    seconds = time.perf_counter() - started
    record = at.session_state[keys.GPU_LAST_RUN]
    if not summary.check(
        f"{label}: runs without error",
        not problems(at) and record["doc"],
        f"{seconds:.0f} s; {problems(at)}",
    ):
        return None
    case = record["doc"]["cases"][0]
    summary.check(
        f"{label}: same config as the command line",
        _plain_config(case["config"]) == _plain_config(cli["config"]),
        {"panel": case["config"], "cli": cli["config"]},
    )
    failed = problems_of(case)
    summary.check(f"{label}: every contender measured", not failed, failed)
    rows, ok = compare(case, cli, args.tolerance)
    summary.put(f"{label} table", rows)
    print(table_text(rows), flush=True)
    summary.check(f"{label}: ms within ±{args.tolerance:.0%} of the command line", ok)
    titles = chart_titles(at)
    wanted = (
        "Speedup over dense attention",
        "Effective TFLOP/s",
        "Error against the fp64 reference, per head",
    )
    summary.check(
        f"{label}: charts and table shown",
        all(t in titles for t in wanted) and len(at.dataframe) >= 1,
        titles,
    )
    harness = {r["name"]: r for r in case["results"]}
    bars = charted(at, "Speedup over dense attention")
    wrong = {
        name: f"{harness[name]['status']}, rel err {harness[name].get('rel_error')}, charted "
        f"{name in bars}: {harness[name].get('message') or ''}"
        for name in config.contenders
        if name in peers.PEERS and not (
            harness[name]["status"] == "ok" and harness[name].get("rel_error") is not None
            and harness[name]["rel_error"] <= ACCURACY_LIMITS["rel_error"] and name in bars
        )
    }  # fmt: skip
    summary.check(
        f"{label}: every peer measured, checked against fp64 and in the speedup chart",
        not wrong,
        wrong or [name for name in config.contenders if name in peers.PEERS],
    )
    for name, detail in case.get("details", {}).items():
        worst = max(detail.get("head_max_abs", [float("nan")]))
        expected = harness[name]["max_abs_error"]
        summary.check(
            f"{label}: per-head errors of {name} match the harness",
            expected is not None and abs(worst - expected) <= 1e-2 * expected + 1e-6,
            detail.get("error") or f"max over heads {worst:.3e}, harness {expected}",
        )
    if torch.cuda.is_available():
        peak = torch.cuda.max_memory_allocated() - before
        layout = case["layout"]
        estimate = estimate_memory(config, layout["nnz"], layout["block_size"]).total
        summary.check(
            f"{label}: peak memory within the estimate × {DEFAULT_MARGIN}",
            peak <= DEFAULT_MARGIN * estimate,
            f"peak {peak / 2**20:.0f} MiB, estimate {estimate / 2**20:.0f} MiB",
        )
    return case


def _plain_config(config: dict) -> dict:
    """A config with ``seq_k`` spelled out (None means ``seq_q``)."""
    return {**config, "seq_k": config.get("seq_k") or config["seq_q"]}


def oom_batch(config) -> int | None:
    """A batch whose q, k and v alone exceed 1.2 x the GPU's memory (None if 1024 is too small)."""
    _, total = gpu_memory()
    per_batch = 3 * 2 * config.heads * config.seq_q * 128
    batch = 1
    while batch * per_batch <= 1.2 * total and batch < 1024:
        batch *= 2
    return batch if batch * per_batch > 1.2 * total else None


def failure_steps(summary, config, cli, design, args) -> None:
    at = open_app(SESSIONS[1], args.timeout)
    batch = oom_batch(config)
    if not summary.check("a batch that cannot fit exists", batch is not None):
        return
    at.number_input(key=keys.GPU_BATCH).set_value(batch)
    at.selectbox(key=keys.GPU_HEAD_DIM).set_value(128).run()
    before = allocated_bytes()
    click(at, keys.GPU_RUN_BUTTON, args.timeout)
    errors = [e.value for e in at.error]
    summary.check(
        "too large: refused before launch with the estimate",
        errors and errors[0].startswith("Refused before launch") and allocated_bytes() == before,
        errors,
    )
    at.number_input(key=keys.GPU_MARGIN).set_value(0.0).run()
    free_before, _ = gpu_memory()
    click(at, keys.GPU_RUN_BUTTON, args.timeout)
    errors = [e.value for e in at.error]
    free_after, _ = gpu_memory()
    summary.check(
        "margin 0: really out of memory, message shown",
        not at.exception and errors and errors[0].startswith("Out of memory"),
        errors,
    )
    summary.check(
        "out of memory: GPU memory given back",
        free_after >= free_before - (1 << 30) and allocated_bytes() <= before + (64 << 20),
        f"free {free_before >> 20} -> {free_after >> 20} MiB",
    )
    summary.check(
        "out of memory: the design is untouched",
        at.session_state[keys.HISTORY].present.layout == design.layout,
    )
    at.session_state["tab"] = "Analysis"
    at.run()
    summary.check("out of memory: the rest of the app works", not at.exception)
    at.session_state["tab"] = "GPU benchmark"
    at.run()
    at.number_input(key=keys.GPU_MARGIN).set_value(DEFAULT_MARGIN)
    run_case_in_panel(summary, at, config, cli, args, "after out of memory")


def stored_steps(summary, design, data_dir: str, args) -> None:
    at = open_app(SESSIONS[0], args.timeout)
    runs, unreadable = RunStore(data_dir).runs(design_digest(design))
    names = [run.path.name for run in runs]
    overlay = at.multiselect(key=keys.GPU_OVERLAY_PICK)
    if summary.check(
        "stored runs listed",
        len(names) >= 2 and len(overlay.options) == len(names) and not unreadable,
        overlay.options,
    ):
        overlay.set_value(names[:2]).run()
        summary.check("two runs overlaid", "Two runs overlaid" in chart_titles(at))


def sweep_step(summary, args) -> None:
    at = open_app(None, args.timeout)  # a new session on the default design
    at.multiselect(key=keys.GPU_CONTENDER_PICK).set_value(["fused", "sdpa_cudnn"])
    at.multiselect(key=keys.GPU_SWEEP_LENGTH_PICK).set_value([1024, 2048]).run()
    click(at, keys.GPU_SWEEP_BUTTON, args.timeout)
    record = at.session_state[keys.GPU_LAST_SWEEP]
    titles = chart_titles(at)
    summary.check(
        "length sweep: measured, both charts shown",
        record["doc"] is not None
        and len(record["doc"]["cases"]) == 3
        and {"Speedup against sparsity", "Time against sequence length"} <= set(titles),
        {"error": record["error"], "titles": titles},
    )


def no_gpu_steps(summary, args) -> None:
    at = open_app(None, args.timeout)
    summary.check(
        "no GPU: the panel says why",
        any("cannot run on this machine" in w.value for w in at.warning),
    )
    click(at, keys.GPU_CPU_BUTTON, args.timeout)
    record = at.session_state.get(keys.GPU_LAST_CPU_CHECK) if not at.exception else None
    summary.check(
        "no GPU: the CPU check runs", record is not None and not problems(at), problems(at)
    )


def step(summary: Summary, name: str, work):
    """Run one step; a crash becomes a failed check (with its cause) and the next step runs."""
    started = time.perf_counter()
    try:
        return work()
    except Exception as error:
        tail = traceback.format_exc().strip().splitlines()[-6:]
        summary.check(f"{name}: finished", False, [f"{type(error).__name__}: {error}", *tail])
        return None
    finally:
        seconds = summary.data.setdefault("seconds", {})
        seconds[name] = round(time.perf_counter() - started, 1)
        summary.write()


def contenders_for(args, case) -> tuple[str, ...]:
    """The case's contenders, less the slow-to-compile ones unless ``--contenders`` says."""
    if args.contenders == "all":
        return case.config().contenders
    if args.contenders:
        return tuple(args.contenders.split(","))
    return tuple(c for c in case.config().contenders if c not in settings.SLOW_TO_COMPILE)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tools/app_check.py",
        description="Drive the app's GPU panel with AppTest on a real GPU and compare its numbers "
        "with python -m gpu.bench; write a JSON summary.",
    )
    parser.add_argument("--out", required=True, help="where to write the JSON summary")
    parser.add_argument("--case", default="banded_7pct-b128-d64", help="a standard case")
    parser.add_argument("--quick", action="store_true", help="the case at S=4096, few reps")
    parser.add_argument(
        "--contenders",
        help="comma-separated, or 'all' (default: the case's but those slow to compile)",
    )
    parser.add_argument("--tolerance", type=float, default=0.15, help="allowed ms difference")
    parser.add_argument("--timeout", type=float, default=420, help="seconds per app run")
    parser.add_argument("--cli-json", help="use this gpu.bench JSON instead of running it")
    parser.add_argument("--allow-no-gpu", action="store_true", help="pass without a GPU")
    parser.add_argument(
        "--allow-no-peers",
        action="store_true",
        help="run without the peers that are not installed instead of failing",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    summary = Summary(Path(args.out))
    summary.put("environment", environment())
    if not summary.check("the app imports", APP_IMPORT_ERROR is None, APP_IMPORT_ERROR or ""):
        return 1
    reason = unavailable_reason()
    summary.put("gpu_unavailable_reason", reason)
    with tempfile.TemporaryDirectory() as data_dir:
        os.environ[DATA_DIR_ENV] = data_dir
        if reason is not None:
            step(summary, "no GPU", lambda: no_gpu_steps(summary, args))
            summary.check("GPU available", args.allow_no_gpu, reason)
            return 0 if summary.data["ok"] else 1
        case = find_case(args.case)
        config = replace(case.config(quick=args.quick), contenders=contenders_for(args, case))
        summary.put("peers", {name: peers.missing(name) or "installed" for name in peers.PEERS})
        absent = {name: why for name in config.contenders if (why := peers.missing(name))}
        if absent:
            summary.check("the case's peers are installed", args.allow_no_peers, absent)
            config = replace(config, contenders=tuple(c for c in config.contenders
                                                      if c not in absent))  # fmt: skip
        design = Design(case.layout(quick=args.quick), name=case.name)
        for session_id in SESSIONS:
            DesignStore(data_dir).autosave(session_id, design)
        summary.put("config", asdict(config))
        cli = step(summary, "command line", lambda: cli_case(args, config, Path(data_dir)))
        if cli is None:
            return 1
        summary.put("cli", cli)
        step(summary, "panel run", lambda: run_case_in_panel(
            summary, open_app(SESSIONS[0], args.timeout), config, cli, args, "panel run"
        ))  # fmt: skip
        step(summary, "failures", lambda: failure_steps(summary, config, cli, design, args))
        step(summary, "stored runs", lambda: stored_steps(summary, design, data_dir, args))
        step(summary, "sweep", lambda: sweep_step(summary, args))
    return 0 if summary.data["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
