"""The wheel is complete: built from the checkout, installed into a clean virtual environment
outside it, it carries every file the packages load and serves the app.

The environment sees the machine's packages (``--system-site-packages``: torch and streamlit are
not installed again), so the test checks that every module came from the environment's own copy
of the wheel, not from the checkout or an editable install. The smoke script runs from a folder
holding only itself and ``app.py``, with no ``PYTHON*`` variables set. Dependencies resolve offline
(``--no-index``) against what is installed; the build uses the installed setuptools (``.[dev]``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from designer.analysis import analyse
from designer.storage import load_default_design

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("designer", "gpu", "ui")
#: Files of the packages that are notes for readers, not loaded at run time.
NOT_SHIPPED = (".md",)
CACHE = "__pycache__"
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)

pytestmark = pytest.mark.slow


def run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> None:
    """Run ``command``; a failure shows its output."""
    done = subprocess.run(
        [str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{' '.join(map(str, command))}:\n{done.stdout}\n{done.stderr}"


def package_files(root: Path) -> set[str]:
    """Every file of the packages under ``root`` that a wheel must carry, relative to ``root``."""
    return {
        path.relative_to(root).as_posix()
        for package in PACKAGES
        for path in (root / package).rglob("*")
        if path.is_file() and CACHE not in path.parts and path.suffix not in (*NOT_SHIPPED, ".pyc")
    }


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Build the wheel from a copy of the checkout's packages, install it into a fresh virtual
    environment and run ``wheel_smoke.py`` there: its report and the environment's packages."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"  # setuptools builds in place: keep its build/ out of the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns(CACHE))
    pip = (sys.executable, "-m", "pip", "--disable-pip-version-check")
    run(*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index", "-w", work / "dist",
        source, cwd=work)  # fmt: skip
    (wheel,) = (work / "dist").glob("*.whl")
    venv = work / "venv"
    run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv, cwd=work)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    run(python, "-m", "pip", "--disable-pip-version-check", "install", "-q", "--no-index", wheel,
        cwd=work)  # fmt: skip
    # The smoke script and app.py alone: the script's folder comes first on the import path,
    # and the packages must come from the environment.
    app_folder = work / "app"
    app_folder.mkdir()
    for name in ("app.py", "tests/wheel_smoke.py"):
        shutil.copy2(ROOT / name, app_folder)
    env = {
        key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "BSD_"))
    }
    env["BSD_DATA_DIR"] = str(work / "data")
    # numba compiles the segmentation anew for a fresh install (20 s on two cores); compiled or
    # not it is the same code, which the rest of the suite runs compiled.
    env["NUMBA_DISABLE_JIT"] = "1"
    out = work / "report.json"
    run(python, app_folder / "wheel_smoke.py", app_folder / "app.py", out, cwd=work, env=env)
    report = json.loads(out.read_text())
    site = Path(report["site_packages"])
    return report, site


def test_every_module_comes_from_the_installed_wheel(installed):
    report, site = installed
    assert Path(report["prefix"]).name == "venv"
    files = {name: Path(file) for name, file in report["modules"].items()}
    elsewhere = {name: str(file) for name, file in files.items() if not file.is_relative_to(site)}
    assert not elsewhere, f"imported from outside {site}: {elsewhere}"
    imported = {file.relative_to(site).as_posix() for file in files.values()}
    modules = {name for name in package_files(ROOT) if name.endswith(".py")}
    commands = {name for name in modules if name.endswith("/__main__.py")}  # run, not imported
    assert modules - commands - imported == set()


def test_the_wheel_carries_every_file_the_packages_load(installed):
    _, site = installed
    missing = package_files(ROOT) - package_files(site)
    assert not missing, f"the wheel leaves out {sorted(missing)}"
    kernels = sorted(name for name in package_files(site) if name.endswith(".cu"))
    assert kernels, "the wheel carries no kernel source"
    assets = [name for name in package_files(site) if name.endswith((".js", ".css"))]
    assert any(name.startswith("ui/") for name in assets), "the wheel carries no canvas asset"


def test_every_kernel_include_resolves_inside_the_installed_package(installed):
    _, site = installed
    sources = [site / name for name in package_files(site) if name.endswith((".cu", ".cuh"))]
    shipped = {path.relative_to(site / "gpu").as_posix() for path in (site / "gpu").rglob("*")}
    unresolved = []
    for path in sources:
        for included in INCLUDE.findall(path.read_text(encoding="utf-8")):
            beside = (path.parent / included).is_file()
            in_a_folder = any(name == included or name.endswith(f"/{included}") for name in shipped)
            if not (beside or in_a_folder):
                unresolved.append(f"{path.relative_to(site)} includes {included!r}")
    assert sources and not unresolved, unresolved


def test_the_installed_app_opens_on_its_default_design(installed):
    report, _ = installed
    design = load_default_design()
    assert report["default_design"] == json.loads(
        json.dumps(
            {
                "name": design.name,
                "shape": list(design.layout.shape),
                "stats": dataclasses.asdict(analyse(design).stats),
            }
        )
    )
    assert report["reference_shape"] == [1, 2, 64, 32]
    for tab, seen in report["app"].items():
        assert seen["exceptions"] == [], tab


def test_the_installed_app_says_it_carries_no_committed_results(installed):
    report, _ = installed
    assert report["results_dir"] is None and report["committed_results"] == 0
    captions = report["app"]["GPU benchmark"]["captions"]
    assert any("This installed package carries no committed results" in c for c in captions)
