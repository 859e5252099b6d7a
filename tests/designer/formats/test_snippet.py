import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from designer.design import Design
from designer.formats import python_snippet, save_design
from tests.factories import random_layout

ROOT = Path(__file__).resolve().parents[3]


def test_snippet_runs_and_loads_the_design_both_ways(tmp_path, rng):
    filename = 'it\'s "mine" (v2).pt'
    design = Design(random_layout(rng, n_heads=3, n_q_blocks=4, n_k_blocks=5), name="window")
    save_design(design, tmp_path / filename)
    script = tmp_path / "load.py"
    script.write_text(python_snippet(filename))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert first == f"window (3, 4, 5) block 16 density {design.layout.density}"
    assert second == "window (3, 4, 5) block 16"


def test_file_names_stay_data():
    code = python_snippet("x'); import os; os.system('echo hi'); ('.pt")
    calls = [node for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Import)]
    assert [alias.name for node in calls for alias in node.names] == ["numpy", "torch"]


@pytest.mark.parametrize(
    ("filename", "error", "message"),
    [
        (Path("a.pt"), TypeError, r"filename must be a str, got \w*Path"),
        ("", ValueError, "filename must be 1 to 255 printable characters, got ''"),
        ("a\nb.pt", ValueError, r"printable characters, got 'a\\nb.pt'"),
        ("a" * 256, ValueError, "filename must be 1 to 255 printable characters"),
    ],
)
def test_bad_file_names_are_refused(filename, error, message):
    with pytest.raises(error, match=message):
        python_snippet(filename)
