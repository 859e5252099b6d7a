"""The app from an installed wheel: run by ``tests/test_wheel.py`` with the interpreter of a
virtual environment that holds the built wheel, as ``python wheel_smoke.py APP OUT``, copied
with ``app.py`` into a folder outside the checkout.

It imports every module of the packages, builds the default design and its analysis, runs the
reference attention, opens the app (``APP``, a copy of ``app.py`` beside nothing else) on the
analysis and GPU tabs, and writes what it saw to ``OUT`` as JSON for the test to check.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import pkgutil
import sys
import sysconfig
from pathlib import Path

PACKAGES = ("designer", "gpu", "ui")


def module_files() -> dict[str, str]:
    """Every module of the packages, imported, and the file it came from."""
    files = {}
    for name in PACKAGES:
        package = importlib.import_module(name)
        files[name] = package.__file__
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if module.name.rsplit(".", 1)[-1] == "__main__":  # a command line: run, not imported
                continue
            files[module.name] = importlib.import_module(module.name).__file__
    return files


def default_design() -> dict:
    """The default design the app opens on, and its analysis."""
    from designer.analysis import analyse
    from designer.storage import load_default_design

    design = load_default_design()
    return {
        "name": design.name,
        "shape": list(design.layout.shape),
        "stats": dataclasses.asdict(analyse(design).stats),
    }


def reference_attention() -> list[int]:
    """The shape of the reference attention (plain torch, CPU) over a small pattern."""
    import torch

    import gpu
    from designer.patterns import make_pattern

    layout = make_pattern("sliding_window", 2, 4, 4, 16, {"window_blocks": 2})
    q = torch.randn(1, 2, 64, 32, dtype=torch.float64)
    return list(gpu.block_sparse_attention(q, q, q, layout, impl="reference").shape)


def app_runs(app: str) -> dict:
    """Open the app on its analysis and GPU tabs: the exceptions and captions each shows."""
    from streamlit.testing.v1 import AppTest

    seen = {}
    for tab in ("Analysis", "GPU benchmark"):
        at = AppTest.from_file(app, default_timeout=120)
        at.session_state["tab"] = tab
        at.run()
        seen[tab] = {
            "exceptions": [e.value for e in at.exception],
            "captions": [c.value for c in at.caption],
        }
    return seen


def main() -> None:
    app, out = sys.argv[1:]
    from gpu.bench import store

    report = {
        "prefix": sys.prefix,
        "site_packages": sysconfig.get_paths()["purelib"],
        "modules": module_files(),
        "default_design": default_design(),
        "reference_shape": reference_attention(),
        "results_dir": None if store.RESULTS_DIR is None else str(store.RESULTS_DIR),
        "committed_results": len(store.committed_results()[0]),
        "app": app_runs(app),
    }
    Path(out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
